//! The live suite lives in `tests/`; this library only holds helpers shared by its tests:
//! running the real rdma-core tools inside the lab and parsing what they print
//! (`ibv_devinfo -v`), and locating the project's binaries (`rdmactl`).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::path::PathBuf;
use std::process::{Command, Output};

/// One GID line of `ibv_devinfo -v`: `GID[  1]:  ::ffff:10.0.2.15, RoCE v2`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevinfoGid {
    /// Table index.
    pub index: u32,
    /// Address (both the full hex form and the `inet_ntop` form parse).
    pub gid: Ipv6Addr,
    /// GID type as printed (`RoCE v2`), when the tool prints one.
    pub gid_type: Option<String>,
}

/// One `port:` block of `ibv_devinfo -v`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DevinfoPort {
    /// Port number.
    pub port: u8,
    /// `key: value` lines, value trimmed (`state` -> `PORT_ACTIVE (4)`).
    pub fields: BTreeMap<String, String>,
    /// GID lines in order.
    pub gids: Vec<DevinfoGid>,
}

/// One `hca_id:` block of `ibv_devinfo -v`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DevinfoDevice {
    /// Device name.
    pub hca_id: String,
    /// Device-level `key: value` lines.
    pub fields: BTreeMap<String, String>,
    /// Ports in order.
    pub ports: Vec<DevinfoPort>,
}

impl DevinfoDevice {
    /// A device-level field.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// A port by number.
    pub fn port(&self, port: u8) -> Option<&DevinfoPort> {
        self.ports.iter().find(|p| p.port == port)
    }
}

impl DevinfoPort {
    /// A port field.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// The number in trailing parentheses of a field: `PORT_ACTIVE (4)` -> 4.
    pub fn code(&self, key: &str) -> Option<i64> {
        self.field(key).and_then(paren_code)
    }
}

/// The number in trailing parentheses: `1024 (3)` -> 3.
pub fn paren_code(value: &str) -> Option<i64> {
    let inner = value.trim().strip_suffix(')')?;
    let open = inner.rfind('(')?;
    inner[open + 1..].trim().parse().ok()
}

/// Parse a number printed as decimal or `0x` hex.
pub fn parse_num(value: &str) -> Option<u64> {
    let v = value.trim();
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// Parse the output of `ibv_devinfo -v` (any number of devices).
pub fn parse_devinfo(text: &str) -> Result<Vec<DevinfoDevice>, String> {
    let mut devices: Vec<DevinfoDevice> = Vec::new();
    for (lineno, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix("hca_id:") {
            devices.push(DevinfoDevice {
                hca_id: name.trim().to_string(),
                ..Default::default()
            });
            continue;
        }
        let Some(dev) = devices.last_mut() else {
            return Err(format!("line {}: {raw:?} before any hca_id", lineno + 1));
        };
        if let Some(num) = line.strip_prefix("port:") {
            let port = num
                .trim()
                .parse()
                .map_err(|e| format!("line {}: bad port {num:?}: {e}", lineno + 1))?;
            dev.ports.push(DevinfoPort {
                port,
                ..Default::default()
            });
            continue;
        }
        if let Some(rest) = line.strip_prefix("GID[") {
            let (index, value) = rest
                .split_once("]:")
                .ok_or_else(|| format!("line {}: bad GID line {raw:?}", lineno + 1))?;
            let index = index
                .trim()
                .parse()
                .map_err(|e| format!("line {}: bad GID index: {e}", lineno + 1))?;
            let (addr, gid_type) = match value.split_once(',') {
                Some((a, t)) => (a.trim(), Some(t.trim().to_string())),
                None => (value.trim(), None),
            };
            let gid = addr
                .parse()
                .map_err(|e| format!("line {}: bad GID {addr:?}: {e}", lineno + 1))?;
            let port = dev
                .ports
                .last_mut()
                .ok_or_else(|| format!("line {}: GID outside a port", lineno + 1))?;
            port.gids.push(DevinfoGid {
                index,
                gid,
                gid_type,
            });
            continue;
        }
        // Capability flag lists and "not supported" notes have no "key:" shape.
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key.contains(char::is_whitespace) && !key.starts_with("Unknown") {
            continue;
        }
        let target = match dev.ports.last_mut() {
            Some(port) => &mut port.fields,
            None => &mut dev.fields,
        };
        target.insert(key.trim().to_string(), value.trim().to_string());
    }
    Ok(devices)
}

/// Run a command, failing with a clear message when it cannot start.
pub fn run(cmd: &str, args: &[&str]) -> Result<Output, String> {
    Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {cmd} {}: {e}", args.join(" ")))
}

/// Run `ibv_devinfo -v -d DEVICE` and parse it.
pub fn ibv_devinfo(device: &str) -> Result<DevinfoDevice, String> {
    let out = run("ibv_devinfo", &["-v", "-d", device])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "ibv_devinfo -v -d {device} failed ({}): {}{}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut devs = parse_devinfo(&stdout)?;
    match devs.len() {
        1 => Ok(devs.remove(0)),
        n => Err(format!(
            "ibv_devinfo -d {device} printed {n} devices:\n{stdout}"
        )),
    }
}

/// The rdmactl binary under test: `$RDMACTL_BIN`, else `/opt/rdma/bin/rdmactl` (the lab path).
pub fn rdmactl_bin() -> PathBuf {
    std::env::var_os("RDMACTL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/rdma/bin/rdmactl"))
}

/// The Soft-RoCE device the lab creates.
pub const LAB_DEVICE: &str = "rxe0";

/// The result of one perftest run between the lab's veth-pair devices.
#[derive(Debug)]
pub struct PerftestRun {
    /// The client's output (it prints the result table).
    pub client: Output,
    /// The server's exit status.
    pub server: std::process::ExitStatus,
}

impl PerftestRun {
    /// True when both ends exited 0.
    pub fn success(&self) -> bool {
        self.client.status.success() && self.server.success()
    }
}

/// Run `TOOL` (e.g. `ib_write_bw`) with the server on rxe_a (10.1.0.1) and the client on
/// rxe_b, both under `timeout 60`, with the same extra `args` on both ends (e.g. `-n 300`,
/// a `-p` port when several tests run perftest at once).
pub fn perftest_between_veth_devices(tool: &str, args: &[&str]) -> PerftestRun {
    let common = |dev: &'static str| {
        let mut v: Vec<String> = vec!["60".into(), tool.into(), "-d".into(), dev.into()];
        v.extend(["-x", "1"].iter().map(|s| s.to_string()));
        v.extend(args.iter().map(|s| s.to_string()));
        v
    };
    let mut server = std::process::Command::new("timeout")
        .args(common("rxe_a"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the {tool} server: {e}"));
    std::thread::sleep(std::time::Duration::from_millis(800));
    let mut client_args = common("rxe_b");
    client_args.push("10.1.0.1".into());
    let client = std::process::Command::new("timeout")
        .args(client_args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the {tool} client: {e}"));
    let server = server
        .wait()
        .unwrap_or_else(|e| panic!("waiting for the {tool} server: {e}"));
    PerftestRun { client, server }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shaped like `ibv_devinfo -v -d rxe0` from rdma-core 44 in the lab (trimmed).
    const SAMPLE: &str = "hca_id:\trxe0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t0.0.0
\tnode_guid:\t\t\t5054:00ff:fe12:3456
\tvendor_id:\t\t\t0xffffff
\tphys_port_cnt:\t\t\t1
\tdevice_cap_flags:\t\t0x01223c76
\t\t\t\t\tBAD_PKEY_CNTR
\tcompletion_timestamp_mask not supported
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t1024 (3)
\t\t\tlink_layer:\t\tEthernet
\t\t\tport_cap_flags:\t\t0x00010000
\t\t\tGID[  0]:\t\tfe80::5054:ff:fe12:3456, RoCE v2
\t\t\tGID[  1]:\t\t::ffff:10.0.2.15, RoCE v2

";

    #[test]
    fn parses_devices_ports_fields_and_gids() {
        let devs = parse_devinfo(SAMPLE).unwrap();
        assert_eq!(devs.len(), 1);
        let d = &devs[0];
        assert_eq!(d.hca_id, "rxe0");
        assert_eq!(d.field("node_guid"), Some("5054:00ff:fe12:3456"));
        assert_eq!(d.field("vendor_id").and_then(parse_num), Some(0xffffff));
        assert_eq!(d.field("BAD_PKEY_CNTR"), None);
        let p = d.port(1).unwrap();
        assert_eq!(p.code("state"), Some(4));
        assert_eq!(p.code("active_mtu"), Some(3));
        assert_eq!(p.field("link_layer"), Some("Ethernet"));
        assert_eq!(p.field("port_cap_flags").and_then(parse_num), Some(0x10000));
        assert_eq!(p.gids.len(), 2);
        assert_eq!(p.gids[1].gid.to_string(), "::ffff:10.0.2.15");
        assert_eq!(p.gids[1].gid_type.as_deref(), Some("RoCE v2"));
    }

    #[test]
    fn full_hex_gids_parse_too() {
        let text = "hca_id:\tx\n\t\tport:\t1\n\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:5054:00ff:fe12:3456\n";
        let d = &parse_devinfo(text).unwrap()[0];
        assert_eq!(
            d.ports[0].gids[0].gid.to_string(),
            "fe80::5054:ff:fe12:3456"
        );
        assert_eq!(d.ports[0].gids[0].gid_type, None);
    }

    #[test]
    fn garbage_before_a_device_is_an_error() {
        assert!(parse_devinfo("state: PORT_ACTIVE (4)\n").is_err());
        assert_eq!(paren_code("LINK_UP (5)"), Some(5));
        assert_eq!(paren_code("Ethernet"), None);
    }
}
