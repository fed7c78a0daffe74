//! The deployment files (the example config, the systemd unit, the Kubernetes manifests)
//! checked against the binary: the config loads and runs, every flag they pass is one rdmad
//! accepts.

use std::path::PathBuf;

mod common;

use common::{once, tempdir, workspace};

#[test]
fn example_config_loads_and_runs() {
    let example = workspace().join("deploy/rdmad.toml");
    let config = rdmad::config::load(&example).expect("deploy/rdmad.toml is valid");
    assert!(
        config.get("web.listen-address").is_some(),
        "the example sets the listen address"
    );
    let root = workspace().join("tests/fixtures/sysfs/mlx5-roce");
    let text = once(&root, &["--config", example.to_str().unwrap()]);
    assert!(text.contains("rdma_scrape_collector_success{collector=\"sysfs_counters\"} 1\n"));
}

/// The flags of a deployment file must be flags rdmad accepts.
fn assert_flags_parse(source: &str, args: &[String]) {
    let mut argv = vec!["rdmad".to_string()];
    argv.extend(args.iter().cloned());
    if let Err(e) = rdmad::cli::command().try_get_matches_from(&argv) {
        panic!("{source}: rdmad rejects {args:?}: {e}");
    }
}

#[test]
fn systemd_unit_is_hardened_and_its_flags_are_valid() {
    let unit = std::fs::read_to_string(workspace().join("deploy/systemd/rdmad.service")).unwrap();
    let settings: Vec<&str> = unit
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && l.contains('='))
        .collect();
    for required in [
        "DynamicUser=yes",
        "CapabilityBoundingSet=",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
    ] {
        assert!(
            settings.contains(&required),
            "rdmad.service lacks {required}"
        );
    }
    assert!(
        !settings.iter().any(|l| l.contains("CAP_")),
        "rdmad.service grants a capability"
    );
    let exec = settings
        .iter()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let args: Vec<String> = exec.split_whitespace().skip(1).map(String::from).collect();
    assert!(args.iter().any(|a| a == "--config"), "{exec}");
    assert_flags_parse("rdmad.service", &args);
}

/// A string field of a YAML mapping.
fn yaml_str<'a>(v: &'a serde_yaml_ng::Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(|x| x.as_str())
}

/// The Kubernetes manifests, as rendered by `kubectl kustomize` for the base and each
/// component: the golden renders in tests/kubernetes/golden (tests/kubernetes-check keeps them
/// equal to the real renders). In each, the DaemonSet's args and environment and the
/// ConfigMap's rdmad.toml must be settings rdmad accepts, as a whole (so a component that needs
/// another, like pingmesh the probes' secret, fails here when rendered alone).
#[test]
fn kubernetes_manifests_match_the_binary() {
    use serde::Deserialize;
    use serde_yaml_ng::Value;
    let dir = workspace().join("tests/kubernetes/golden");
    let mut renders: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/kubernetes/golden exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    renders.sort();
    assert!(renders.len() >= 5, "golden renders: {renders:?}");
    let command = rdmad::cli::command();
    let tmp = tempdir("kubernetes");
    std::fs::create_dir_all(&tmp).unwrap();
    for path in &renders {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap();
        let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
            .map(|d| Value::deserialize(d).expect("a YAML document"))
            .collect();
        let kind = |k: &'static str| docs.iter().filter(move |d| yaml_str(d, "kind") == Some(k));
        let config_map = |n: &str| {
            kind("ConfigMap")
                .find(|d| yaml_str(&d["metadata"], "name") == Some(n))
                .unwrap_or_else(|| panic!("{name}: no ConfigMap {n}"))
        };
        let toml = yaml_str(&config_map("rdmad-config")["data"], "rdmad.toml").expect("rdmad.toml");
        let config = tmp.join(format!("{name}.toml"));
        std::fs::write(&config, toml).unwrap();
        let ds: Vec<&Value> = kind("DaemonSet").collect();
        assert_eq!(ds.len(), 1, "{name}: one DaemonSet");
        let container = &ds[0]["spec"]["template"]["spec"]["containers"][0];
        let mut argv = vec!["rdmad".to_string()];
        for arg in container["args"].as_sequence().expect("args") {
            let arg = arg.as_str().expect("a string arg");
            match arg.strip_prefix("--config=") {
                Some(file) => {
                    assert_eq!(
                        file, "/etc/rdmad/rdmad.toml",
                        "{name}: the ConfigMap's mount"
                    );
                    argv.push(format!("--config={}", config.display()));
                }
                None => argv.push(arg.to_string()),
            }
        }
        // Each environment variable as the flag it stands for, with its value (from the
        // ConfigMap it references): an unknown RDMAD_* name fails.
        for env in container["env"].as_sequence().into_iter().flatten() {
            let var = yaml_str(env, "name").expect("env name");
            let value = match yaml_str(env, "value") {
                Some(v) => v.to_string(),
                None => {
                    let r = &env["valueFrom"]["configMapKeyRef"];
                    let cm = config_map(yaml_str(r, "name").expect("configMapKeyRef.name"));
                    yaml_str(&cm["data"], yaml_str(r, "key").expect("key"))
                        .unwrap_or_else(|| panic!("{name}: {var}: no such key"))
                        .to_string()
                }
            };
            let flag = command
                .get_arguments()
                .find(|a| a.get_env().is_some_and(|e| e == var))
                .and_then(|a| a.get_long())
                .unwrap_or_else(|| panic!("{name}: rdmad reads no environment variable {var}"));
            if !value.is_empty() {
                argv.push(format!("--{flag}={value}"));
            }
        }
        let settings = match rdmad::cli::parse_from(&argv) {
            Ok(s) => s,
            Err(e) => panic!("{name}: rdmad rejects {argv:?}: {e:?}"),
        };
        assert_eq!(settings.sysfs, PathBuf::from("/host/sys"), "{name}");
        assert_eq!(settings.listen_address, ":9736", "{name}");
        let port = &container["ports"][0];
        assert_eq!(
            (yaml_str(port, "name"), port["containerPort"].as_u64()),
            (Some("metrics"), Some(9736)),
            "{name}"
        );
        assert_eq!(
            settings.collectors.contains(&"trace"),
            argv.iter().any(|a| a == "--collector.trace"),
            "{name}"
        );
        assert_eq!(
            settings.probe.enable,
            argv.iter().any(|a| a == "--probe.enable"),
            "{name}"
        );
        assert!(!text.contains("NET_ADMIN"), "{name}: NET_ADMIN");
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}
