//! Helpers shared by rdmad's integration tests (`tests/e2e.rs`, `tests/web_config.rs`).
// Each test file compiles this module on its own and uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("rdmad is inside the workspace")
        .to_path_buf()
}

/// The rdmad binary under test, with no `RDMAD_*` variable inherited: settings must come from
/// the test alone.
pub fn rdmad() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rdmad"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("RDMAD_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// The program `name` from PATH. Missing: `None` (the caller skips, saying so), or a failure
/// when `CI` is set, because CI installs the Debian `package` that ships it.
pub fn tool_on_path(name: &str, package: &str, test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is not installed but CI is set: install it (Debian package `{package}`)"
        );
        eprintln!("SKIP {test}: {name} not installed (apt-get install {package})");
    }
    found
}

/// Start `cmd` (an [`rdmad`] command listening on a free port, e.g.
/// `--web.listen-address=127.0.0.1:0`) with info logs on stderr, and wait for its
/// "listening" line: the child and the address it names. Fails, with everything rdmad
/// printed, when it exits first. stderr keeps being drained so rdmad never blocks on it.
pub fn spawn_listening(cmd: &mut Command) -> (Child, String) {
    let mut child = cmd
        .env("RDMAD_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rdmad starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = String::new();
    let address = loop {
        let Some(Ok(line)) = lines.next() else {
            panic!("rdmad exited before listening:\n{seen}");
        };
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("listening") {
            break line
                .split("address=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .expect("the listening line names the address")
                .to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, address)
}
