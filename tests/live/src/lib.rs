//! The live suite lives in `tests/`; this library only holds helpers shared by its tests:
//! running the real rdma-core tools inside the lab and parsing what they print
//! (`ibv_devinfo -v`, `rdma -j`), locating the project's binaries (`rdmactl`, `rdmad`),
//! running rdmad on a loopback port and parsing what it serves (the Prometheus text
//! exposition).
#![forbid(unsafe_code)]

pub mod cgroup;
pub mod fabric;
pub mod tcp;

use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::{Ipv6Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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

/// Poll `cond` every 100 ms for up to `limit`; whether it became true.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
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

/// The value of `/sys/class/infiniband/DEVICE/ports/PORT/hw_counters/NAME`; fails the test
/// when the file is missing or not a number.
pub fn sysfs_hw_counter(device: &str, port: u64, name: &str) -> u64 {
    let path = format!("/sys/class/infiniband/{device}/ports/{port}/hw_counters/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{path}: {text:?}: {e}"))
}

/// Whether a perftest program (`ib_write_bw`, ...) finished its traffic: it exited 0, or it
/// exited 1 only because it could not compute its report. perftest converts cycles to time
/// with a CPU clock it estimates by a linear fit of the cycle counter against wall time, and
/// when the fit is poor ("Correlation coefficient r^2: ... < 0.9") it prints "Can't produce a
/// report" and exits 1: under emulation on a busy host this happens after every work request
/// completed. Tests that need the traffic check it through counters, never through the report.
pub fn perftest_finished(out: &Output) -> bool {
    perftest_text_finished(out.status.code(), &output_text(out))
}

/// [`perftest_finished`] on an exit code and the program's whole output (stdout + stderr),
/// for runs on other lab hosts.
pub fn perftest_text_finished(code: Option<i32>, text: &str) -> bool {
    code == Some(0) || (code == Some(1) && perftest_refused_report(text))
}

fn perftest_refused_report(text: &str) -> bool {
    text.contains("Correlation coefficient r^2") && text.contains("Can't produce a report")
}

/// Whether a perftest client and its server both finished their traffic. A client that
/// refuses its report ([`perftest_finished`]) exits at once, before the final handshake the
/// server of a half-duplex test waits for, so that server then exits 1 with "Failed to
/// exchange data between server and clients": after a refused client report that is the
/// server finishing, not failing. Any other server failure is one.
pub fn perftest_pair_finished(client: &Output, server: &Output) -> bool {
    perftest_pair_text_finished(
        client.status.code(),
        &output_text(client),
        server.status.code(),
        &output_text(server),
    )
}

/// [`perftest_pair_finished`] on exit codes and whole outputs.
pub fn perftest_pair_text_finished(
    client_code: Option<i32>,
    client_text: &str,
    server_code: Option<i32>,
    server_text: &str,
) -> bool {
    if !perftest_text_finished(client_code, client_text) {
        return false;
    }
    perftest_text_finished(server_code, server_text)
        || (client_code == Some(1)
            && perftest_refused_report(client_text)
            && server_code == Some(1)
            && server_text.contains("Failed to exchange data between server and clients"))
}

fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The result of one perftest run between the lab's veth-pair devices.
#[derive(Debug)]
pub struct PerftestRun {
    /// The client's output (it prints the result table).
    pub client: Output,
    /// The server's output.
    pub server: Output,
}

impl PerftestRun {
    /// True when both ends finished their traffic ([`perftest_pair_finished`]).
    pub fn success(&self) -> bool {
        perftest_pair_finished(&self.client, &self.server)
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
    let server = std::process::Command::new("timeout")
        .args(common("rxe_a"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the {tool} server: {e}"));
    // The server's TCP port (perftest's default 18515, or `-p`) listening; a server that
    // never listens fails the client, and the caller sees it in the run.
    let port = args
        .iter()
        .position(|a| *a == "-p")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(18515);
    tcp::wait_listening(port, Duration::from_secs(30));
    let mut client_args = common("rxe_b");
    client_args.push("10.1.0.1".into());
    let client = std::process::Command::new("timeout")
        .args(client_args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the {tool} client: {e}"));
    let server = server
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for the {tool} server: {e}"));
    PerftestRun { client, server }
}

/// Run `CMD ARGS`, require exit 0 and parse its stdout as JSON. Every failure fails the test
/// with the command line: it cannot start, exits non-zero (its stdout and stderr are shown),
/// or prints something that is not JSON.
pub fn command_json(cmd: impl AsRef<OsStr>, args: &[&str]) -> Value {
    let cmd = cmd.as_ref();
    let line = format!("{} {}", cmd.to_string_lossy(), args.join(" "));
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("FAIL: cannot run `{line}`: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "FAIL: `{line}` failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("FAIL: `{line}` did not print JSON ({e}):\n{stdout}"))
}

/// `rdma -j ARGS` (iproute2's RDMA tool, e.g. `rdma_json(&["res", "show", "qp"])`), parsed;
/// fails the test as [`command_json`] does.
pub fn rdma_json(args: &[&str]) -> Value {
    let mut all = vec!["-j"];
    all.extend_from_slice(args);
    command_json("rdma", &all)
}

/// `rdmactl ARGS --json` (the binary under test, [`rdmactl_bin`]; e.g.
/// `rdmactl_json(&["resources", "qp"])`), parsed; fails the test as [`command_json`] does.
pub fn rdmactl_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    command_json(rdmactl_bin(), &all)
}

/// The rdmad binary under test: `$RDMAD_BIN`, else `/opt/rdma/bin/rdmad` (the lab path).
pub fn rdmad_bin() -> PathBuf {
    std::env::var_os("RDMAD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/rdma/bin/rdmad"))
}

/// Parse a Prometheus text exposition (what rdmad serves on `/metrics` and prints with
/// `--once`) with the one parser of the workspace ([`rdmakit::exposition`]): series (metric
/// name and labels as rdmad prints them, e.g. `rdma_port_state_id{device="rxe0",port="1"}`)
/// -> value. A line that does not parse is an error naming it.
pub fn parse_exposition(text: &str) -> Result<BTreeMap<String, f64>, String> {
    rdmakit::exposition::parse(text)
        .map(|e| e.series())
        .map_err(|e| e.to_string())
}

/// The answer to one [`http_get`].
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The status line (`HTTP/1.1 200 OK`).
    pub status: String,
    /// The header lines, lowercased (`content-type: text/plain; version=0.0.4`).
    pub headers: String,
    /// The body.
    pub body: String,
}

impl HttpResponse {
    /// True when the status line is `HTTP/1.1 200 ...`.
    pub fn is_ok(&self) -> bool {
        self.status.starts_with("HTTP/1.1 200")
    }
}

/// The plain HTTP client of the tests against rdmad (this suite's and rdmad's own
/// `tests/http.rs`): 30 s for a whole request, any status an answer rather than an error, no
/// proxy from the environment, no `Accept` unless the request sends one (ureq's default is
/// `*/*`), no decompression (ureq without its gzip feature).
pub fn http_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .proxy(None)
        .accept("")
        .build()
        .into()
}

/// `GET PATH` from `127.0.0.1:PORT` over HTTP/1.1 (no proxy, no `Accept`, 30 s timeout),
/// with the workspace's HTTP client (ureq): any status is an answer, not an error.
pub fn http_get(port: u16, path: &str) -> std::io::Result<HttpResponse> {
    let mut response = http_agent()
        .get(format!("http://127.0.0.1:{port}{path}"))
        .call()
        .map_err(std::io::Error::other)?;
    let status = format!("{:?} {}", response.version(), response.status());
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| format!("{k}: {}", String::from_utf8_lossy(v.as_bytes())))
        .collect::<Vec<_>>()
        .join("\r\n")
        .to_ascii_lowercase();
    let body = response
        .body_mut()
        .with_config()
        .limit(u64::MAX)
        .read_to_string()
        .map_err(std::io::Error::other)?;
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

/// One scrape of rdmad's `/metrics`.
#[derive(Debug, Clone)]
pub struct Scrape {
    /// The response's header lines, lowercased.
    pub headers: String,
    /// Series -> value ([`parse_exposition`]).
    pub series: BTreeMap<String, f64>,
    /// The exposition as served.
    pub text: String,
}

impl Scrape {
    /// The value of `series` (name and labels as printed), if it was served.
    pub fn sample(&self, series: &str) -> Option<f64> {
        self.series.get(series).copied()
    }
}

/// How [`Rdmad::start_with`] runs rdmad.
#[derive(Debug, Clone, Copy)]
pub struct RdmadOptions {
    /// `RDMAD_LOG` (`info` by default).
    pub log_level: &'static str,
    /// Deliver rdmad's stderr lines on [`Rdmad::log`] (each still echoed to the test's
    /// stderr as `rdmad: LINE`) instead of leaving rdmad the test's stderr (the default).
    pub capture_log: bool,
    /// How long rdmad may take to answer `/healthz` before the test fails (30 s by default).
    pub startup: Duration,
}

impl Default for RdmadOptions {
    fn default() -> Self {
        RdmadOptions {
            log_level: "info",
            capture_log: false,
            startup: Duration::from_secs(30),
        }
    }
}

/// rdmad ([`rdmad_bin`]) serving on a free loopback port; killed on drop.
#[derive(Debug)]
pub struct Rdmad {
    child: Child,
    port: u16,
    log: Option<mpsc::Receiver<String>>,
}

impl Rdmad {
    /// [`Rdmad::start_with`] the default [`RdmadOptions`].
    pub fn start(extra: &[&str]) -> Rdmad {
        Rdmad::start_with(extra, RdmadOptions::default())
    }

    /// Start rdmad with `--web.listen-address=127.0.0.1:PORT` (a free port) and the `extra`
    /// arguments, and wait until `/healthz` answers 200 `ok`. Fails the test when rdmad
    /// cannot start, exits before answering, or does not answer within `opts.startup`.
    pub fn start_with(extra: &[&str], opts: RdmadOptions) -> Rdmad {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
        let line = format!("{} {}", rdmad_bin().display(), extra.join(" "));
        let mut child = Command::new(rdmad_bin())
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(extra)
            .env("RDMAD_LOG", opts.log_level)
            .stdout(Stdio::null())
            .stderr(if opts.capture_log {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .unwrap_or_else(|e| panic!("FAIL: cannot start `{line}`: {e}"));
        let log = child.stderr.take().map(|stderr| {
            let (tx, rx) = mpsc::channel();
            // Reads to the end even when nobody listens, so rdmad never blocks on the pipe.
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    eprintln!("rdmad: {line}");
                    let _ = tx.send(line);
                }
            });
            rx
        });
        let mut rdmad = Rdmad { child, port, log };
        let deadline = Instant::now() + opts.startup;
        loop {
            if matches!(rdmad.get("/healthz"), Ok(r) if r.is_ok() && r.body == "ok\n") {
                return rdmad;
            }
            if let Ok(Some(status)) = rdmad.child.try_wait() {
                panic!("FAIL: `{line}` exited at startup with {status}");
            }
            assert!(
                Instant::now() < deadline,
                "FAIL: `{line}` did not answer /healthz on port {port} within {} s",
                opts.startup.as_secs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The loopback port rdmad serves on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// rdmad's process id (for /proc/PID/status).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// [`http_get`] `path` from this rdmad.
    pub fn get(&self, path: &str) -> std::io::Result<HttpResponse> {
        http_get(self.port, path)
    }

    /// Scrape `/metrics`: an error when the GET fails or does not answer 200. A malformed
    /// exposition fails the test.
    pub fn try_scrape(&self) -> std::io::Result<Scrape> {
        let r = self.get("/metrics")?;
        if !r.is_ok() {
            return Err(std::io::Error::other(format!(
                "/metrics answered {}",
                r.status
            )));
        }
        let series = parse_exposition(&r.body)
            .unwrap_or_else(|e| panic!("FAIL: /metrics of rdmad on port {}: {e}", self.port));
        Ok(Scrape {
            headers: r.headers,
            series,
            text: r.body,
        })
    }

    /// Scrape `/metrics`; any failure fails the test.
    pub fn scrape(&self) -> Scrape {
        self.try_scrape()
            .unwrap_or_else(|e| panic!("FAIL: GET /metrics: {e}"))
    }

    /// rdmad's stderr lines, when started with [`RdmadOptions::capture_log`].
    pub fn log(&self) -> &mpsc::Receiver<String> {
        self.log
            .as_ref()
            .expect("rdmad was started without RdmadOptions::capture_log")
    }
}

impl Drop for Rdmad {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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

    /// Shaped like rdmad's `/metrics`: HELP and TYPE comments, labels (one value with a
    /// space and escaped quotes), a histogram, a series without labels and a blank line.
    const EXPOSITION: &str = r#"# HELP rdma_port_info Port attributes (value 1).
# TYPE rdma_port_info gauge
rdma_port_info{device="rxe0",port="1",netdev="eth0",state="ACTIVE"} 1
# TYPE rdma_note gauge
rdma_note{device="rxe0",text="a \"quoted\" word"} 2
# HELP rdma_probe_latency_seconds Probe latency.
# TYPE rdma_probe_latency_seconds histogram
rdma_probe_latency_seconds_bucket{device="rxe0",op="send",le="0.0001"} 3
rdma_probe_latency_seconds_bucket{device="rxe0",op="send",le="+Inf"} 5
rdma_probe_latency_seconds_sum{device="rxe0",op="send"} 1.25e-4
rdma_probe_latency_seconds_count{device="rxe0",op="send"} 5

rdma_probe_rounds_total 7
"#;

    #[test]
    fn parses_an_exposition_into_series_and_values() {
        let series = parse_exposition(EXPOSITION).unwrap();
        let want: BTreeMap<String, f64> = [
            (
                r#"rdma_port_info{device="rxe0",port="1",netdev="eth0",state="ACTIVE"}"#,
                1.0,
            ),
            (r#"rdma_note{device="rxe0",text="a \"quoted\" word"}"#, 2.0),
            (
                r#"rdma_probe_latency_seconds_bucket{device="rxe0",op="send",le="0.0001"}"#,
                3.0,
            ),
            (
                r#"rdma_probe_latency_seconds_bucket{device="rxe0",op="send",le="+Inf"}"#,
                5.0,
            ),
            (
                r#"rdma_probe_latency_seconds_sum{device="rxe0",op="send"}"#,
                1.25e-4,
            ),
            (
                r#"rdma_probe_latency_seconds_count{device="rxe0",op="send"}"#,
                5.0,
            ),
            ("rdma_probe_rounds_total", 7.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(series, want);
        let scrape = Scrape {
            headers: String::new(),
            series,
            text: EXPOSITION.to_string(),
        };
        assert_eq!(scrape.sample("rdma_probe_rounds_total"), Some(7.0));
        assert_eq!(scrape.sample("rdma_port_info"), None);
    }

    #[test]
    fn perftest_report_refusals_count_as_finished_and_nothing_else_does() {
        use std::os::unix::process::ExitStatusExt;
        let out = |code: i32, stdout: &str| Output {
            status: std::process::ExitStatus::from_raw(code << 8),
            stdout: stdout.as_bytes().to_vec(),
            stderr: Vec::new(),
        };
        let refused = "Correlation coefficient r^2: 0.69 < 0.9\nCan't produce a report\n";
        assert!(perftest_finished(&out(0, "")));
        assert!(perftest_finished(&out(1, refused)));
        assert!(!perftest_finished(&out(
            1,
            "Couldn't connect to 10.1.0.1:18515\n"
        )));
        assert!(!perftest_finished(&out(1, "Can't produce a report\n")));
        assert!(
            !perftest_finished(&out(124, refused)),
            "a timeout is a failure"
        );
    }

    #[test]
    fn a_server_that_lost_its_refusing_client_finished_and_nothing_else_does() {
        use std::os::unix::process::ExitStatusExt;
        let out = |code: i32, stdout: &str| Output {
            status: std::process::ExitStatus::from_raw(code << 8),
            stdout: stdout.as_bytes().to_vec(),
            stderr: Vec::new(),
        };
        let refused = "Correlation coefficient r^2: 0.74 < 0.9\nCan't produce a report\n";
        let lost = " Failed to exchange data between server and clients\n";
        assert!(perftest_pair_finished(&out(0, ""), &out(0, "")));
        assert!(perftest_pair_finished(&out(1, refused), &out(1, lost)));
        assert!(perftest_pair_finished(&out(1, refused), &out(0, "")));
        assert!(
            !perftest_pair_finished(&out(0, ""), &out(1, lost)),
            "the client finished its handshake, so the server's failure is its own"
        );
        assert!(!perftest_pair_finished(&out(1, refused), &out(124, lost)));
        assert!(!perftest_pair_finished(
            &out(1, refused),
            &out(1, "Couldn't create QP\n")
        ));
        assert!(!perftest_pair_finished(
            &out(1, "Couldn't connect\n"),
            &out(1, lost)
        ));
    }

    #[test]
    fn malformed_sample_lines_are_errors() {
        let err = parse_exposition("# TYPE x gauge\nx\n").unwrap_err();
        assert!(err.contains("line 2") && err.contains("no value"), "{err}");
        let err = parse_exposition("x{a=\"b\"} one\n").unwrap_err();
        assert!(err.contains("not a number"), "{err}");
        assert_eq!(parse_exposition("").unwrap(), BTreeMap::new());
    }
}
