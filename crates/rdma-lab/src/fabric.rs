//! The multi-host lab's fabric: a learning Ethernet switch in a thread of the lab process,
//! one unix datagram socket per port.
//!
//! Each host's second NIC is a qemu `dgram` netdev whose local and remote ends are unix
//! socket paths (`-netdev dgram,local.type=unix,local.path=hK.fab,remote.type=unix,
//! remote.path=swK.fab`): one datagram is one Ethernet frame. The switch binds `swK.fab`,
//! learns source MACs per port, forwards known unicast to its port and floods the rest
//! (broadcast, multicast, unknown). Nothing on this machine gets an IP address or a
//! multicast group, and no privilege is needed (a bridge would need one, or a switch VM).
//!
//! A partition between two hosts is a pair of ports the switch drops frames between.

use std::collections::{HashMap, HashSet};
use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::LabError;

/// Largest frame a port accepts (jumbo-safe; rxe's MTU is at most 4096 + headers).
const MAX_FRAME: usize = 65536;

/// Per-port frame counts.
#[derive(Debug, Default)]
pub struct PortStats {
    /// Frames received from the host.
    pub rx: AtomicU64,
    /// Frames sent to the host.
    pub tx: AtomicU64,
    /// Frames from this port not delivered because of a partition (a flooded frame counts
    /// once per port it did not reach).
    pub dropped: AtomicU64,
}

struct Port {
    socket: UnixDatagram,
    /// Where the host's qemu listens (`hK.fab`).
    peer: PathBuf,
    stats: PortStats,
}

struct Shared {
    ports: Vec<Port>,
    macs: Mutex<HashMap<[u8; 6], usize>>,
    /// Unordered pairs of port indexes (low, high) that must not reach each other.
    partitions: Mutex<HashSet<(usize, usize)>>,
    stop: AtomicBool,
}

/// A running switch; stopped (threads joined, sockets removed) on drop.
pub struct Switch {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    paths: Vec<PathBuf>,
}

impl std::fmt::Debug for Switch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switch")
            .field("ports", &self.shared.ports.len())
            .finish()
    }
}

/// The switch-side socket path of host `k` (1-based) under `dir`.
pub fn switch_path(dir: &Path, k: usize) -> PathBuf {
    dir.join(format!("sw{k}.fab"))
}

/// The qemu-side socket path of host `k` (1-based) under `dir`.
pub fn host_path(dir: &Path, k: usize) -> PathBuf {
    dir.join(format!("h{k}.fab"))
}

impl Switch {
    /// Start a switch with `ports` ports whose sockets live in `dir`.
    pub fn start(dir: &Path, ports: usize) -> Result<Switch, LabError> {
        let mut list = Vec::new();
        let mut paths = Vec::new();
        for k in 1..=ports {
            let path = switch_path(dir, k);
            let _ = std::fs::remove_file(&path);
            let socket = UnixDatagram::bind(&path).map_err(|e| LabError::io(&path, e))?;
            socket
                .set_read_timeout(Some(Duration::from_millis(200)))
                .map_err(|e| LabError::io(&path, e))?;
            paths.push(path);
            list.push(Port {
                socket,
                peer: host_path(dir, k),
                stats: PortStats::default(),
            });
        }
        let shared = Arc::new(Shared {
            ports: list,
            macs: Mutex::new(HashMap::new()),
            partitions: Mutex::new(HashSet::new()),
            stop: AtomicBool::new(false),
        });
        let threads = (0..ports)
            .map(|i| {
                let s = Arc::clone(&shared);
                std::thread::spawn(move || port_loop(&s, i))
            })
            .collect();
        Ok(Switch {
            shared,
            threads,
            paths,
        })
    }

    /// Drop every frame between hosts `a` and `b` (0-based port indexes).
    pub fn partition(&self, a: usize, b: usize) {
        lock(&self.shared.partitions).insert(pair(a, b));
    }

    /// Undo [`Switch::partition`] of `a` and `b`; returns whether they were partitioned.
    pub fn heal(&self, a: usize, b: usize) -> bool {
        lock(&self.shared.partitions).remove(&pair(a, b))
    }

    /// Undo every partition; returns how many there were.
    pub fn heal_all(&self) -> usize {
        let mut p = lock(&self.shared.partitions);
        let n = p.len();
        p.clear();
        n
    }

    /// The partitioned pairs (0-based), sorted.
    pub fn partitions(&self) -> Vec<(usize, usize)> {
        let mut v: Vec<_> = lock(&self.shared.partitions).iter().copied().collect();
        v.sort();
        v
    }

    /// Frame counts of port `i` (0-based): (rx, tx, dropped).
    pub fn stats(&self, i: usize) -> (u64, u64, u64) {
        let s = &self.shared.ports[i].stats;
        (
            s.rx.load(Ordering::Relaxed),
            s.tx.load(Ordering::Relaxed),
            s.dropped.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn pair(a: usize, b: usize) -> (usize, usize) {
    (a.min(b), a.max(b))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What to do with a frame that came in on port `from`: the ports to send it to.
fn destinations(shared: &Shared, from: usize, frame: &[u8]) -> Vec<usize> {
    if frame.len() < 14 {
        return Vec::new();
    }
    let mut dst = [0u8; 6];
    dst.copy_from_slice(&frame[0..6]);
    let mut src = [0u8; 6];
    src.copy_from_slice(&frame[6..12]);
    let known = {
        let mut macs = lock(&shared.macs);
        if src[0] & 1 == 0 {
            macs.insert(src, from);
        }
        if dst[0] & 1 == 0 {
            macs.get(&dst).copied()
        } else {
            None
        }
    };
    let parts = lock(&shared.partitions);
    let allowed = |to: usize| to != from && !parts.contains(&pair(from, to));
    match known {
        Some(to) if allowed(to) => vec![to],
        Some(to) if to == from => Vec::new(),
        Some(_) => {
            shared.ports[from]
                .stats
                .dropped
                .fetch_add(1, Ordering::Relaxed);
            Vec::new()
        }
        None => {
            let to: Vec<usize> = (0..shared.ports.len()).filter(|&to| allowed(to)).collect();
            let cut = (0..shared.ports.len())
                .filter(|&to| to != from && parts.contains(&pair(from, to)))
                .count();
            shared.ports[from]
                .stats
                .dropped
                .fetch_add(cut as u64, Ordering::Relaxed);
            to
        }
    }
}

fn port_loop(shared: &Shared, i: usize) {
    let mut buf = vec![0u8; MAX_FRAME];
    let port = &shared.ports[i];
    while !shared.stop.load(Ordering::Relaxed) {
        let n = match port.socket.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        port.stats.rx.fetch_add(1, Ordering::Relaxed);
        for to in destinations(shared, i, &buf[..n]) {
            let out = &shared.ports[to];
            // A host that is down (killed, rebooting) has no socket: the frame is lost,
            // as on a cable to a dead machine.
            if out.socket.send_to(&buf[..n], &out.peer).is_ok() {
                out.stats.tx.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst: [u8; 6], src: [u8; 6], body: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&dst);
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(body);
        f
    }

    fn recv(s: &UnixDatagram) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 2048];
        s.recv(&mut buf).ok().map(|n| buf[..n].to_vec())
    }

    /// Three "hosts" are plain datagram sockets at hK.fab: flooding, learning, partitions.
    #[test]
    fn floods_learns_and_partitions() {
        let dir = std::env::temp_dir().join(format!("rdma-lab-sw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sw = Switch::start(&dir, 3).unwrap();
        let hosts: Vec<UnixDatagram> = (1..=3)
            .map(|k| {
                let p = host_path(&dir, k);
                let _ = std::fs::remove_file(&p);
                let s = UnixDatagram::bind(&p).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                s
            })
            .collect();
        let mac = |k: u8| [0x52, 0x54, 0, 2, 0, k];
        let send = |k: usize, f: &[u8]| hosts[k].send_to(f, switch_path(&dir, k + 1)).unwrap();

        // A broadcast from h1 reaches h2 and h3, not h1.
        let bcast = frame([0xff; 6], mac(1), b"who has");
        send(0, &bcast);
        assert_eq!(recv(&hosts[1]).as_deref(), Some(&bcast[..]));
        assert_eq!(recv(&hosts[2]).as_deref(), Some(&bcast[..]));
        // h2 answers h1 (learned): only h1 gets it.
        let reply = frame(mac(1), mac(2), b"is at");
        send(1, &reply);
        assert_eq!(recv(&hosts[0]).as_deref(), Some(&reply[..]));
        let uni = frame(mac(2), mac(1), b"data");
        send(0, &uni);
        assert_eq!(recv(&hosts[1]).as_deref(), Some(&uni[..]));
        assert_eq!(recv(&hosts[2]), None, "known unicast is not flooded");

        // Partition h1 | h2: nothing passes either way, h3 still hears broadcasts.
        sw.partition(0, 1);
        assert_eq!(sw.partitions(), vec![(0, 1)]);
        send(0, &uni);
        send(1, &reply);
        assert_eq!(recv(&hosts[1]), None);
        assert_eq!(recv(&hosts[0]), None);
        send(0, &bcast);
        assert_eq!(recv(&hosts[2]).as_deref(), Some(&bcast[..]));
        assert_eq!(recv(&hosts[1]), None);
        assert!(
            sw.stats(0).2 >= 1 && sw.stats(1).2 >= 1,
            "drops are counted"
        );
        assert!(sw.heal(1, 0));
        send(0, &uni);
        assert_eq!(recv(&hosts[1]).as_deref(), Some(&uni[..]));
        // Runt frames are ignored.
        send(0, b"short");
        assert_eq!(recv(&hosts[1]), None);
        drop(sw);
        assert!(!switch_path(&dir, 1).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
