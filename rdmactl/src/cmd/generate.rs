//! `rdmactl generate`: the man page (section 1) and shell completions, generated from the clap
//! command, for packages. Hidden from `--help`.

use std::io::Write;
use std::process::ExitCode;

use clap_complete::Shell;

/// `rdmactl generate WHAT`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// What to print to stdout.
    #[arg(value_enum)]
    what: What,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum What {
    /// The man page, roff, section 1.
    Man,
    CompleteBash,
    CompleteZsh,
    CompleteFish,
}

/// The text of `what` for the command `cmd` (rdmactl's).
fn generate(what: What, mut cmd: clap::Command) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    let shell = match what {
        What::Man => {
            clap_mangen::Man::new(cmd).section("1").render(&mut out)?;
            return Ok(out);
        }
        What::CompleteBash => Shell::Bash,
        What::CompleteZsh => Shell::Zsh,
        What::CompleteFish => Shell::Fish,
    };
    clap_complete::generate(shell, &mut cmd, "rdmactl", &mut out);
    Ok(out)
}

pub fn run(args: Args, cmd: clap::Command) -> anyhow::Result<ExitCode> {
    let text = generate(args.what, cmd)?;
    match std::io::stdout().lock().write_all(&text) {
        // A reader that stopped early (`| head`) is not a failure.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn text(what: What) -> String {
        String::from_utf8(generate(what, crate::Cli::command()).unwrap()).unwrap()
    }

    fn visible_subcommands() -> Vec<String> {
        crate::Cli::command()
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name().to_string())
            .collect()
    }

    #[test]
    fn generate_is_hidden() {
        assert!(!visible_subcommands().contains(&"generate".to_string()));
        let help = crate::Cli::command().render_help().to_string();
        assert!(!help.contains("generate"), "{help}");
        assert!(help.contains("devices"), "{help}");
    }

    #[test]
    fn man_page_names_every_subcommand_and_renders() {
        let roff = text(What::Man);
        assert!(roff.contains(".TH rdmactl 1"), "section 1");
        let subcommands = visible_subcommands();
        assert!(subcommands.len() >= 10, "{subcommands:?}");
        for name in &subcommands {
            assert!(
                roff.contains(&format!("rdmactl\\-{name}(1)")),
                "{name} not in the man page"
            );
        }
        let dir = std::env::temp_dir().join(format!("rdmactl-man-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let page = dir.join("rdmactl.1");
        std::fs::write(&page, &roff).unwrap();
        let out = std::process::Command::new("man")
            .arg("-l")
            .arg(&page)
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "200")
            .output()
            .or_else(|_| {
                std::process::Command::new("groff")
                    .args(["-man", "-Tutf8"])
                    .arg(&page)
                    .output()
            });
        std::fs::remove_dir_all(&dir).unwrap();
        match out {
            Ok(out) => {
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let text = String::from_utf8_lossy(&out.stdout);
                assert!(text.contains("SUBCOMMANDS"), "{text}");
            }
            Err(e) => assert!(
                std::env::var_os("CI").is_none(),
                "neither man nor groff to render the man page: {e}"
            ),
        }
    }

    #[test]
    fn completions_name_every_subcommand_and_option() {
        let cmd = crate::Cli::command();
        for what in [What::CompleteBash, What::CompleteZsh, What::CompleteFish] {
            let script = text(what);
            for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                assert!(
                    script.contains(sub.get_name()),
                    "{what:?}: {}",
                    sub.get_name()
                );
                for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                    if let Some(long) = arg.get_long() {
                        let written = match what {
                            What::CompleteFish => format!("-l {long}"),
                            _ => format!("--{long}"),
                        };
                        assert!(
                            script.contains(&written),
                            "{what:?}: {} {written}",
                            sub.get_name()
                        );
                    }
                }
            }
        }
    }

    /// The packaged rdmactl (built without the `lab` feature): no `lab` in `--help`, the
    /// man page or any completion, not even a hidden one (clap_complete lists hidden
    /// subcommands), and no `lesson exercise verify`.
    #[cfg(not(feature = "lab"))]
    #[test]
    fn packaged_build_offers_no_lab() {
        let cmd = crate::Cli::command();
        assert!(cmd.find_subcommand("lab").is_none());
        let help = cmd.clone().render_help().to_string();
        assert!(
            !help.lines().any(|l| l.trim_start().starts_with("lab ")),
            "{help}"
        );
        assert!(!text(What::Man).contains("rdmactl\\-lab"));
        assert!(!text(What::CompleteBash).contains("rdmactl__subcmd__lab"));
        assert!(!text(What::CompleteZsh).contains("'lab:"));
        assert!(!text(What::CompleteFish).contains("-a \"lab\""));
        let exercise = cmd
            .find_subcommand("lesson")
            .and_then(|l| l.find_subcommand("exercise"))
            .expect("lesson exercise");
        assert!(exercise.find_subcommand("check").is_some());
        assert!(exercise.find_subcommand("verify").is_none());
    }

    /// The checkout's rdmactl (the `lab` feature, on by default) offers the lab everywhere:
    /// the strings the packaged build's test looks for are the ones a lab would leave.
    #[cfg(feature = "lab")]
    #[test]
    fn lab_build_offers_the_lab() {
        assert!(visible_subcommands().contains(&"lab".to_string()));
        assert!(text(What::Man).contains("rdmactl\\-lab"));
        assert!(text(What::CompleteBash).contains("rdmactl__subcmd__lab"));
        assert!(text(What::CompleteZsh).contains("'lab:"));
        assert!(text(What::CompleteFish).contains("-a \"lab\""));
        let cmd = crate::Cli::command();
        let exercise = cmd
            .find_subcommand("lesson")
            .and_then(|l| l.find_subcommand("exercise"))
            .expect("lesson exercise");
        assert!(exercise.find_subcommand("verify").is_some());
    }
}
