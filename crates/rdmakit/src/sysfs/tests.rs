use super::*;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/sysfs")
}

fn temp_tree(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rdmakit-sysfs-{tag}-{}-{:?}",
        std::process::id(),
        std::time::Instant::now()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn parallel_reads_equal_the_serial_read_devices_and_errors_in_order() {
    // The fixture trees, plus one with many devices of uneven size and broken files.
    let root = temp_tree("parallel");
    for d in 0..13 {
        let port = root.join(format!("class/infiniband/dev{d:02}/ports/1"));
        for c in 0..(d * 7) {
            write(
                &port.join(format!("counters/c{c}")),
                &format!("{}\n", c * d),
            );
        }
        if d % 3 == 0 {
            write(&port.join("hw_counters/bad"), "N/A\n");
            std::fs::create_dir_all(port.join("hw_counters/dir")).unwrap();
        }
        write(&port.join("state"), "4: ACTIVE\n");
    }
    let mut trees: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("class").is_dir())
        .collect();
    trees.push(root.clone());
    for tree in &trees {
        let serial = SysfsReader::new(tree).with_threads(1).snapshot().unwrap();
        for threads in [2, 3, 8] {
            let parallel = SysfsReader::new(tree)
                .with_threads(threads)
                .snapshot()
                .unwrap();
            assert_eq!(
                serde_json::to_value(&parallel).unwrap(),
                serde_json::to_value(&serial).unwrap(),
                "{} with {threads} threads",
                tree.display()
            );
        }
    }
    let snap = SysfsReader::new(&root).with_threads(3).snapshot().unwrap();
    assert_eq!(snap.devices.len(), 13);
    assert_eq!(snap.devices[12].ports[0].counters.len(), 12 * 7);
    // dev00, 03, 06, 09, 12: one N/A and one directory each, in device order.
    assert_eq!(snap.errors.len(), 10, "{:?}", snap.errors);
    let order: Vec<_> = snap.errors.iter().map(|e| e.device.clone()).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn kept_descriptors_give_the_same_snapshots_as_fresh_opens() {
    let open_files = Arc::new(OpenFiles::new(100_000));
    let mut compared = 0;
    let mut kept_total = 0;
    for entry in std::fs::read_dir(fixtures()).unwrap().flatten() {
        if !entry.path().join("class").is_dir() {
            continue;
        }
        let fresh = SysfsReader::new(entry.path()).snapshot().unwrap();
        let kept = SysfsReader::new(entry.path()).with_open_files(Arc::clone(&open_files));
        for round in 0..3 {
            assert_eq!(
                serde_json::to_value(kept.snapshot().unwrap()).unwrap(),
                serde_json::to_value(&fresh).unwrap(),
                "{:?}, snapshot {round}",
                entry.path()
            );
        }
        compared += 1;
        kept_total += open_files.len();
    }
    assert!(compared >= 3);
    // Descriptors were kept (and used by rounds 1 and 2); trees read before the last one
    // were dropped two snapshots after their last visit.
    assert!(kept_total > 100, "{kept_total} kept");
}

#[test]
fn kept_descriptors_see_new_values_replaced_files_and_removed_devices() {
    let root = temp_tree("kept");
    let counters = |dev: &str| root.join(format!("class/infiniband/{dev}/ports/1/counters"));
    write(&counters("rxe0").join("port_xmit_packets"), "1\n");
    write(&counters("rxe0").join("port_rcv_packets"), "2\n");
    write(&counters("rxe1").join("port_xmit_packets"), "3\n");
    let open_files = Arc::new(OpenFiles::new(100));
    let reader = SysfsReader::new(&root)
        .with_threads(1)
        .with_open_files(Arc::clone(&open_files));
    let value = |snap: &Snapshot, dev: usize, name: &str| {
        snap.devices[dev].ports[0]
            .counters
            .iter()
            .find(|c| *c.name == *name)
            .map(|c| c.value)
    };
    let snap = reader.snapshot().unwrap();
    assert_eq!(value(&snap, 0, "port_xmit_packets"), Some(1));
    assert_eq!(open_files.len(), 3);

    // Written in place (same inode): the kept descriptor reads the new value.
    std::fs::write(counters("rxe0").join("port_xmit_packets"), "10\n").unwrap();
    // Replaced by rename: a new inode, found through the directory's times.
    write(&counters("rxe0").join(".tmp"), "20\n");
    std::fs::rename(
        counters("rxe0").join(".tmp"),
        counters("rxe0").join("port_rcv_packets"),
    )
    .unwrap();
    let snap = reader.snapshot().unwrap();
    assert_eq!(value(&snap, 0, "port_xmit_packets"), Some(10));
    assert_eq!(value(&snap, 0, "port_rcv_packets"), Some(20));

    // A device deleted and created again under the same name.
    std::fs::remove_dir_all(root.join("class/infiniband/rxe1")).unwrap();
    let snap = reader.snapshot().unwrap();
    assert_eq!(snap.devices.len(), 1);
    write(&counters("rxe1").join("port_xmit_packets"), "30\n");
    let snap = reader.snapshot().unwrap();
    assert_eq!(value(&snap, 1, "port_xmit_packets"), Some(30));

    // A file that turns into garbage is reported like a fresh read reports it.
    std::fs::write(counters("rxe1").join("port_xmit_packets"), "garbage\n").unwrap();
    let snap = reader.snapshot().unwrap();
    assert_eq!(value(&snap, 1, "port_xmit_packets"), None);
    assert_eq!(snap.errors.len(), 1, "{:?}", snap.errors);

    // Devices gone for two snapshots leave no descriptor behind.
    std::fs::remove_dir_all(root.join("class/infiniband")).unwrap();
    std::fs::create_dir_all(root.join("class/infiniband")).unwrap();
    reader.snapshot().unwrap();
    reader.snapshot().unwrap();
    assert_eq!(open_files.len(), 0);
    std::fs::remove_dir_all(&root).unwrap();
}

/// A device as real sysfs lays it out: the directory under `devices/`, a symlink to it
/// in the class directory; one port with a PMA counter of value `value`.
fn sysfs_device(root: &Path, name: &str, value: u64) {
    let dir = root.join(format!("devices/virtual/infiniband/{name}"));
    write(&dir.join("node_type"), "1: CA\n");
    write(&dir.join("ports/1/state"), "4: ACTIVE\n");
    write(
        &dir.join("ports/1/counters/port_xmit_packets"),
        &format!("{value}\n"),
    );
    write(&dir.join("ports/1/hw_counters/lifespan"), "10\n");
    std::fs::create_dir_all(root.join("class/infiniband")).unwrap();
    let link = root.join(format!("class/infiniband/{name}"));
    if link.symlink_metadata().is_err() {
        std::os::unix::fs::symlink(format!("../../devices/virtual/infiniband/{name}"), link)
            .unwrap();
    }
}

#[test]
fn kept_descriptors_follow_devices_ports_and_files_replaced_between_two_snapshots() {
    // Every change below is made between two snapshots of a reader that keeps
    // descriptors; the very next snapshot must equal a fresh read, values and errors.
    let root = temp_tree("replaced");
    sysfs_device(&root, "rxe0", 1);
    sysfs_device(&root, "rxe1", 2);
    let open_files = Arc::new(OpenFiles::new(1000));
    let kept = SysfsReader::new(&root)
        .with_threads(1)
        .with_open_files(Arc::clone(&open_files));
    let same = |step: &str| {
        let fresh = SysfsReader::new(&root).snapshot().unwrap();
        let snap = kept.snapshot().unwrap();
        assert_eq!(
            serde_json::to_value(&snap).unwrap(),
            serde_json::to_value(&fresh).unwrap(),
            "{step}"
        );
        snap
    };
    let xmit = |snap: &Snapshot, dev: usize| {
        snap.devices[dev].ports[0]
            .counter(crate::model::CounterSource::Pma, "port_xmit_packets")
            .map(|c| c.value)
    };
    same("first read");
    let devices = root.join("devices/virtual/infiniband");

    // Re-registered as the kernel does it: directory and class symlink made anew.
    std::fs::remove_dir_all(devices.join("rxe0")).unwrap();
    std::fs::remove_file(root.join("class/infiniband/rxe0")).unwrap();
    sysfs_device(&root, "rxe0", 10);
    assert_eq!(xmit(&same("rxe0 made again"), 0), Some(10));

    // Deleted and made again behind the same symlink (an inode number may come back).
    std::fs::remove_dir_all(devices.join("rxe1")).unwrap();
    sysfs_device(&root, "rxe1", 20);
    assert_eq!(xmit(&same("rxe1 made again"), 1), Some(20));

    // Moved away (still open, still linked) and replaced by another directory.
    std::fs::rename(devices.join("rxe1"), root.join("rxe1.old")).unwrap();
    sysfs_device(&root, "rxe1", 21);
    assert_eq!(xmit(&same("rxe1 moved away"), 1), Some(21));

    // A port directory moved away and replaced, under an unchanged device.
    let port = devices.join("rxe0/ports/1");
    std::fs::rename(&port, devices.join("rxe0/port1.old")).unwrap();
    write(&port.join("counters/port_xmit_packets"), "30\n");
    assert_eq!(xmit(&same("port replaced"), 0), Some(30));

    // Files and directories the listings did not show appear: an attribute, a device
    // counter directory, a counter file, the parent device link.
    write(&port.join("sm_lid"), "0x1\n");
    write(&devices.join("rxe0/hw_counters/rx_pkts"), "7\n");
    write(&port.join("counters/port_rcv_packets"), "8\n");
    let snap = same("files added");
    assert_eq!(snap.devices[0].ports[0].sm_lid, Some(1));
    assert_eq!(snap.devices[0].hw_counters.len(), 1);
    assert_eq!(snap.devices[0].ports[0].counters.len(), 2);
    let pci = root.join("devices/pci0000:00/0000:00:03.0");
    write(&pci.join("numa_node"), "1\n");
    std::fs::create_dir_all(root.join("bus/pci/drivers/mlx5_core")).unwrap();
    std::os::unix::fs::symlink("../../../bus/pci/drivers/mlx5_core", pci.join("driver")).unwrap();
    std::os::unix::fs::symlink(
        "../../../pci0000:00/0000:00:03.0",
        devices.join("rxe0/device"),
    )
    .unwrap();
    let snap = same("parent device linked");
    assert_eq!(snap.devices[0].driver.as_deref(), Some("mlx5_core"));
    assert_eq!(snap.devices[0].numa_node, Some(1));

    // And disappear again; a file turns into a directory (an error, as in a fresh read).
    std::fs::remove_file(port.join("sm_lid")).unwrap();
    std::fs::remove_dir_all(devices.join("rxe0/hw_counters")).unwrap();
    std::fs::remove_file(port.join("counters/port_rcv_packets")).unwrap();
    std::fs::create_dir(port.join("counters/port_rcv_packets")).unwrap();
    std::fs::remove_file(devices.join("rxe0/device")).unwrap();
    let snap = same("files removed");
    assert_eq!(snap.devices[0].ports[0].sm_lid, None);
    assert_eq!(snap.devices[0].driver, None);
    assert_eq!(snap.errors.len(), 1, "{:?}", snap.errors);

    // Values written in place are fresh on every snapshot.
    for round in 0..3 {
        std::fs::write(
            port.join("counters/port_xmit_packets"),
            format!("{round}\n"),
        )
        .unwrap();
        assert_eq!(xmit(&same("written in place"), 0), Some(round));
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn kept_descriptors_follow_their_names_through_relisting() {
    let root = temp_tree("relist");
    let counters = root.join("class/infiniband/rxe0/ports/1/counters");
    for i in 0..3 {
        write(&counters.join(format!("c{i}")), &format!("{i}\n"));
    }
    let open_files = Arc::new(OpenFiles::new(100));
    let reader = SysfsReader::new(&root)
        .with_threads(1)
        .with_open_files(Arc::clone(&open_files));
    // Past two relistings of the unchanged directory: every value fresh, each file kept
    // once (no descriptor lost or counted twice).
    for round in 0..(2 * handles::RELIST + 2) {
        std::fs::write(counters.join("c1"), format!("{}\n", 100 + round)).unwrap();
        let snap = reader.snapshot().unwrap();
        let values: Vec<(String, u64)> = snap.devices[0].ports[0]
            .counters
            .iter()
            .map(|c| (c.name.to_string(), c.value))
            .collect();
        assert_eq!(
            values,
            [("c0", 0), ("c1", 100 + round), ("c2", 2)]
                .map(|(n, v)| (n.to_string(), v))
                .to_vec(),
            "round {round}"
        );
        assert_eq!(open_files.len(), 3, "round {round}");
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn no_more_descriptors_than_the_budget() {
    let root = temp_tree("budget");
    for i in 0..10 {
        write(
            &root.join(format!("class/infiniband/d{i}/ports/1/counters/c")),
            &format!("{i}\n"),
        );
    }
    let open_files = Arc::new(OpenFiles::new(4));
    let reader = SysfsReader::new(&root).with_open_files(Arc::clone(&open_files));
    for _ in 0..3 {
        let snap = reader.snapshot().unwrap();
        let values: Vec<u64> = snap
            .devices
            .iter()
            .map(|d| d.ports[0].counters[0].value)
            .collect();
        assert_eq!(values, (0..10).collect::<Vec<u64>>());
        assert!(open_files.len() <= 4, "{}", open_files.len());
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn netdev_only_finds_the_same_netdevs_as_the_full_gid_read() {
    let mut ethernet_ports = 0;
    for entry in std::fs::read_dir(fixtures()).unwrap().flatten() {
        if !entry.path().join("class").is_dir() {
            continue;
        }
        let full = SysfsReader::new(entry.path()).snapshot().unwrap();
        let fast = SysfsReader::new(entry.path())
            .with_netdev_only_gids()
            .snapshot()
            .unwrap();
        assert_eq!(full.devices.len(), fast.devices.len());
        for (a, b) in full.devices.iter().zip(&fast.devices) {
            for (pa, pb) in a.ports.iter().zip(&b.ports) {
                assert_eq!(pa.netdev, pb.netdev, "{:?} {}", entry.path(), a.name);
                assert!(pb.gids.is_empty(), "no GID is read");
                ethernet_ports += usize::from(pa.netdev.is_some());
            }
        }
        // Netdev-only reads can only remove errors (GID files), never add any.
        assert!(fast.errors.len() <= full.errors.len(), "{:?}", fast.errors);
    }
    assert!(ethernet_ports >= 3, "fixtures with netdevs were compared");
}

#[test]
fn netdev_only_stops_at_the_first_netdev_and_skips_unpopulated_entries() {
    let root = temp_tree("ndevs");
    let port = root.join("class/infiniband/rxe9/ports/1");
    write(&port.join("link_layer"), "Ethernet\n");
    // Entry 0 unpopulated (absent), entry 1 names the netdev, entry 2 is a directory:
    // reading it would be an error, so an error-free snapshot shows the walk stopped.
    write(&port.join("gid_attrs/ndevs/1"), "veth9\n");
    std::fs::create_dir_all(port.join("gid_attrs/ndevs/2")).unwrap();
    // A GID that is a directory: reading the GID table would record an error.
    std::fs::create_dir_all(port.join("gids/0")).unwrap();
    let snap = SysfsReader::new(&root)
        .with_netdev_only_gids()
        .snapshot()
        .unwrap();
    assert_eq!(snap.devices[0].ports[0].netdev.as_deref(), Some("veth9"));
    assert!(snap.errors.is_empty(), "{:?}", snap.errors);
    let full = SysfsReader::new(&root).snapshot().unwrap();
    assert!(!full.errors.is_empty(), "the full read does open gids/0");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn infiniband_ports_read_no_gid_attribute_in_netdev_only_mode() {
    let root = temp_tree("ib");
    let port = root.join("class/infiniband/mlx5_9/ports/1");
    write(&port.join("link_layer"), "InfiniBand\n");
    std::fs::create_dir_all(port.join("gid_attrs/ndevs/0")).unwrap();
    let snap = SysfsReader::new(&root)
        .with_netdev_only_gids()
        .snapshot()
        .unwrap();
    assert_eq!(snap.devices[0].ports[0].netdev, None);
    assert!(snap.errors.is_empty(), "{:?}", snap.errors);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn port_hw_counters_from_elsewhere_are_not_read_but_lifespan_is() {
    let root = temp_tree("elsewhere");
    for dev in ["rxe8", "rxe9"] {
        let port = root.join(format!("class/infiniband/{dev}/ports/1"));
        write(&port.join("hw_counters/lifespan"), "12\n");
        write(&port.join("hw_counters/sent_pkts"), "5\n");
        write(&port.join("counters/symbol_error"), "3\n");
        // A directory in hw_counters/: reading it would record an error.
        std::fs::create_dir_all(port.join("hw_counters/broken")).unwrap();
    }
    let snap = SysfsReader::new(&root)
        .snapshot_without_port_hw_counters(|d| d == "rxe9")
        .unwrap();
    let names = |d: usize| -> Vec<(CounterSourceName, String)> {
        snap.devices[d].ports[0]
            .counters
            .iter()
            .map(|c| (c.source.as_str(), c.name.to_string()))
            .collect()
    };
    assert_eq!(
        names(1),
        [("pma", "symbol_error".into()), ("hw", "lifespan".into())]
    );
    assert_eq!(
        names(0).len(),
        4 - 1,
        "rxe8 is read whole (broken is an error)"
    );
    assert_eq!(snap.errors.len(), 1, "{:?}", snap.errors);
    assert_eq!(snap.errors[0].device.as_deref(), Some("rxe8"));
    std::fs::remove_dir_all(&root).unwrap();
}

type CounterSourceName = &'static str;
