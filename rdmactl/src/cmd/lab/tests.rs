use super::build::is_cargo_run_package_var;
use super::spec::{parse_add, parse_forward, parse_multi_forward};
use super::*;
use rdma_lab::multi;

#[test]
fn the_lab_cargo_drops_what_cargo_run_says_of_its_package() {
    for v in [
        "CARGO_PKG_NAME",
        "CARGO_PKG_VERSION_MAJOR",
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        assert!(is_cargo_run_package_var(v), "{v}");
    }
    for v in [
        "CARGO",
        "CARGO_HOME",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_JOBS",
        "PATH",
    ] {
        assert!(!is_cargo_run_package_var(v), "{v}");
    }
}

#[test]
fn forward_specs_are_checked() {
    assert_eq!(parse_forward("19736:9736").unwrap(), (19736, 9736));
    assert!(parse_forward("9736").is_err());
    assert!(parse_forward("0:9736").is_err());
    assert!(parse_forward("x:9736").is_err());
    assert!(parse_forward("70000:1").is_err());
}

#[test]
fn multi_host_forwards_name_a_host_or_count_up() {
    assert_eq!(
        parse_multi_forward("h2:19736:9736", 3).unwrap(),
        vec![(1, 19736, 9736)]
    );
    assert_eq!(
        parse_multi_forward("19736:9736", 3).unwrap(),
        vec![(0, 19736, 9736), (1, 19737, 9736), (2, 19738, 9736)]
    );
    assert!(parse_multi_forward("h4:19736:9736", 3).is_err());
    assert!(parse_multi_forward("h2:19736", 3).is_err());
    assert!(parse_multi_forward("65535:9736", 2).is_err());
}

#[test]
fn add_specs_are_checked() {
    assert!(parse_add("/nonexistent/file").is_err());
    let exe = std::env::current_exe().unwrap();
    let (h, g) = parse_add(exe.to_str().unwrap()).unwrap();
    assert_eq!(h, exe);
    assert!(g.starts_with("/opt/rdma/extra/"));
    let rel = format!("{}:relative/path", exe.display());
    assert!(parse_add(&rel).is_err());
}

/// The fault help is written by hand: it names every fault the controller knows.
#[test]
fn fault_help_names_every_fault() {
    use clap::CommandFactory;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        lab: LabCommand,
    }
    let mut cmd = Cli::command();
    let help = cmd
        .find_subcommand_mut("fault")
        .expect("a fault subcommand")
        .render_long_help()
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for f in multi::FAULTS {
        assert!(
            help.contains(&format!(
                "{} {}",
                f.name,
                f.args.split(' ').next().unwrap_or("")
            )),
            "`lab fault --help` does not show `{} {}`:\n{help}",
            f.name,
            f.args
        );
    }
}

/// The README's fault table has a row for every fault (what it does to RoCE).
#[test]
fn readme_fault_table_has_every_fault() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    // The first cells of the table's rows: "`partition hA hB` / `heal`".
    let firsts: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l.split('|').nth(1))
        .collect();
    for f in multi::FAULTS {
        assert!(
            firsts
                .iter()
                .any(|c| c.contains(&format!("`{} ", f.name))
                    || c.contains(&format!("`{}`", f.name))),
            "README.md's fault table has no row for `{}`",
            f.name
        );
    }
}
