//! `rdmactl lesson exercise`: the course's checked exercises.
//!
//! Each exercise is a C program with a TODO (its starter) and what it must do on rxe0.
//! `start` copies the starter and the course's headers into a directory; `check` compiles
//! the learner's file with the course's flags and runs it in a fresh lab VM under `observe`
//! (this binary, in the VM), which reads rxe0's hw counters (rdma-experiments'
//! `CounterProbe`) and `rdma resource show` counts (its nldev reader) before and after the
//! run, and at the program's `lab_checkpoint()` when it stops itself there. The verdict
//! rests on that and the exit code, never on the program's printed lines. A two-host
//! exercise runs between h1 and h2 of the two-host lab: each host runs its side under its
//! own observer, and each host's rxe0 is judged. `verify` is CI's: every reference solution
//! must pass and every starter must fail, the one-host exercises all in one boot of the lab
//! and the two-host ones all in one boot of the two-host lab. `check` and `verify` need the
//! lab (the `lab` feature): the packaged rdmactl has neither `verify` nor a lab for `check`,
//! which says so.
//!
//! Here: the exercises, the commands and the observer (the guest's half). `judge`: what the
//! observer saw (its `@@obs` lines) and the verdict on it. `lab` (the `lab` feature only):
//! compiling with the course's flags, the runs in the lab (one VM, or h1 and h2), `check`'s
//! run and `verify`.
use anyhow::{bail, Context as _};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::exit::CodedError;

// Without the lab nothing runs a program to judge: the verdict code is the lab's, and
// stays in every build so that its unit tests run in every build.
#[cfg_attr(not(feature = "lab"), allow(dead_code))]
mod judge;
#[cfg(feature = "lab")]
mod lab;
#[cfg(test)]
mod tests;

/// What the checker requires of a run besides exit 0 and every resource released.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    /// rxe0's hw counter moved by at least this much during the run.
    AtLeast(&'static str, u64),
    /// rxe0's hw counter did not move.
    Still(&'static str),
    /// At the program's checkpoint (`lab_checkpoint()`, after its teardown and before
    /// `ibv_close_device`), `rdma resource show` counts no PD, CQ, QP or MR more than
    /// before the run.
    ReleasedAtCheckpoint,
}

/// One exercise.
struct Exercise {
    name: &'static str,
    chapter: u8,
    task: &'static str,
    starter: &'static str,
    /// The reference solution (`verify` runs it; the lab's).
    #[cfg_attr(not(feature = "lab"), allow(dead_code))]
    solution: &'static str,
    /// What the run must show on rxe0 (besides exit 0 and nothing left behind); for a
    /// two-host exercise, on h1.
    expect: &'static [Behaviour],
    /// Runs between h1 and h2 of the multi-host lab instead of on one VM.
    two: Option<TwoHosts>,
}

/// A two-host exercise: what each host runs, as a shell script in which `$PROG` is the
/// program and `$PORT` a TCP port of its own, each under the observer on that host.
struct TwoHosts {
    /// The scripts (the lab's: `check` and `verify` run them).
    #[cfg_attr(not(feature = "lab"), allow(dead_code))]
    h1: &'static str,
    #[cfg_attr(not(feature = "lab"), allow(dead_code))]
    h2: &'static str,
    /// What h2's run must show on its rxe0 (besides exit 0 and nothing left behind).
    h2_expect: &'static [Behaviour],
}

impl Exercise {
    /// Two-host exercises use librdmacm (what the lab's compile links).
    #[cfg_attr(not(feature = "lab"), allow(dead_code))]
    fn libs(&self) -> &'static [&'static str] {
        if self.two.is_some() {
            &["-libverbs", "-lrdmacm"]
        } else {
            &["-libverbs"]
        }
    }
}

macro_rules! exercise {
    ($name:literal, $chapter:expr, $task:literal, $expect:expr) => {
        exercise!($name, $chapter, $task, $expect, None)
    };
    ($name:literal, $chapter:expr, $task:literal, $expect:expr, $two:expr) => {
        Exercise {
            name: $name,
            chapter: $chapter,
            task: $task,
            starter: include_str!(concat!(
                "../../../../lessons/exercises/",
                $name,
                ".starter.c"
            )),
            solution: include_str!(concat!(
                "../../../../lessons/exercises/",
                $name,
                ".solution.c"
            )),
            expect: $expect,
            two: $two,
        }
    };
}

use Behaviour::{AtLeast, ReleasedAtCheckpoint, Still};

const EXERCISES: &[Exercise] = &[
    exercise!(
        "05-address-vector",
        5,
        "make the address vector work on RoCE as well as on InfiniBand",
        // 10 round trips, one SEND each (A and B take turns): 10 SENDs consumed 10
        // receives, none found the receive queue empty.
        &[
            AtLeast("rdma_sends", 10),
            AtLeast("rdma_recvs", 10),
            Still("send_rnr_err")
        ]
    ),
    exercise!(
        "09-teardown",
        9,
        "fix a broken teardown order",
        &[ReleasedAtCheckpoint]
    ),
    exercise!(
        "12-selective-signalling",
        12,
        "add selective signalling: 64 WRITEs, 4 completions",
        // 64 WRITEs and their ACKs went through rxe0; WRITEs consume no receive.
        &[
            AtLeast("sent_pkts", 64),
            Still("rdma_sends"),
            Still("completer_retry_err")
        ]
    ),
    exercise!(
        "12-switch-to-ud",
        12,
        "switch to UD: Q_Key at INIT, no peer at RTR, an address handle in every SEND",
        &[AtLeast("rdma_sends", 8), AtLeast("rdma_recvs", 8)]
    ),
    exercise!(
        "12-srq",
        12,
        "add a shared receive queue: B's QP takes its receives from the SRQ",
        &[AtLeast("rdma_recvs", 8), Still("send_rnr_err")]
    ),
    exercise!(
        "13-credits",
        13,
        "add credit-based flow control: 12 messages through 4 receives, rnr_retry 0",
        &[
            AtLeast("rdma_recvs", 12),
            Still("send_rnr_err"),
            Still("rcvd_rnr_err")
        ]
    ),
    exercise!(
        "16-credit-flow",
        16,
        "two hosts: real credit messages, 32 SENDs through 4 receives, rnr_retry 0",
        // h1, the sender: 32 SENDs completed, never an RNR NAK back.
        &[AtLeast("rdma_sends", 32), Still("rcvd_rnr_err")],
        Some(TwoHosts {
            h1: "exec $PROG client 10.2.0.2 $PORT",
            h2: "exec $PROG server $PORT",
            // h2, the receiver: 32 receives consumed, never an RNR NAK sent.
            h2_expect: &[AtLeast("rdma_recvs", 32), Still("send_rnr_err")],
        })
    ),
    exercise!(
        "16-killed-client",
        16,
        "two hosts: a server that survives a client killed mid-transfer",
        // h1: the killed client's 6 SENDs or more, and the second client's 10.
        &[AtLeast("rdma_sends", 16)],
        Some(TwoHosts {
            h1: KILLED_CLIENT_H1,
            h2: "exec $PROG server $PORT",
            // h2: both clients' SENDs consumed; after both connections ended, at the
            // server's checkpoint, nothing of theirs is held.
            h2_expect: &[AtLeast("rdma_recvs", 16), ReleasedAtCheckpoint],
        })
    ),
];

/// h1's side of 16-killed-client: a client that sends forever, killed with SIGKILL once
/// it has sent 6 messages (the wait is bounded), then a client that sends 10. Exits 0
/// when the first was killed and the second was served.
const KILLED_CLIENT_H1: &str = r#"log=/tmp/killed-client.$PORT.log
$PROG client 10.2.0.2 $PORT 100000 20 > $log 2>&1 &
pid=$!
i=0
until grep -q 'message 5 sent' $log; do
    i=$((i + 1))
    if [ $i -gt 1500 ] || ! kill -0 $pid 2>/dev/null; then
        echo "the first client never sent 6 messages:"; cat $log; kill -9 $pid; exit 1
    fi
    sleep 0.1
done
kill -9 $pid
wait $pid
killed=$?
tail -n 2 $log
[ $killed = 137 ] || { echo "the first client was not killed (exit $killed)"; exit 1; }
exec $PROG client 10.2.0.2 $PORT 10 0"#;

/// The headers the exercises include.
const HEADERS: &[(&str, &str)] = &[
    (
        "lab_common.h",
        include_str!("../../../../lessons/code/lab_common.h"),
    ),
    (
        "ah_attr.h",
        include_str!("../../../../lessons/code/ah_attr.h"),
    ),
];

#[derive(clap::Subcommand, Debug)]
pub enum ExerciseCommand {
    /// List the exercises.
    List,
    /// Copy an exercise's starter (and the course's headers) into DIR.
    Start {
        /// The exercise (see `list`).
        name: String,
        /// Where to put it.
        #[arg(long, default_value = "rdma-exercises")]
        dir: PathBuf,
    },
    /// Build DIR/NAME.c and run it in the lab; say what passed.
    Check {
        /// The exercise.
        name: String,
        /// Where `start` put it.
        #[arg(long, default_value = "rdma-exercises")]
        dir: PathBuf,
    },
    /// CI: every reference solution must pass and every starter must fail (one lab boot;
    /// one more, of two hosts, for the two-host exercises).
    #[cfg(feature = "lab")]
    Verify,
    /// In the lab VM: run PROG and report what it did on DEVICE (hw counter deltas,
    /// `rdma resource show` counts before, at its checkpoint and after). `check` runs it.
    #[command(hide = true)]
    Observe {
        /// The RDMA device to watch.
        #[arg(long, default_value = "rxe0")]
        device: String,
        /// Kill PROG after this many seconds (it is judged on what it did until then).
        #[arg(long, default_value_t = 60)]
        limit: u64,
        /// The program and its arguments.
        #[arg(last = true, required = true)]
        prog: Vec<String>,
    },
}

/// The observer's lines start with this, so a program's own output cannot be taken for them
/// by accident (and a program that prints them anyway only fools itself).
const OBS: &str = "@@obs ";

fn find(name: &str) -> anyhow::Result<&'static Exercise> {
    EXERCISES.iter().find(|e| e.name == name).ok_or_else(|| {
        anyhow::Error::new(CodedError {
            message: format!("no exercise {name:?}: see `rdmactl lesson exercise list`"),
            code: 2,
        })
    })
}

/// The guest's half: run `prog` with `LAB_CHECKPOINT` set, read `device`'s counters and
/// resource counts around it (and at its checkpoint, when it stops itself there), print
/// what was seen as `@@obs` lines. Exits 0 when it could observe, whatever the program did.
#[cfg(feature = "verbs")]
fn observe(device: &str, prog: &[String], limit: u64) -> anyhow::Result<ExitCode> {
    use rdma_experiments::observe::{changes, resources, CounterProbe};
    use std::path::Path;
    use std::process::Command;
    use std::time::{Duration, Instant};

    let catalog =
        rdmakit::catalog::Catalog::embedded().map_err(|e| anyhow::anyhow!("catalog: {e}"))?;
    let mut probe = CounterProbe::new(Path::new("/sys"), device);
    let before = probe.read().map_err(anyhow::Error::msg)?;
    let res_before = resources(device).map_err(anyhow::Error::msg)?;
    let (first, args) = prog.split_first().context("no program to run")?;
    let mut child = Command::new(first)
        .args(args)
        .env("LAB_CHECKPOINT", "1")
        .spawn()
        .with_context(|| format!("running {first}"))?;
    let pid = child.id();
    // Bounded: an exercise that hangs is killed after `limit` seconds (a minute unless
    // told) and judged on what it did.
    let deadline = Instant::now() + Duration::from_secs(limit);
    let mut checkpoint = None;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if Instant::now() > deadline {
            println!("{OBS}error {first} ran longer than {limit} s: killed");
            child.kill()?;
            break child.wait()?;
        }
        if checkpoint.is_none() && stopped(pid) {
            checkpoint = Some(resources(device).map_err(anyhow::Error::msg)?);
            let cont = Command::new("sh")
                .args(["-c", &format!("kill -CONT {pid}")])
                .status()?;
            if !cont.success() {
                bail!("could not continue {first} (pid {pid}) after its checkpoint");
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let after = probe.read().map_err(anyhow::Error::msg)?;
    let res_after = resources(device).map_err(anyhow::Error::msg)?;
    for c in changes(&before, &after, catalog) {
        if c.port.is_none() || c.port == Some(1) {
            println!("{OBS}counter {} {}", c.name, c.delta);
        }
    }
    for (kind, b) in &res_before {
        println!(
            "{OBS}res {kind} {b} {}",
            res_after.get(kind).copied().unwrap_or(0)
        );
    }
    if let Some(at) = checkpoint {
        println!("{OBS}checkpoint-reached");
        for (kind, v) in at {
            println!("{OBS}checkpoint {kind} {v}");
        }
    }
    println!("{OBS}exit {}", status.code().unwrap_or(-1));
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(feature = "verbs"))]
fn observe(_device: &str, _prog: &[String], _limit: u64) -> anyhow::Result<ExitCode> {
    bail!("`lesson exercise observe` needs rdmactl built with the verbs feature (the lab's is)")
}

/// Is `pid` stopped (it raised SIGSTOP at its checkpoint)? From /proc/PID/stat's state field.
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

pub fn run(cmd: ExerciseCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ExerciseCommand::List => {
            for e in EXERCISES {
                println!("{:<26} chapter {:>2}: {}", e.name, e.chapter, e.task);
            }
            println!("\nStart one with `rdmactl lesson exercise start NAME`, then `check NAME`.");
            Ok(ExitCode::SUCCESS)
        }
        ExerciseCommand::Start { name, dir } => {
            let e = find(&name)?;
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let file = dir.join(format!("{}.c", e.name));
            if file.exists() {
                bail!("{} exists: not overwriting your work", file.display());
            }
            std::fs::write(&file, e.starter)
                .with_context(|| format!("writing {}", file.display()))?;
            for (h, text) in HEADERS {
                std::fs::write(dir.join(h), text)?;
            }
            println!("{}: {}", file.display(), e.task);
            println!(
                "Edit it (look for TODO), then: rdmactl lesson exercise check {} --dir {}",
                e.name,
                dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        ExerciseCommand::Check { name, dir } => {
            let e = find(&name)?;
            super::need_lab("lesson exercise check")?;
            check(e, &dir)
        }
        ExerciseCommand::Observe {
            device,
            limit,
            prog,
        } => observe(&device, &prog, limit),
        #[cfg(feature = "lab")]
        ExerciseCommand::Verify => lab::verify(),
    }
}

#[cfg(feature = "lab")]
use lab::check;

/// Without the lab there is nothing to run the learner's program in: `run` has already
/// returned [`super::need_lab`]'s error, which this one gives again.
#[cfg(not(feature = "lab"))]
fn check(_e: &Exercise, _dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    super::need_lab("lesson exercise check").map(|()| ExitCode::from(2))
}
