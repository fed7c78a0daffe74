//! One module per subcommand.
pub mod counters;
pub mod devices;
pub mod doctor;
pub mod doctor_roce;
pub mod exercise;
#[cfg(feature = "verbs")]
pub mod experiment;
pub mod explain;
pub mod generate;
#[cfg(feature = "lab")]
pub mod lab;
pub mod lesson;
pub mod mesh;
pub mod monitor;
#[cfg(feature = "verbs")]
pub mod ping;
pub mod resources;
pub mod top;
pub mod trace;
#[cfg(feature = "verbs")]
pub mod verbs;
#[cfg(feature = "verbs")]
pub mod wire;

/// Arguments of a verbs-based subcommand in a build without the `verbs` feature: anything is
/// accepted, and running it says how to get a build that has it.
#[cfg(not(feature = "verbs"))]
#[derive(clap::Args, Debug)]
pub struct WithoutVerbs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _rest: Vec<String>,
}

/// A number of seconds on the command line (`--interval` of `doctor`, `doctor roce` and
/// `mesh`, `doctor --seconds`): the workspace's duration grammar ([`rdmakit::duration`]),
/// so `500ms` or `2m` work too (a superset of the plain `f64` these took) and non-finite,
/// negative or huge numbers are an error here. Each command keeps its own range check.
pub fn parse_seconds(text: &str) -> Result<f64, rdmakit::duration::DurationError> {
    parse_duration(text).map(|d| d.as_secs_f64())
}

/// How often [`sleep_until_flag`] looks at its flag: the most a signal that sets it waits
/// to be acted on (std's sleep resumes after a signal).
const FLAG_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Sleep for `interval`, or until `flag` is set (a signal handler's: `counters --watch`'s
/// stop, `doctor roce`'s SIGUSR1); true when the flag cut it short.
pub fn sleep_until_flag(
    interval: std::time::Duration,
    flag: &std::sync::atomic::AtomicBool,
) -> bool {
    let deadline = std::time::Instant::now() + interval;
    loop {
        if flag.load(std::sync::atomic::Ordering::Relaxed) {
            return true;
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(FLAG_POLL.min(deadline - now));
    }
}

/// [`parse_seconds`] as a [`std::time::Duration`] (`trace --duration`).
pub fn parse_duration(text: &str) -> Result<std::time::Duration, rdmakit::duration::DurationError> {
    rdmakit::duration::parse(text, std::time::Duration::ZERO..=std::time::Duration::MAX)
}

/// The error of a verbs-based subcommand in a build without the `verbs` feature (exit 3).
#[cfg(not(feature = "verbs"))]
pub fn without_verbs(name: &str) -> anyhow::Result<std::process::ExitCode> {
    Err(crate::exit::CodedError::no_rdma(format!(
        "this rdmactl was built without verbs support, so `rdmactl {name}` is not available; \
         rebuild with `cargo build-rdma` (cargo build --release -p rdmad -p rdmactl \
         --features rdmactl/verbs; needs cmake and clang). `rdmactl lab` builds it for the VM."
    )))
}

/// A command line this build refused because it names developer tooling it was built
/// without (the `lab` feature: `rdmactl lab ...`, `rdmactl lesson exercise verify`): the
/// error saying so and how to get it, instead of clap's "unrecognized subcommand". None for
/// any other error, and always in a build with the lab.
pub fn without_lab(
    err: &clap::Error,
    args: impl IntoIterator<Item = String>,
) -> Option<anyhow::Error> {
    if cfg!(feature = "lab") || err.kind() != clap::error::ErrorKind::InvalidSubcommand {
        return None;
    }
    let args: Vec<String> = args.into_iter().skip(1).collect();
    let what = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["lab", ..] => "lab",
        ["lesson", "exercise", "verify", ..] => "lesson exercise verify",
        _ => return None,
    };
    need_lab(what).err()
}

/// Ok when this rdmactl has the lab (the `lab` feature), else the error saying it was built
/// without it (exit 2, like a subcommand this build does not have).
pub fn need_lab(what: &str) -> anyhow::Result<()> {
    if cfg!(feature = "lab") {
        return Ok(());
    }
    Err(anyhow::Error::new(crate::exit::CodedError {
        message: format!(
            "this rdmactl was built without the lab feature (developer tooling): \
             cargo build -p rdmactl --features lab (on by default in a checkout) builds one \
             with `rdmactl {what}`"
        ),
        code: 2,
    }))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    /// What rdmactl says to `argv`: None when it parses or clap's own error stands, else
    /// the lab's message and exit code.
    fn refused(argv: &[&str]) -> Option<(String, u8)> {
        let err = crate::Cli::try_parse_from(argv).err()?;
        let lab = super::without_lab(&err, argv.iter().map(|a| a.to_string()))?;
        let code = lab
            .downcast_ref::<crate::exit::CodedError>()
            .map(|c| c.code);
        Some((lab.to_string(), code.unwrap_or(0)))
    }

    #[test]
    fn seconds_options_take_the_duration_grammar() {
        use super::{parse_duration, parse_seconds};
        // The plain f64 seconds these options took, and the grammar's units.
        assert_eq!(parse_seconds("5"), Ok(5.0));
        assert_eq!(parse_seconds("0"), Ok(0.0));
        assert_eq!(parse_seconds("1.5"), Ok(1.5));
        assert_eq!(parse_seconds("1e2"), Ok(100.0));
        assert_eq!(parse_seconds("500ms"), Ok(0.5));
        assert_eq!(parse_seconds("2m"), Ok(120.0));
        assert_eq!(
            parse_duration("10s"),
            Ok(std::time::Duration::from_secs(10))
        );
        // What parsed as f64 before and failed later (or panicked: `trace --duration inf`).
        for bad in ["inf", "NaN", "-1", "1e20", "1e400", "soon"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        for argv in [
            &["rdmactl", "doctor", "--interval", "500ms"][..],
            &["rdmactl", "doctor", "--interval", "2.5"][..],
            &["rdmactl", "doctor", "roce", "--interval", "0"][..],
            &["rdmactl", "mesh", "--interval", "1m"][..],
            &["rdmactl", "trace", "qp", "--duration", "1e19"][..],
            &["rdmactl", "trace", "qp", "--duration", "30"][..],
        ] {
            assert!(crate::Cli::try_parse_from(argv).is_ok(), "{argv:?}");
        }
        let err = crate::Cli::try_parse_from(["rdmactl", "trace", "qp", "--duration", "inf"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("`inf` is not a duration"), "{err}");
    }

    #[cfg(not(feature = "lab"))]
    #[test]
    fn without_the_lab_feature_lab_commands_say_how_to_get_them() {
        for (argv, what) in [
            (&["rdmactl", "lab", "up"][..], "`rdmactl lab`"),
            (&["rdmactl", "lab"][..], "`rdmactl lab`"),
            (
                &["rdmactl", "lesson", "exercise", "verify"][..],
                "`rdmactl lesson exercise verify`",
            ),
        ] {
            let (message, code) = refused(argv).expect("refused with the lab's message");
            assert!(
                message.contains("built without the lab feature (developer tooling)"),
                "{message}"
            );
            assert!(
                message.contains("cargo build -p rdmactl --features lab"),
                "{message}"
            );
            assert!(message.contains(what), "{message}");
            assert_eq!(code, 2);
        }
        // Any other unknown subcommand keeps clap's error.
        assert!(refused(&["rdmactl", "labx"]).is_none());
        assert!(refused(&["rdmactl", "verify"]).is_none());
        let check = super::need_lab("lesson exercise check").unwrap_err();
        assert!(check.to_string().contains("--features lab"), "{check}");
    }

    #[cfg(feature = "lab")]
    #[test]
    fn with_the_lab_feature_lab_commands_parse() {
        assert!(crate::Cli::try_parse_from(["rdmactl", "lab", "status"]).is_ok());
        assert!(crate::Cli::try_parse_from(["rdmactl", "lesson", "exercise", "verify"]).is_ok());
        assert!(super::need_lab("lesson exercise check").is_ok());
        // An unknown subcommand is clap's error, not the lab's.
        assert!(refused(&["rdmactl", "labx"]).is_none());
    }
}
