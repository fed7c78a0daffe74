//! The options table (`rdmad::options`) against what it generates: the README's table, the
//! config file, the environment, the flags, the man page and the shell completions.
//!
//! rdmad's options do not depend on build features: `cargo test` runs these tests in the
//! default and in the full-feature build (tests/run does both), so an option declared for one
//! build only fails the README check in the other.
//!
//! Only `every_option_is_a_flag_an_env_variable_and_a_config_key` sets environment variables
//! and parses the command line in this binary (tests run on parallel threads).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use rdmad::cli::{parse_from, Settings};
use rdmad::options::{self, Kind, Opt};

const COMMANDS_ONLY: &[&str] = &["config", "once", "print-metrics"];

#[test]
fn readme_table_is_the_generated_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = std::fs::read_to_string(&path).expect("rdmad/README.md");
    let expected = options::readme_table();
    let begin = readme.find(options::README_BEGIN);
    let end = readme
        .find(options::README_END)
        .map(|i| i + options::README_END.len() + 1);
    let found = match (begin, end) {
        (Some(b), Some(e)) if b < e => &readme[b..e.min(readme.len())],
        _ => "",
    };
    assert!(
        found == expected,
        "rdmad/README.md's options table differs from the options table in \
         rdmad/src/options.rs. Replace the lines from `{}` to `{}` (both included) with the \
         output of `cargo run --release -p rdmad -- --generate readme-options`, which is:\n\n{expected}",
        options::README_BEGIN,
        options::README_END,
    );
}

/// A value other than the default, as written on the command line and in TOML.
fn sample(o: &Opt) -> (String, String) {
    let quoted = |s: &str| format!("\"{s}\"");
    let array = |items: &[&str]| {
        let q: Vec<String> = items.iter().map(|s| quoted(s)).collect();
        format!("[{}]", q.join(", "))
    };
    match o.kind {
        Kind::Bool | Kind::Switch => {
            let v = if o.default == Some("true") {
                "false"
            } else {
                "true"
            };
            (v.into(), v.into())
        }
        Kind::Text => ("127.0.0.1:1".into(), quoted("127.0.0.1:1")),
        Kind::Path => ("/x1".into(), quoted("/x1")),
        Kind::Int { min, max } => {
            let default: Option<u64> = o.default.and_then(|d| d.parse().ok());
            let n = [min + 2, min + 1, max]
                .into_iter()
                .find(|n| *n <= max && Some(*n) != default)
                .expect("a value in range");
            (n.to_string(), n.to_string())
        }
        Kind::Duration { .. } => ("2s".into(), quoted("2s")),
        Kind::Size => ("128".into(), "128".into()),
        Kind::List => ("a1,b1".into(), array(&["a1", "b1"])),
        Kind::SizeList => ("8K,2M".into(), array(&["8K", "2M"])),
        Kind::Addr => (":9999".into(), quoted(":9999")),
        Kind::Choice(words) => {
            let w = words
                .iter()
                .find(|w| Some(**w) != o.default)
                .expect("another choice");
            (w.to_string(), quoted(w))
        }
    }
}

fn settings(args: &[String]) -> Settings {
    let mut argv = vec!["rdmad".to_string()];
    argv.extend(args.iter().cloned());
    parse_from(&argv).unwrap_or_else(|e| panic!("rdmad {args:?}: {e:?}"))
}

/// A directory of its own per test (they run in parallel threads of one process).
fn tempdir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rdmad-options-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Set from the config file, from the environment and as a flag, each option gives the same
/// settings, and they differ from the defaults (the option reaches a setting).
#[test]
fn every_option_is_a_flag_an_env_variable_and_a_config_key() {
    let dir = tempdir("sources");
    let file = dir.join("rdmad.toml");
    let defaults = settings(&[]);
    let mut checked = 0;
    for o in options::all() {
        if !o.file {
            assert!(
                COMMANDS_ONLY.contains(&o.name),
                "--{} cannot be set from the config file",
                o.name
            );
            continue;
        }
        let env = o
            .env_var()
            .unwrap_or_else(|| panic!("--{} has no environment variable", o.name));
        let (text, toml) = sample(o);
        let flag = settings(&[format!("--{}={text}", o.name)]);
        std::env::set_var(&env, &text);
        let from_env = settings(&[]);
        std::env::remove_var(&env);
        std::fs::write(&file, format!("{} = {toml}\n", o.name)).unwrap();
        let from_file = settings(&["--config".into(), file.display().to_string()]);
        assert_ne!(flag, defaults, "--{}={text} changes nothing", o.name);
        assert_eq!(from_env, flag, "{env}={text} against --{}={text}", o.name);
        assert_eq!(
            from_file, flag,
            "`{} = {toml}` against --{}",
            o.name, o.name
        );
        checked += 1;
    }
    // The collector flags, generated from the collector table.
    for spec in rdmad::collector::TABLE {
        let name = format!("collector.{}", spec.name);
        let value = if spec.default_enabled {
            "false"
        } else {
            "true"
        };
        let flag = settings(&[format!("--{name}={value}")]);
        let env = rdmad::cli::collector_env(spec.name);
        std::env::set_var(&env, value);
        let from_env = settings(&[]);
        std::env::remove_var(&env);
        std::fs::write(&file, format!("{name} = {value}\n")).unwrap();
        let from_file = settings(&["--config".into(), file.display().to_string()]);
        assert_ne!(flag, defaults, "--{name}={value} changes nothing");
        assert_eq!(from_env, flag, "{env}={value}");
        assert_eq!(from_file, flag, "`{name} = {value}`");
        checked += 1;
    }
    assert!(checked > 30, "{checked} options checked");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn options_are_declared_once_and_collector_options_beside_their_collector() {
    let mut names: Vec<&str> = options::all().map(|o| o.name).collect();
    let n = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), n, "an option declared twice");
    // Everything in the config file's keys is an option or a collector, nothing else.
    for key in rdmad::config::known_keys() {
        let collector = key
            .strip_prefix("collector.")
            .and_then(rdmad::collector::spec)
            .is_some();
        assert!(
            collector || options::find(&key).is_some_and(|o| o.file),
            "{key}"
        );
    }
    let owners = rdmad::collector::spec("netlink_owners").unwrap();
    assert!(owners
        .options
        .iter()
        .all(|o| o.name.starts_with("collector.netlink_owners.")));
    let probes = rdmad::collector::spec("probes").unwrap();
    assert!(probes.options.iter().all(|o| o.name.starts_with("probe.")));
    assert!(options::find("scrape.timeout").is_some());
}

/// Every `--name` the command accepts (options and collector flags), but `--generate`.
fn longs() -> Vec<String> {
    rdmad::cli::command()
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long().map(String::from))
        .collect()
}

#[test]
fn the_command_has_every_option_of_the_table() {
    let longs = longs();
    for o in options::all() {
        assert!(longs.iter().any(|l| l == o.name), "--{}", o.name);
    }
    for spec in rdmad::collector::TABLE {
        assert!(longs.contains(&format!("collector.{}", spec.name)));
        assert!(longs.contains(&format!("no-collector.{}", spec.name)));
    }
}

#[test]
fn man_page_has_every_option_and_renders() {
    let roff = rdmad::cli::generate("man").expect("man page");
    assert!(roff.contains(".TH rdmad 8"), "section 8");
    let plain = roff.replace("\\-", "-");
    for long in longs() {
        assert!(
            plain.contains(&format!("--{long}")),
            "--{long} not in the man page"
        );
    }
    for o in options::all() {
        if let Some(env) = o.env_var() {
            assert!(plain.contains(&env), "{env} not in the man page");
        }
    }
    let dir = tempdir("man");
    let page = dir.join("rdmad.8");
    std::fs::write(&page, &roff).unwrap();
    let rendered = render_man(&page);
    std::fs::remove_dir_all(&dir).unwrap();
    let Some(text) = rendered else {
        return;
    };
    for long in longs() {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("--{long}"))),
            "--{long} has no entry in the rendered man page:\n{text}"
        );
    }
}

/// The page as `man -l` (else groff) renders it; `None` when neither is installed (a
/// failure when CI is set).
fn render_man(page: &Path) -> Option<String> {
    let tries: [(&str, Vec<&std::ffi::OsStr>); 2] = [
        ("man", vec!["-l".as_ref(), page.as_os_str()]),
        (
            "groff",
            vec!["-man".as_ref(), "-Tutf8".as_ref(), page.as_os_str()],
        ),
    ];
    for (tool, args) in tries {
        let out = match Command::new(tool)
            .args(&args)
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "250")
            .env("GROFF_NO_SGR", "1")
            .output()
        {
            Ok(out) => out,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("{tool}: {e}"),
        };
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // Overstrike bold (`c\bc`) as plain text.
        let mut text = String::new();
        for c in String::from_utf8_lossy(&out.stdout).chars() {
            if c == '\u{8}' {
                text.pop();
            } else {
                text.push(c);
            }
        }
        return Some(text.replace(['\u{2010}', '\u{2212}'], "-"));
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "neither man nor groff is installed to render the man page"
    );
    eprintln!("man_page_has_every_option_and_renders: no man or groff, page not rendered");
    None
}

#[test]
fn completions_name_every_option() {
    for shell in ["complete-bash", "complete-zsh", "complete-fish"] {
        let script = rdmad::cli::generate(shell).expect(shell);
        for long in longs() {
            let written = match shell {
                // fish: `complete -c rdmad -l web.listen-address ...`
                "complete-fish" => format!("-l {long}"),
                _ => format!("--{long}"),
            };
            assert!(script.contains(&written), "{shell}: no {written}");
        }
    }
}
