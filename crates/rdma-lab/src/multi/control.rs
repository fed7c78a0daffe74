//! The controller: its unix socket and protocol (`wait-ready`, `status`, `exec`, `fault`),
//! the command agent and QMP monitor of each host, and the client side (`request`, `relay`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{faults, parse_host, utc_timestamp, ControlError, QmpError};
use super::{host_name, lock, Lab, CONTROL_GUEST_ADDR};

pub(super) fn serve(lab: &Arc<Lab>, listener: UnixListener) {
    while !lab.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let lab = Arc::clone(lab);
                std::thread::spawn(move || {
                    let _ = stream.set_nonblocking(false);
                    handle(&lab, stream);
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

pub(super) fn handle(lab: &Arc<Lab>, stream: UnixStream) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut out = stream;
    let mut line = String::new();
    let mut r = BufReader::new(read_half.take(1 << 20));
    if r.read_line(&mut line).is_err() {
        return;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let answer = match words.as_slice() {
        ["wait-ready"] => wait_ready(lab),
        ["status"] => Ok(status(lab)),
        ["exec", host, script] => {
            let _ = exec(lab, host, script, &mut out);
            return;
        }
        ["fault", rest @ ..] => faults::fault(lab, rest),
        [] => Err(ControlError::EmptyRequest),
        other => Err(ControlError::UnknownRequest(other.join(" "))),
    };
    let _ = match answer {
        Ok(text) => writeln!(out, "ok {text}"),
        Err(text) => writeln!(out, "error {text}"),
    };
}

pub(super) fn wait_ready(lab: &Lab) -> Result<String, ControlError> {
    let mut guard = lock(&lab.all_ready);
    loop {
        if let Some(d) = *guard {
            return Ok(format!(
                "all {} hosts ACTIVE {:.1} s after the lab started",
                lab.spec.hosts,
                d.as_secs_f64()
            ));
        }
        if lab.stop.load(Ordering::Relaxed) {
            return Err(ControlError::Stopping);
        }
        guard = lab
            .ready
            .wait_timeout(guard, Duration::from_millis(500))
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    }
}

pub(super) fn status(lab: &Lab) -> String {
    let mut s = format!("{} hosts", lab.spec.hosts);
    for i in 0..lab.spec.hosts {
        let (rx, tx, dropped, lost) = lab.switch.stats(i);
        let not_ready = lab.switch.not_ready(i);
        let (state, generation, link_up) = {
            let hosts = lock(&lab.hosts);
            (hosts[i].state, hosts[i].generation, hosts[i].link_up)
        };
        s.push_str(&format!(
            "\n{} {state:?} boot={generation} link={} {} fabric_rx={rx} fabric_tx={tx} dropped={dropped} ingress_lost={lost} not_ready={not_ready}",
            host_name(i),
            if link_up { "up" } else { "down" },
            faults::host_faults(lab, i),
        ));
    }
    for (a, b, both) in lab.switch.partitions() {
        s.push_str(&format!(
            "\npartition {} {}{}",
            host_name(a),
            host_name(b),
            if both { "" } else { " --oneway" }
        ));
    }
    s
}

/// Run a base64 script on a host through its agent, streaming the answer to `out`.
pub(super) fn exec(
    lab: &Lab,
    host: &str,
    script: &str,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let i = match parse_host(host, lab.spec.hosts) {
        Ok(i) => i,
        Err(e) => return writeln!(out, "error {e}"),
    };
    let port = lock(&lab.hosts)[i].agent_port;
    match agent(port, script, out) {
        Ok(()) => Ok(()),
        Err(e) => writeln!(out, "error {host}: the agent did not answer: {e}"),
    }
}

pub(super) fn agent(port: u16, script: &str, out: &mut dyn Write) -> std::io::Result<()> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.write_all(script.as_bytes())?;
    s.write_all(b"\n")?;
    let mut buf = [0u8; 8192];
    let mut seen_exit = false;
    let mut tail = Vec::new();
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > 64 {
            tail.drain(..tail.len() - 64);
        }
        if String::from_utf8_lossy(&tail).contains("LAB-AGENT-EXIT=") {
            seen_exit = true;
        }
    }
    if seen_exit {
        Ok(())
    } else {
        Err(std::io::Error::other(
            "the connection closed without an exit code",
        ))
    }
}

/// Run a shell command on host `i` through its agent; (exit code, output).
pub(super) fn agent_sh(lab: &Lab, i: usize, script: &str) -> Result<(i32, String), ControlError> {
    let port = lock(&lab.hosts)[i].agent_port;
    let mut out = Vec::new();
    agent(port, &base64(script.as_bytes()), &mut out).map_err(|source| ControlError::Agent {
        host: host_name(i),
        source,
    })?;
    let text = String::from_utf8_lossy(&out).to_string();
    let code = text
        .lines()
        .filter_map(|l| l.strip_prefix("LAB-AGENT-EXIT="))
        .next_back()
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(-1);
    Ok((code, text))
}

/// Standard base64 with padding (what busybox `base64 -d` reads).
pub fn base64(data: &[u8]) -> String {
    use ::base64::Engine as _;
    ::base64::engine::general_purpose::STANDARD.encode(data)
}

pub(super) fn log_fault(lab: &Lab, what: &str) -> String {
    let line = format!("{} {what}", utc_timestamp(SystemTime::now()));
    eprintln!("lab: fault {line}");
    let _ = writeln!(lock(&lab.fault_log), "{line}");
    line
}

/// One QMP command (a JSON object) on host `i`'s monitor socket: Ok on `{"return": ...}`,
/// the error line otherwise.
pub(super) fn qmp(lab: &Lab, i: usize, command: &str) -> Result<(), QmpError> {
    let path = lab.dir.join(format!("{}.qmp", host_name(i)));
    let s = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(source) => return Err(QmpError::Connect { path, source }),
    };
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    // Answers are one JSON object per line; asynchronous events ("event") are skipped.
    let answer = |r: &mut BufReader<UnixStream>| -> Result<String, QmpError> {
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).map_err(QmpError::Read)? == 0 {
                return Err(QmpError::Closed);
            }
            if !line.contains("\"event\"") {
                return Ok(line);
            }
        }
    };
    let greeting = answer(&mut r)?;
    if !greeting.contains("\"QMP\"") {
        return Err(QmpError::Greeting(greeting));
    }
    for cmd in [r#"{"execute":"qmp_capabilities"}"#, command] {
        writeln!(w, "{cmd}")?;
        let line = answer(&mut r)?;
        if !line.contains("\"return\"") {
            return Err(QmpError::Refused(line.trim().to_string()));
        }
    }
    Ok(())
}

/// Where a control request goes: the lab's unix socket (on this machine) or the guestfwd
/// address (inside a host).
#[derive(Debug, Clone)]
pub enum ControlTarget {
    /// The control socket of a running lab.
    Unix(PathBuf),
    /// `10.0.2.100:7000` inside a host.
    Guest,
}

/// Send one request line and return the whole answer.
pub fn request(target: &ControlTarget, line: &str, out: &mut dyn Write) -> std::io::Result<()> {
    fn talk<S: Read + Write>(mut s: S, line: &str, out: &mut dyn Write) -> std::io::Result<()> {
        s.write_all(line.as_bytes())?;
        s.write_all(b"\n")?;
        s.flush()?;
        std::io::copy(&mut s, out)?;
        Ok(())
    }
    match target {
        ControlTarget::Unix(p) => talk(UnixStream::connect(p)?, line, out),
        ControlTarget::Guest => talk(TcpStream::connect(CONTROL_GUEST_ADDR)?, line, out),
    }
}

/// What qemu runs per guest connection to the controller: copy stdin to the control
/// socket and the answer to stdout.
pub fn relay(control: &Path) -> std::io::Result<()> {
    let sock = UnixStream::connect(control)?;
    let mut up = sock.try_clone()?;
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut up);
        let _ = up.shutdown(std::net::Shutdown::Write);
    });
    let mut down = sock;
    let mut stdout = std::io::stdout().lock();
    std::io::copy(&mut down, &mut stdout)?;
    stdout.flush()
}

/// Parse `status` answers into host -> fields (for tests and `lab status`).
pub fn parse_status(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(' ')?;
            name.starts_with('h')
                .then(|| (name.to_string(), rest.to_string()))
        })
        .collect()
}
