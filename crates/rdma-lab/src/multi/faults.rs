//! The faults `rdmactl lab fault ...` injects into a running multi-host lab: one table row
//! and one function each. Every fault is logged with a UTC timestamp (stderr and the fault
//! log) and undone by its matching command, or by `clear hK` (everything on one host) and
//! `heal` (partitions).
//!
//! Where each is made, and why there:
//! - egress netem (`netem`): `tc netem` on the host's eth1, in the guest: delay, loss,
//!   reordering, corruption, as the kernel does them;
//! - ingress loss (`ingress`): in the fabric switch, which drops a fraction of the frames it
//!   would deliver to the host. The guest way (an ifb device and a mirred redirect) needs
//!   the ifb, act_mirred and sch_ingress modules, which the lab image does not carry (only
//!   sch_netem); the switch needs no module, counts what it dropped, and combines with an
//!   egress netem on the same host;
//! - partitions (`partition`, `--oneway`): in the fabric switch, by directed port pairs;
//! - link, kill, restart: qemu (QMP `set_link`, SIGKILL, a new qemu);
//! - rdmad and rxe0 (`kill-rdmad`, `start-rdmad`, `rxe-remove`, `rxe-add`): in the guest,
//!   through its command agent (eth0), so they work while the fabric is faulty.

use std::fs;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    agent_sh, host_name, lock, log_fault, parse_host, qmp, spawn_host, ControlError, Lab,
    PercentError, State, BOOT_LIMIT, EXIT_KILLED, RDMAD_PORT,
};
use crate::fabric::{self, PPM};

/// One kind of fault: its words, what undoes it, and the function that makes it (given the
/// words after its name).
pub struct Fault {
    /// The first word: `netem`, `partition`, ...
    pub name: &'static str,
    /// Its arguments as typed after the name.
    pub args: &'static str,
    /// What undoes it.
    pub undo: &'static str,
    run: fn(&Arc<Lab>, &[&str]) -> Result<String, ControlError>,
}

/// Every fault the controller knows, in the order `--help` and errors list them.
pub const FAULTS: &[Fault] = &[
    Fault {
        name: "netem",
        args: "hK ARGS..",
        undo: "clear hK",
        run: netem,
    },
    Fault {
        name: "ingress",
        args: "hK loss P%",
        undo: "clear hK, or ingress hK loss 0%",
        run: ingress,
    },
    Fault {
        name: "clear",
        args: "hK",
        undo: "",
        run: clear,
    },
    Fault {
        name: "link",
        args: "hK down|up",
        undo: "link hK up",
        run: link,
    },
    Fault {
        name: "partition",
        args: "hA hB [--oneway]",
        undo: "heal [hA hB]",
        run: partition,
    },
    Fault {
        name: "heal",
        args: "[hA hB]",
        undo: "",
        run: heal,
    },
    Fault {
        name: "kill",
        args: "hK",
        undo: "restart hK",
        run: kill,
    },
    Fault {
        name: "restart",
        args: "hK",
        undo: "",
        run: restart,
    },
    Fault {
        name: "kill-rdmad",
        args: "hK",
        undo: "start-rdmad hK, or clear hK",
        run: kill_rdmad,
    },
    Fault {
        name: "start-rdmad",
        args: "hK",
        undo: "",
        run: start_rdmad,
    },
    Fault {
        name: "rxe-remove",
        args: "hK",
        undo: "rxe-add hK, or clear hK",
        run: rxe_remove,
    },
    Fault {
        name: "rxe-add",
        args: "hK",
        undo: "",
        run: rxe_add,
    },
];

/// `netem hK ARGS.. | ingress hK loss P% | ...`: every fault's words.
pub fn usage() -> String {
    FAULTS
        .iter()
        .map(|f| format!("{} {}", f.name, f.args))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Make the fault `words` (`["netem", "h2", "loss", "5%"]`); the log line(s) on success.
pub(super) fn fault(lab: &Arc<Lab>, words: &[&str]) -> Result<String, ControlError> {
    let Some((name, args)) = words.split_first() else {
        return Err(ControlError::NoFault);
    };
    let Some(f) = FAULTS.iter().find(|f| f.name == *name) else {
        return Err(ControlError::UnknownFault {
            words: words.join(" "),
        });
    };
    (f.run)(lab, args)
}

fn wrong(name: &str, args: &[&str]) -> ControlError {
    let f = FAULTS.iter().find(|f| f.name == name);
    ControlError::Usage {
        name: name.to_string(),
        args: args.join(" "),
        expected: f.map(|f| f.args).unwrap_or(""),
    }
}

/// The host of a one-host fault (`NAME hK`).
fn one_host(lab: &Lab, name: &str, args: &[&str]) -> Result<(usize, String), ControlError> {
    match args {
        [h] => Ok((parse_host(h, lab.spec.hosts)?, h.to_string())),
        _ => Err(wrong(name, args)),
    }
}

/// Run a script on host `i` through its agent; its output when it exits 0.
fn on_host(lab: &Lab, i: usize, what: &str, script: &str) -> Result<String, ControlError> {
    let (code, out) = agent_sh(lab, i, script)?;
    let text: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with("LAB-AGENT-EXIT="))
        .collect();
    let text = text.join("\n");
    if code == 0 {
        Ok(text.trim().to_string())
    } else {
        Err(ControlError::HostCommand {
            what: what.to_string(),
            host: host_name(i),
            output: text.trim().to_string(),
        })
    }
}

/// netem arguments are passed to tc: plain words only (no shell metacharacters).
fn netem_args(args: &[&str]) -> Result<String, ControlError> {
    if args.is_empty() {
        return Err(ControlError::NetemNeedsArguments);
    }
    for a in args {
        if !a
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._%-".contains(&b))
        {
            return Err(ControlError::NetemArgument(a.to_string()));
        }
    }
    Ok(args.join(" "))
}

/// `20%`, `20`, `0.5%` as parts per million (0..=100%).
fn parse_percent(text: &str) -> Result<u32, PercentError> {
    let n: f64 = text
        .strip_suffix('%')
        .unwrap_or(text)
        .parse()
        .map_err(|_| PercentError::NotANumber {
            text: text.to_string(),
        })?;
    if !(0.0..=100.0).contains(&n) {
        return Err(PercentError::OutOfRange {
            text: text.to_string(),
        });
    }
    Ok((n * f64::from(PPM) / 100.0).round() as u32)
}

/// `20%` for parts per million.
fn percent(ppm: u32) -> String {
    format!("{}%", f64::from(ppm) * 100.0 / f64::from(PPM))
}

fn netem(lab: &Arc<Lab>, args: &[&str]) -> Result<String, ControlError> {
    let [h, rest @ ..] = args else {
        return Err(wrong("netem", args));
    };
    let i = parse_host(h, lab.spec.hosts)?;
    let words = netem_args(rest)?;
    on_host(
        lab,
        i,
        "tc",
        &format!("tc qdisc replace dev eth1 root netem {words} 2>&1"),
    )?;
    lock(&lab.hosts)[i].netem = Some(words.clone());
    Ok(log_fault(
        lab,
        &format!("netem {h} {words} (eth1 egress of {h})"),
    ))
}

fn ingress(lab: &Arc<Lab>, args: &[&str]) -> Result<String, ControlError> {
    let [h, "loss", p] = args else {
        return Err(wrong("ingress", args));
    };
    let i = parse_host(h, lab.spec.hosts)?;
    let ppm = parse_percent(p)?;
    lab.switch.set_ingress_loss(i, ppm);
    Ok(log_fault(
        lab,
        &format!(
            "ingress {h} loss {} (the fabric switch drops that share of the frames towards {h})",
            percent(ppm)
        ),
    ))
}

/// Back to clean on one host: its egress netem, ingress loss, a killed rdmad, a removed rxe0.
fn clear(lab: &Arc<Lab>, args: &[&str]) -> Result<String, ControlError> {
    let (i, h) = one_host(lab, "clear", args)?;
    on_host(lab, i, "tc", "tc qdisc del dev eth1 root 2>/dev/null; true")?;
    let mut undone = Vec::new();
    if let Some(n) = lock(&lab.hosts)[i].netem.take() {
        undone.push(format!("netem {n}"));
    }
    let ppm = lab.switch.ingress_loss(i);
    if ppm > 0 {
        lab.switch.set_ingress_loss(i, 0);
        undone.push(format!("ingress loss {}", percent(ppm)));
    }
    let (rdmad, rxe) = {
        let hosts = lock(&lab.hosts);
        (hosts[i].rdmad_killed, hosts[i].rxe_removed)
    };
    if rxe {
        add_rxe0(lab, i)?;
        undone.push("rxe0 added back".into());
    }
    if rdmad {
        start_rdmad_on(lab, i)?;
        undone.push("rdmad started again".into());
    }
    let what = if undone.is_empty() {
        "nothing was set".to_string()
    } else {
        undone.join(", ")
    };
    Ok(log_fault(lab, &format!("clear {h} ({what})")))
}

fn link(lab: &Arc<Lab>, args: &[&str]) -> Result<String, ControlError> {
    let [h, dir @ ("down" | "up")] = args else {
        return Err(wrong("link", args));
    };
    let i = parse_host(h, lab.spec.hosts)?;
    let on = *dir == "up";
    qmp(
        lab,
        i,
        &format!(r#"{{"execute":"set_link","arguments":{{"name":"fab","up":{on}}}}}"#),
    )
    .map_err(|source| ControlError::Monitor {
        host: h.to_string(),
        source,
    })?;
    lock(&lab.hosts)[i].link_up = on;
    Ok(log_fault(lab, &format!("link {h} {dir}")))
}

fn partition(lab: &Arc<Lab>, args: &[&str]) -> Result<String, ControlError> {
    let oneway = args.contains(&"--oneway");
    let hosts: Vec<&str> = args.iter().copied().filter(|a| *a != "--oneway").collect();
    let [a, b] = hosts.as_slice() else {
        return Err(wrong("partition", args));
    };
    let (ia, ib) = (
        parse_host(a, lab.spec.hosts)?,
        parse_host(b, lab.spec.hosts)?,
    );
    if ia == ib {
        return Err(ControlError::SameHost);
    }
    if oneway {
        lab.switch.partition_oneway(ia, ib);
        Ok(log_fault(
            lab,
            &format!("partition {a} {b} --oneway (frames {a} -> {b} dropped, {b} -> {a} pass)"),
        ))
    } else {
        lab.switch.partition(ia, ib);
        Ok(log_fault(lab, &format!("partition {a} {b}")))
    }
}

fn heal(lab: &Arc<Lab>, args: &[&str]) -> Result<String, ControlError> {
    match args {
        [] => {
            let n = lab.switch.heal_all();
            Ok(log_fault(lab, &format!("heal all ({n} partitions)")))
        }
        [a, b] => {
            let (ia, ib) = (
                parse_host(a, lab.spec.hosts)?,
                parse_host(b, lab.spec.hosts)?,
            );
            if !lab.switch.heal(ia, ib) {
                return Err(ControlError::NotPartitioned(a.to_string(), b.to_string()));
            }
            Ok(log_fault(lab, &format!("heal {a} {b}")))
        }
        _ => Err(wrong("heal", args)),
    }
}

fn kill(lab: &Arc<Lab>, args: &[&str]) -> Result<String, ControlError> {
    let (i, h) = one_host(lab, "kill", args)?;
    let mut hosts = lock(&lab.hosts);
    let hs = &mut hosts[i];
    let Some(mut c) = hs.child.take() else {
        return Err(ControlError::NotRunning(h));
    };
    let _ = c.kill();
    let _ = c.wait();
    hs.state = State::Killed;
    if hs.runs_command && hs.code.is_none() {
        hs.code = Some(EXIT_KILLED);
    }
    hs.runs_command = false;
    let _ = fs::remove_file(fabric::host_path(&lab.dir, i + 1));
    drop(hosts);
    Ok(log_fault(
        lab,
        &format!("kill {h} (qemu killed, no shutdown)"),
    ))
}

fn restart(lab: &Arc<Lab>, args: &[&str]) -> Result<String, ControlError> {
    let (i, h) = one_host(lab, "restart", args)?;
    if lock(&lab.hosts)[i].child.is_some() {
        return Err(ControlError::StillRunning(h));
    }
    let line = log_fault(lab, &format!("restart {h} (booting)"));
    spawn_host(lab, i)?;
    let deadline = Instant::now() + BOOT_LIMIT;
    loop {
        if lock(&lab.hosts)[i].state == State::Ready {
            let up = log_fault(lab, &format!("restart {h} done: rxe0 ACTIVE"));
            return Ok(format!("{line}\n{up}"));
        }
        if lab.stop.load(Ordering::Relaxed) || Instant::now() > deadline {
            return Err(ControlError::NotBack(h));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pids of the host's rdmad processes, from /proc (comm), zombies included.
const RDMAD_PIDS: &str = r#"rdmad_pids() {
    for p in /proc/[0-9]*; do
        { read -r c < $p/comm; } 2>/dev/null && [ "$c" = rdmad ] && echo ${p#/proc/}
    done
}
"#;

/// The guest's clock for the scripts' bounded waits, whole seconds since boot (the `read`
/// builtin: no program is run). Waits are bounded by it, not by a count of rounds: under TCG
/// on a loaded machine one round of a loop can take seconds, and 200 rounds "of 50 ms" took
/// minutes.
const UPTIME: &str = r#"uptime_s() { read -r t _ < /proc/uptime; echo ${t%.*}; }
"#;

/// SIGKILL every rdmad on the host (a crash, not a shutdown), keeping each one's command
/// line and log file in /run/lab-rdmad so that `start-rdmad` starts the same again.
/// Zombies (an empty cmdline) are skipped.
fn kill_rdmad_script() -> String {
    format!(
        r#"{RDMAD_PIDS}mkdir -p /run/lab-rdmad
killed=""
for pid in $(rdmad_pids); do
    f=/run/lab-rdmad/$pid.args
    log=$(readlink /proc/$pid/fd/1 2>/dev/null)
    case "$log" in /*) ;; *) log=/dev/null ;; esac
    tr '\0' '\n' < /proc/$pid/cmdline > $f.argv 2>/dev/null
    [ -s $f.argv ] || {{ rm -f $f.argv; continue; }}
    {{ echo "$log"; cat $f.argv; }} > $f
    rm -f $f.argv
    kill -9 $pid && killed="$killed $pid"
done
[ -n "$killed" ] || {{ echo "no rdmad is running"; exit 3; }}
echo "pids$killed"
"#
    )
}

/// Start again what `kill-rdmad` killed (same arguments, appending to the same log), or the
/// lab's own rdmad when nothing was kept and none runs.
fn start_rdmad_script() -> String {
    format!(
        r#"{RDMAD_PIDS}started=""
for f in /run/lab-rdmad/*.args; do
    [ -f "$f" ] || continue
    log=$(head -n 1 "$f")
    sed 1d "$f" > "$f.argv"
    set --
    while IFS= read -r a; do set -- "$@" "$a"; done < "$f.argv"
    rm -f "$f" "$f.argv"
    [ $# -gt 0 ] || continue
    setsid "$@" >> "$log" 2>&1 < /dev/null &
    started="$started $!"
done
if [ -z "$started" ]; then
    [ -n "$(rdmad_pids)" ] && {{ echo "rdmad is already running"; exit 3; }}
    setsid rdmad --web.listen-address=0.0.0.0:{RDMAD_PORT} >> /var/log/rdmad.log 2>&1 < /dev/null &
    started=" $!"
fi
for pid in $started; do
    kill -0 $pid 2> /dev/null || {{ echo "rdmad $pid exited at once (see its log)"; exit 1; }}
done
echo "pids$started"
"#
    )
}

fn kill_rdmad(lab: &Arc<Lab>, args: &[&str]) -> Result<String, ControlError> {
    let (i, h) = one_host(lab, "kill-rdmad", args)?;
    let pids = on_host(lab, i, "kill-rdmad", &kill_rdmad_script())?;
    lock(&lab.hosts)[i].rdmad_killed = true;
    Ok(log_fault(
        lab,
        &format!("kill-rdmad {h} (SIGKILL, {pids}; the host stays up)"),
    ))
}

fn start_rdmad_on(lab: &Lab, i: usize) -> Result<String, ControlError> {
    let pids = on_host(lab, i, "start-rdmad", &start_rdmad_script())?;
    lock(&lab.hosts)[i].rdmad_killed = false;
    Ok(pids)
}

fn start_rdmad(lab: &Arc<Lab>, args: &[&str]) -> Result<String, ControlError> {
    let (i, h) = one_host(lab, "start-rdmad", args)?;
    let pids = start_rdmad_on(lab, i)?;
    Ok(log_fault(lab, &format!("start-rdmad {h} ({pids})")))
}

/// `rdma link delete rxe0`, with the device's users out of the way for the moment it takes.
///
/// The kernel unregisters a device only when no process has it open any more: for a driver
/// without `disassociate_ucontext` (rdma_rxe has none; mlx5 has one and detaches its users
/// at once) `ib_uverbs_remove_one` waits, uninterruptibly, for every open uverbs file to
/// close, and `rdma link delete` (a netlink DELLINK answered only after the unregister)
/// blocks with it. Every rdmad holds rxe0 open (its UD endpoint lives as long as the
/// process), so a plain delete never returned. Here: every process with a file of
/// /dev/infiniband open is SIGKILLed (rdmad's command lines kept, as `kill-rdmad` does),
/// the delete runs once none is left (bounded), and the rdmads are started again at once
/// with the same arguments, now without rxe0: the host, its TCP and its rdmad stay up,
/// which is what a removed NIC looks like with a driver that detaches its users.
fn rxe_remove_script() -> String {
    format!(
        r#"{RDMAD_PIDS}{UPTIME}[ -e /sys/class/infiniband/rxe0 ] || {{ echo 'there is no rxe0'; exit 3; }}
# The processes with a file of /dev/infiniband open, from one `ls -l` of every fd directory
# (a readlink per fd forked a thousand times per scan: 4 s on an idle one-host lab).
ib_users() {{
    ls -l /proc/[0-9]*/fd/ 2>/dev/null | awk '
        /^\/proc\/[0-9]+\/fd/ {{ split($0, a, "/"); p = a[3] }}
        / -> \/dev\/infiniband\// {{ print p }}' | sort -u
}}
d=/run/lab-rxe-remove
rm -rf $d; mkdir -p $d
users=$(echo $(ib_users))
for pid in $users; do
    [ "$(cat /proc/$pid/comm 2>/dev/null)" = rdmad ] || continue
    log=$(readlink /proc/$pid/fd/1 2>/dev/null)
    case "$log" in /*) ;; *) log=/dev/null ;; esac
    {{ echo "$log"; tr '\0' '\n' < /proc/$pid/cmdline; }} > $d/$pid.args 2>/dev/null
done
[ -n "$users" ] && kill -9 $users
end=$(($(uptime_s) + 10))
while [ -n "$(ib_users)" ]; do
    [ "$(uptime_s)" -ge $end ] && {{ echo "rxe0 still open by $(echo $(ib_users)) 10 s after SIGKILL"; break; }}
    usleep 50000
done
# In the background: if anything still holds the device, the delete waits for it in D state.
rdma link delete rxe0 > $d/delete.log 2>&1 < /dev/null &
end=$(($(uptime_s) + 15))
while [ -e /sys/class/infiniband/rxe0 ] && [ "$(uptime_s)" -lt $end ]; do
    usleep 50000
done
gone=yes; [ -e /sys/class/infiniband/rxe0 ] && gone=no
started=""
for f in $d/*.args; do
    [ -f "$f" ] || continue
    log=$(head -n 1 "$f")
    sed 1d "$f" > "$f.argv"
    set --
    while IFS= read -r a; do set -- "$@" "$a"; done < "$f.argv"
    [ $# -gt 0 ] || continue
    setsid "$@" >> "$log" 2>&1 < /dev/null &
    started="$started $!"
done
[ $gone = yes ] || {{ echo "rxe0 still there 15 s after rdma link delete (users now: $(echo $(ib_users)); $(cat $d/delete.log))"; exit 1; }}
usleep 500000
for pid in $started; do
    # Our child: a zombie (exited, not reaped yet) would pass `kill -0`.
    grep -q '^State:[[:space:]]*[RSD]' /proc/$pid/status 2> /dev/null \
        || {{ echo "rdmad $pid exited at once after the restart (see its log)"; exit 1; }}
done
echo "users killed:${{users:+ }}$users; rdmad restarted:$started"
"#
    )
}

fn rxe_remove(lab: &Arc<Lab>, args: &[&str]) -> Result<String, ControlError> {
    let (i, h) = one_host(lab, "rxe-remove", args)?;
    let what = on_host(lab, i, "rxe-remove", &rxe_remove_script())?;
    lock(&lab.hosts)[i].rxe_removed = true;
    Ok(log_fault(
        lab,
        &format!("rxe-remove {h} (rdma link delete rxe0, {what}; eth1 and the host stay up)"),
    ))
}

/// `rdma link add rxe0` on eth1, then (bounded) until its port is ACTIVE, unless eth1 has no
/// carrier (a `link hK down`): then the port stays DOWN, as it would.
fn add_rxe0(lab: &Lab, i: usize) -> Result<String, ControlError> {
    let out = on_host(
        lab,
        i,
        "rxe-add",
        &format!(
            r#"{UPTIME}[ -e /sys/class/infiniband/rxe0 ] && {{ echo "rxe0 is already there"; exit 3; }}
rdma link add rxe0 type rxe netdev eth1 2>&1 || exit 1
[ "$(cat /sys/class/net/eth1/carrier 2>/dev/null)" = 1 ] || {{ echo "eth1 has no carrier: rxe0 is DOWN"; exit 0; }}
end=$(($(uptime_s) + 15))
until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
    [ "$(uptime_s)" -ge $end ] && {{ echo "rxe0 was not ACTIVE 15 s after rdma link add"; exit 1; }}
    usleep 50000
done
echo "rxe0 ACTIVE"
"#
        ),
    )?;
    lock(&lab.hosts)[i].rxe_removed = false;
    Ok(out)
}

fn rxe_add(lab: &Arc<Lab>, args: &[&str]) -> Result<String, ControlError> {
    let (i, h) = one_host(lab, "rxe-add", args)?;
    let state = add_rxe0(lab, i)?;
    Ok(log_fault(
        lab,
        &format!("rxe-add {h} (rdma link add rxe0 type rxe netdev eth1: {state})"),
    ))
}

/// One status word per host-local fault that is set (for `status`).
pub(super) fn host_faults(lab: &Lab, i: usize) -> String {
    let ppm = lab.switch.ingress_loss(i);
    let hosts = lock(&lab.hosts);
    let h = &hosts[i];
    format!(
        "netem={} ingress_loss={} rdmad={} rxe0={}",
        h.netem.as_deref().unwrap_or("none"),
        if ppm > 0 { percent(ppm) } else { "none".into() },
        if h.rdmad_killed { "killed" } else { "running" },
        if h.rxe_removed { "removed" } else { "present" },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netem_arguments_are_plain_words() {
        assert_eq!(netem_args(&["loss", "5%"]).unwrap(), "loss 5%");
        assert_eq!(netem_args(&["delay", "2ms"]).unwrap(), "delay 2ms");
        assert!(netem_args(&["loss", "5%;reboot"]).is_err());
        assert!(netem_args(&["delay", "$(x)"]).is_err());
        assert!(netem_args(&[]).is_err());
    }

    #[test]
    fn percentages_are_parts_per_million() {
        assert_eq!(parse_percent("20%"), Ok(200_000));
        assert_eq!(parse_percent("20"), Ok(200_000));
        assert_eq!(parse_percent("0.5%"), Ok(5_000));
        assert_eq!(parse_percent("100%"), Ok(PPM));
        assert_eq!(parse_percent("0%"), Ok(0));
        assert!(parse_percent("101%").is_err());
        assert!(parse_percent("-1%").is_err());
        assert!(parse_percent("lots").is_err());
        assert_eq!(percent(200_000), "20%");
        assert_eq!(percent(5_000), "0.5%");
    }

    #[test]
    fn the_guest_scripts_are_valid_shell() {
        for (name, script) in [
            ("kill-rdmad", kill_rdmad_script()),
            ("start-rdmad", start_rdmad_script()),
            ("rxe-remove", rxe_remove_script()),
        ] {
            let out = std::process::Command::new("sh")
                .args(["-n", "-c", &script])
                .output()
                .expect("sh runs");
            assert!(
                out.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // Nothing of the delete's output may hold the agent's connection open.
        assert!(rxe_remove_script().contains("rdma link delete rxe0 > "));
    }

    #[test]
    fn every_fault_is_listed_once_in_the_usage() {
        let u = usage();
        for f in FAULTS {
            assert_eq!(
                FAULTS.iter().filter(|g| g.name == f.name).count(),
                1,
                "{} twice",
                f.name
            );
            assert!(u.contains(&format!("{} {}", f.name, f.args)), "{u}");
        }
        assert!(u.starts_with("netem hK ARGS.. | ingress hK loss P%"));
    }
}
