//! What this rdmad binary is: version, git revision and the cargo features it was built with.
//! Shown by `--version` and exported as `rdma_exporter_build_info{version,revision,features}`;
//! the container image is tagged with the same three (deploy/image/build).

/// The crate version (the workspace's `version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit the binary was built from, or "unknown" (built outside a git checkout
/// without `RDMAD_BUILD_REVISION`); set by build.rs.
pub const REVISION: &str = env!("RDMAD_REVISION");

/// The optional cargo features compiled in, in this order.
const ALL_FEATURES: &[(&str, bool)] = &[
    ("bpf", cfg!(feature = "bpf")),
    ("verbs", cfg!(feature = "verbs")),
];

/// The enabled optional features, comma-separated, or "none".
pub fn features() -> String {
    let on: Vec<&str> = ALL_FEATURES
        .iter()
        .filter(|(_, enabled)| *enabled)
        .map(|(name, _)| *name)
        .collect();
    if on.is_empty() {
        "none".to_string()
    } else {
        on.join(",")
    }
}

/// `--version`: `rdmad 0.1.0 (revision <commit>, features bpf,verbs)` (clap adds "rdmad ").
pub fn long_version() -> String {
    format!("{VERSION} (revision {REVISION}, features {})", features())
}

#[cfg(test)]
#[path = "../build/revision.rs"]
#[allow(dead_code)]
mod revision;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_match_the_cfg() {
        let f = features();
        assert_eq!(f.contains("bpf"), cfg!(feature = "bpf"), "{f}");
        assert_eq!(f.contains("verbs"), cfg!(feature = "verbs"), "{f}");
        assert_eq!(
            f == "none",
            !cfg!(feature = "bpf") && !cfg!(feature = "verbs")
        );
    }

    #[test]
    fn revision_is_a_commit_or_unknown() {
        assert!(
            REVISION == revision::UNKNOWN || revision::is_commit(REVISION),
            "{REVISION}"
        );
        assert!(long_version().starts_with(VERSION));
        assert!(long_version().contains(REVISION));
    }

    #[test]
    fn a_tree_without_git_is_unknown() {
        // A fresh directory outside any repository stands for an unpacked release tarball.
        let dir = std::env::temp_dir().join(format!("rdmad-no-git-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (rev, watch) = revision::revision(&dir, None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(rev, revision::UNKNOWN);
        assert!(watch.is_empty());
    }

    #[test]
    fn the_environment_overrides_git_and_junk_is_unknown() {
        let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let commit = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(revision::revision(here, Some(commit)).0, commit);
        assert_eq!(
            revision::revision(here, Some("0123456789ABCDEF0123456789ABCDEF01234567")).0,
            commit
        );
        assert_eq!(
            revision::revision(here, Some("not a commit\n")).0,
            revision::UNKNOWN
        );
        assert_eq!(revision::revision(here, Some("g1234")).0, revision::UNKNOWN);
    }

    #[test]
    fn a_git_checkout_gives_its_head() {
        let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let head = std::process::Command::new("git")
            .arg("-C")
            .arg(here)
            .args(["rev-parse", "HEAD"])
            .output();
        match head {
            Ok(out) if out.status.success() => {
                let head = String::from_utf8(out.stdout).unwrap().trim().to_string();
                let (rev, watch) = revision::revision(here, None);
                assert_eq!(rev, head);
                assert!(watch.iter().any(|p| p.ends_with("HEAD")), "{watch:?}");
            }
            _ => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "CI is set but this is not a git checkout with git installed"
                );
                eprintln!("SKIP a_git_checkout_gives_its_head: no git checkout here");
            }
        }
    }
}
