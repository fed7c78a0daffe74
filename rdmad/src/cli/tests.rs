use super::*;

fn settings(args: &[&str]) -> Settings {
    let mut all = vec!["rdmad"];
    all.extend_from_slice(args);
    match parse_from(all) {
        Ok(s) => s,
        Err(e) => panic!("{e:?}"),
    }
}

#[test]
fn defaults() {
    let s = settings(&[]);
    assert_eq!(s.listen_address, ":9736");
    assert_eq!(s.sysfs, PathBuf::from("/sys"));
    assert_eq!(
        s.collectors,
        vec![
            "netlink_counters",
            "sysfs_info",
            "sysfs_counters",
            "netlink_qp_counters",
            "netlink_resources",
            "netlink_owners",
            "rdma_cgroup",
            "netdev"
        ]
    );
    assert_eq!(s.procfs, PathBuf::from("/proc"));
    assert_eq!(
        s.scrape_timeout,
        Some(crate::collector::DEFAULT_SCRAPE_TIMEOUT)
    );
    assert_eq!(s.owners, Default::default());
    let s = settings(&[
        "--scrape.timeout=0",
        "--collector.netlink_owners.pid",
        "--collector.netlink_owners.max-owners=3",
    ]);
    assert_eq!(s.scrape_timeout, None);
    assert!(s.owners.pid);
    assert_eq!(s.owners.max_owners, 3);
    assert_eq!(
        settings(&["--scrape.timeout=750ms"]).scrape_timeout,
        Some(std::time::Duration::from_millis(750))
    );
    assert_eq!(s.ethtool_capture, None);
    assert_eq!(s.max_requests, 40);
    assert!(!s.disable_compression, "compression is on by default");
    assert!(!s.once);
}

/// How many collectors run when no flag names any (some are off by default).
fn default_count() -> usize {
    TABLE.iter().filter(|s| s.default_enabled).count()
}

#[test]
fn some_collectors_are_off_by_default() {
    let s = settings(&[]);
    assert!(!s.collectors.contains(&"trace"), "{:?}", s.collectors);
    assert!(settings(&["--collector.trace"])
        .collectors
        .contains(&"trace"));
}

#[test]
fn collector_flags_from_the_table() {
    let s = settings(&["--no-collector.sysfs_counters"]);
    assert!(!s.collectors.contains(&"sysfs_counters"));
    assert_eq!(s.collectors.len(), default_count() - 1);
    let s = settings(&["--collector.disable-defaults", "--collector.sysfs_counters"]);
    assert_eq!(s.collectors, vec!["sysfs_counters"]);
    let only_info = |args: &[&str]| {
        let mut all = vec!["--collector.disable-defaults"];
        all.extend_from_slice(args);
        settings(&all).collectors
    };
    assert_eq!(
        only_info(&["--no-collector.sysfs_info", "--collector.sysfs_info"]),
        vec!["sysfs_info"],
        "later wins"
    );
    assert!(
        only_info(&["--collector.sysfs_info", "--no-collector.sysfs_info"]).is_empty(),
        "later wins"
    );
    let s = settings(&["--collector.sysfs_info=false"]);
    assert!(!s.collectors.contains(&"sysfs_info"));
    assert_eq!(s.collectors.len(), default_count() - 1);
}

#[test]
fn probe_discovery_flags() {
    let s = settings(&[]);
    assert_eq!(s.probe.mesh_max, 64);
    assert!(!s.probe.peer_histograms);
    let s = settings(&[
        "--probe.enable",
        "--probe.peers-dns",
        "rdmad.lab",
        "--probe.peers-file",
        "/etc/rdmad/peers.json",
        "--probe.mesh-max",
        "16",
        "--probe.rack",
        "r1",
        "--probe.peer-histograms",
        "--probe.secret-file",
        "/s",
    ]);
    assert_eq!(s.probe.peers_dns.as_deref(), Some("rdmad.lab"));
    assert_eq!(
        s.probe.peers_file.as_deref(),
        Some(std::path::Path::new("/etc/rdmad/peers.json"))
    );
    assert_eq!(s.probe.mesh_max, 16);
    assert_eq!(s.probe.rack.as_deref(), Some("r1"));
    assert!(s.probe.peer_histograms);
    match parse_from(["rdmad", "--probe.enable", "--probe.peers-dns", "rdmad.lab"]) {
        Err(ParseFailure::Invalid(e)) => {
            assert!(
                format!("{e:#}").contains("need --probe.secret-file"),
                "{e:#}"
            )
        }
        other => panic!("discovery without a secret: {other:?}"),
    }
    assert!(matches!(
        parse_from(["rdmad", "--probe.mesh-max", "0"]),
        Err(ParseFailure::Usage(_))
    ));
}

#[test]
fn probe_flags() {
    let s = settings(&[]);
    assert_eq!(s.probe, ProbeSettings::default());
    assert!(!s.probe.enable);
    assert!(!s.collectors.contains(&"probes"), "{:?}", s.collectors);
    let s = settings(&[
        "--probe.enable",
        "--probe.interval",
        "1",
        "--probe.size",
        "128",
        "--probe.iterations",
        "20",
        "--probe.devices",
        "rxe0,rxe_a",
        "--probe.mr-sizes",
        "4K,1M",
        "--probe.listen",
        ":9737",
        "--probe.peer",
        "10.0.0.2:9737",
        "--probe.peer=10.0.0.3:9737",
        "--probe.secret-file",
        "/etc/rdmad/probe.secret",
    ]);
    assert!(s.probe.enable);
    assert!(
        s.collectors.contains(&"probes"),
        "enable turns the collector on"
    );
    assert_eq!(s.probe.interval_ms, 1000);
    assert_eq!(s.probe.size, 128);
    assert_eq!(s.probe.iterations, 20);
    assert_eq!(s.probe.devices, vec!["rxe0", "rxe_a"]);
    assert_eq!(s.probe.mr_sizes, vec![4096, 1 << 20]);
    assert_eq!(s.probe.listen.map(|a| a.port()), Some(9737));
    assert_eq!(s.probe.peers, vec!["10.0.0.2:9737", "10.0.0.3:9737"]);
    assert_eq!(
        s.probe.secret_file,
        Some(PathBuf::from("/etc/rdmad/probe.secret"))
    );
    assert_eq!(s.probe.transport, probes::Transport::Ud, "UD by default");
    assert_eq!(
        settings(&["--probe.transport", "rc"]).probe.transport,
        probes::Transport::Rc
    );
    assert!(matches!(
        parse_from(["rdmad", "--probe.transport", "tcp"]),
        Err(ParseFailure::Usage(_))
    ));
    let s = settings(&["--probe.enable", "--no-collector.probes"]);
    assert!(s.probe.enable);
    assert!(!s.collectors.contains(&"probes"));
    assert!(settings(&["--probe.mr-sizes="]).probe.mr_sizes.is_empty());
    let Err(ParseFailure::Invalid(e)) =
        parse_from(["rdmad", "--probe.enable", "--probe.peer", "h:1"])
    else {
        panic!("a peer without a secret must be refused");
    };
    assert!(e.to_string().contains("--probe.secret-file"), "{e}");
    assert!(matches!(
        parse_from(["rdmad", "--probe.interval", "soon"]),
        Err(ParseFailure::Usage(_))
    ));
}

#[test]
fn probe_file_and_flag_precedence() {
    let dir = std::env::temp_dir().join(format!("rdmad-cli-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rdmad.toml");
    std::fs::write(
        &file,
        "[probe]\nenable = true\ninterval = 3\nsize = 256\ndevices = [\"rxe_b\"]\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let s = settings(&["--config", f]);
    assert!(s.probe.enable);
    assert!(s.collectors.contains(&"probes"));
    assert_eq!(s.probe.interval_ms, 3000);
    assert_eq!(s.probe.size, 256);
    assert_eq!(s.probe.devices, vec!["rxe_b"]);
    let s = settings(&["--config", f, "--probe.size", "64", "--probe.enable=false"]);
    assert_eq!(s.probe.size, 64, "the flag wins");
    assert_eq!(s.probe.interval_ms, 3000, "the file still applies");
    assert!(!s.probe.enable);
    assert!(!s.collectors.contains(&"probes"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unknown_collector_flag_is_a_usage_error() {
    let err = parse_from(["rdmad", "--collector.nope"]).unwrap_err();
    match err {
        ParseFailure::Usage(e) => assert_eq!(e.exit_code(), 2),
        ParseFailure::Invalid(e) => panic!("wanted a usage error, got {e}"),
    }
}

#[test]
fn flags_override_the_file_and_the_file_overrides_defaults() {
    let dir = std::env::temp_dir().join(format!("rdmad-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rdmad.toml");
    std::fs::write(
        &file,
        "[web]\nlisten-address = \"127.0.0.1:1\"\n[path]\nsysfs = \"/from/file\"\n\
         [collector]\nsysfs_counters = false\ndevice-exclude = \"mlx5_1\"\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let s = settings(&["--config", f]);
    assert_eq!(s.listen_address, "127.0.0.1:1");
    assert_eq!(s.sysfs, PathBuf::from("/from/file"));
    assert!(!s.collectors.contains(&"sysfs_counters"));
    assert_eq!(s.device_exclude.as_deref(), Some("mlx5_1"));
    let s = settings(&[
        "--config",
        f,
        "--path.sysfs",
        "/from/flag",
        "--collector.sysfs_counters",
        "--collector.device-exclude=",
    ]);
    assert_eq!(s.sysfs, PathBuf::from("/from/flag"));
    assert_eq!(s.listen_address, "127.0.0.1:1");
    assert_eq!(s.collectors.len(), default_count());
    assert_eq!(
        s.device_exclude, None,
        "an empty flag clears the file's pattern"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn web_config_file_from_flag_or_config_file() {
    assert_eq!(settings(&[]).web_config_file, None, "none by default");
    let dir = std::env::temp_dir().join(format!("rdmad-cli-web-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rdmad.toml");
    std::fs::write(&file, "[web]\nconfig.file = \"/etc/rdmad/web.yml\"\n").unwrap();
    let f = file.to_str().unwrap();
    assert_eq!(
        settings(&["--config", f]).web_config_file,
        Some(PathBuf::from("/etc/rdmad/web.yml"))
    );
    assert_eq!(
        settings(&["--config", f, "--web.config.file", "/flag.yml"]).web_config_file,
        Some(PathBuf::from("/flag.yml")),
        "the flag wins"
    );
    assert_eq!(
        settings(&["--config", f, "--web.config.file="]).web_config_file,
        None,
        "an empty flag turns the file's setting off"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn disable_compression_from_flag_env_or_config_file() {
    assert!(settings(&["--web.disable-compression"]).disable_compression);
    assert!(!settings(&["--web.disable-compression=false"]).disable_compression);
    let dir = std::env::temp_dir().join(format!("rdmad-cli-gzip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rdmad.toml");
    std::fs::write(&file, "[web]\ndisable-compression = true\n").unwrap();
    let f = file.to_str().unwrap();
    assert!(settings(&["--config", f]).disable_compression);
    assert!(
        !settings(&["--config", f, "--web.disable-compression=false"]).disable_compression,
        "the flag wins"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn gzip_level_from_flag_or_config_file() {
    assert_eq!(
        settings(&[]).gzip_level,
        crate::encoding::DEFAULT_GZIP_LEVEL
    );
    assert_eq!(settings(&["--web.gzip-level", "11"]).gzip_level, 11);
    for bad in ["0", "13", "fast"] {
        assert!(
            parse_from(["rdmad", "--web.gzip-level", bad]).is_err(),
            "--web.gzip-level {bad}"
        );
    }
    let dir = std::env::temp_dir().join(format!("rdmad-cli-level-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rdmad.toml");
    std::fs::write(&file, "[web]\ngzip-level = 2\n").unwrap();
    let f = file.to_str().unwrap();
    assert_eq!(settings(&["--config", f]).gzip_level, 2);
    assert_eq!(
        settings(&["--config", f, "--web.gzip-level=9"]).gzip_level,
        9,
        "the flag wins"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_config_is_invalid_not_usage() {
    let err = parse_from(["rdmad", "--config", "/nonexistent/rdmad.toml"]).unwrap_err();
    match err {
        ParseFailure::Invalid(e) => {
            assert!(format!("{e:#}").contains("/nonexistent/rdmad.toml"))
        }
        ParseFailure::Usage(e) => panic!("wanted invalid, got usage {e}"),
    }
}
