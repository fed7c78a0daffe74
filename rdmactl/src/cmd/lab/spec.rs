//! From the command line to a VM spec: port forwards, added files, environment, and the
//! multi-host spec.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use rdma_lab::multi::{MultiMode, MultiSpec};
use rdma_lab::vm::RunSpec;

use super::VmArgs;

pub(super) fn parse_forward(spec: &str) -> Result<(u16, u16)> {
    let (h, g) = spec
        .split_once(':')
        .with_context(|| format!("--forward {spec}: expected HOST:GUEST ports"))?;
    let port = |p: &str| -> Result<u16> {
        p.parse::<u16>()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| format!("--forward {spec}: {p:?} is not a port"))
    };
    Ok((port(h)?, port(g)?))
}

pub(super) fn parse_add(spec: &str) -> Result<(PathBuf, String)> {
    let (host, guest) = match spec.split_once(':') {
        Some((h, g)) => (PathBuf::from(h), g.to_string()),
        None => {
            let p = PathBuf::from(spec);
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .with_context(|| format!("--add {spec}: no file name"))?
                .to_string();
            (p, format!("/opt/rdma/extra/{name}"))
        }
    };
    if !guest.starts_with('/') {
        bail!("--add {spec}: the guest path must be absolute");
    }
    if !host.is_file() {
        bail!("--add {spec}: {} is not a file", host.display());
    }
    Ok((host, guest))
}

pub(super) fn spec_from(vm: &VmArgs, files: Vec<(PathBuf, String)>) -> Result<RunSpec> {
    let mut files = files;
    for a in &vm.add {
        files.push(parse_add(a)?);
    }
    Ok(RunSpec {
        devices: vm.devices,
        memory_mib: vm.memory.unwrap_or(2048),
        cpus: vm.cpus.unwrap_or(2),
        files,
        ..RunSpec::default()
    })
}

/// Per-host memory and CPUs of a multi-host lab: small, N of them share this machine. The
/// memory must hold the initramfs twice while it unpacks (image + the multi-host test
/// binaries). With their debug sections those binaries outgrew 768 MiB (~270 MB on
/// 2026-12-01), then 1024 MiB (~350 MB on 2026-12-06); the VMs now get them stripped
/// (rdma_lab::strip: 31 MB image + 48 MB of binaries on 2026-12-06).
pub(super) const MULTI_MEMORY_MIB: u32 = 1024;
pub(super) const MULTI_CPUS: u32 = 1;

pub(super) fn multi_spec_from(
    vm: &VmArgs,
    files: Vec<(PathBuf, String)>,
    mode: MultiMode,
) -> Result<MultiSpec> {
    if vm.devices != 1 {
        bail!("--devices 2 (the veth pair) is for the single-host lab; a multi-host lab has rxe0 per host");
    }
    let mut files = files;
    for a in &vm.add {
        files.push(parse_add(a)?);
    }
    Ok(MultiSpec {
        hosts: vm.hosts as usize,
        mode,
        memory_mib: vm.memory.unwrap_or(MULTI_MEMORY_MIB),
        cpus: vm.cpus.unwrap_or(MULTI_CPUS),
        timeout: None,
        files,
        env: Vec::new(),
        forwards: Vec::new(),
        // This very binary, read through /proc (which works even after a rebuild replaced
        // its file); the lab copies it into its run directory before any qemu starts.
        relay: vec!["/proc/self/exe".into(), "lab".into(), "relay".into()],
    })
}

/// `[hK:]HOST:GUEST` for a lab of `hosts`: (host index, host port, guest port) entries.
pub(super) fn parse_multi_forward(spec: &str, hosts: usize) -> Result<Vec<(usize, u16, u16)>> {
    if let Some((h, rest)) = spec.split_once(':').filter(|(h, _)| h.starts_with('h')) {
        let i = rdma_lab::multi::parse_host(h, hosts)
            .map_err(|e| anyhow::anyhow!("--forward {spec}: {e}"))?;
        let (hp, gp) = parse_forward(rest)?;
        return Ok(vec![(i, hp, gp)]);
    }
    let (hp, gp) = parse_forward(spec)?;
    (0..hosts)
        .map(|i| {
            let p = u16::try_from(usize::from(hp) + i)
                .ok()
                .with_context(|| format!("--forward {spec}: port {hp}+{i} is out of range"))?;
            Ok((i, p, gp))
        })
        .collect()
}

pub(super) fn parse_env(list: &[String]) -> Result<Vec<(String, String)>> {
    list.iter()
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("--env {kv}: expected KEY=VALUE"))?;
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}
