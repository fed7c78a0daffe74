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
//! Faults the switch makes: a partition between two hosts (frames dropped both ways, or one
//! way only: A -> B dropped while B -> A passes), and ingress loss on one host (a fraction
//! of the frames the switch would deliver to its port are dropped, like a lossy cable into
//! the host: ARP, IP and RoCE alike).
//!
//! A send to a host whose socket is full waits for room (backpressure, no loss: a busy guest
//! reads on), but a host that takes nothing and has sent nothing for [`QUIET`] (a qemu that
//! is booting: its socket exists, but it reads nothing until the guest's NIC is up) must not
//! hold the others up. Such a send gives up after [`SEND_WAIT`], and the port is "not
//! ready" for [`NOT_READY_HOLD`]: frames towards it are dropped without waiting, as a switch
//! drops frames towards a link that is not up. Without this, one restarting host stalled
//! every port thread that flooded it a frame, and so the whole fabric, until its guest came
//! up (10-25 s under TCG).

use std::collections::{HashMap, HashSet};
use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::LabError;

/// Largest frame a port accepts (jumbo-safe; rxe's MTU is at most 4096 + headers).
const MAX_FRAME: usize = 65536;
/// One wait of a send for room in a host's socket; a host that is not [`QUIET`] gets another.
pub const SEND_WAIT: Duration = Duration::from_millis(100);
/// A host that has sent no frame for this long, and whose socket stays full for a
/// [`SEND_WAIT`], is not ready.
pub const QUIET: Duration = Duration::from_secs(2);
/// How long a port that is not ready gets no frames, before the switch tries it again.
pub const NOT_READY_HOLD: Duration = Duration::from_secs(1);

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
    /// Frames towards this port dropped by its ingress loss.
    pub lost: AtomicU64,
    /// Frames towards this port dropped because its host did not take them (not ready).
    pub not_ready: AtomicU64,
}

struct Port {
    socket: UnixDatagram,
    /// Where the host's qemu listens (`hK.fab`).
    peer: PathBuf,
    stats: PortStats,
    /// Ingress loss of this port, in parts per million of the frames towards it.
    loss_ppm: AtomicU32,
    /// Until when (milliseconds since [`Shared::epoch`]) frames towards this port are
    /// dropped without a send: its host did not take the last one.
    not_ready_until_ms: AtomicU64,
    /// When (milliseconds since [`Shared::epoch`]) the host last sent a frame (0: never).
    last_rx_ms: AtomicU64,
}

struct Shared {
    ports: Vec<Port>,
    macs: Mutex<HashMap<[u8; 6], usize>>,
    /// Directed pairs of port indexes (from, to): frames from `from` never reach `to`.
    partitions: Mutex<HashSet<(usize, usize)>>,
    stop: AtomicBool,
    /// The switch's start: the clock of [`Port::not_ready_until_ms`].
    epoch: Instant,
}

/// One in a million: the unit of [`Switch::set_ingress_loss`].
pub const PPM: u32 = 1_000_000;

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
            socket
                .set_write_timeout(Some(SEND_WAIT))
                .map_err(|e| LabError::io(&path, e))?;
            paths.push(path);
            list.push(Port {
                socket,
                peer: host_path(dir, k),
                stats: PortStats::default(),
                loss_ppm: AtomicU32::new(0),
                not_ready_until_ms: AtomicU64::new(0),
                last_rx_ms: AtomicU64::new(0),
            });
        }
        let shared = Arc::new(Shared {
            ports: list,
            macs: Mutex::new(HashMap::new()),
            partitions: Mutex::new(HashSet::new()),
            stop: AtomicBool::new(false),
            epoch: Instant::now(),
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

    /// Drop every frame between hosts `a` and `b` (0-based port indexes), both ways.
    pub fn partition(&self, a: usize, b: usize) {
        let mut p = lock(&self.shared.partitions);
        p.insert((a, b));
        p.insert((b, a));
    }

    /// Drop every frame from `from` to `to`; frames from `to` to `from` still pass.
    pub fn partition_oneway(&self, from: usize, to: usize) {
        lock(&self.shared.partitions).insert((from, to));
    }

    /// Undo every partition between `a` and `b`, either way; returns whether there was one.
    pub fn heal(&self, a: usize, b: usize) -> bool {
        let mut p = lock(&self.shared.partitions);
        let ab = p.remove(&(a, b));
        let ba = p.remove(&(b, a));
        ab || ba
    }

    /// Undo every partition; returns how many host pairs had one.
    pub fn heal_all(&self) -> usize {
        let n = self.partitions().len();
        lock(&self.shared.partitions).clear();
        n
    }

    /// The partitions, sorted: `(a, b, both_ways)`; a one-way one drops `a -> b` only.
    pub fn partitions(&self) -> Vec<(usize, usize, bool)> {
        let p = lock(&self.shared.partitions);
        let mut v: Vec<_> = p
            .iter()
            .filter_map(|&(a, b)| {
                let both = p.contains(&(b, a));
                // A two-way partition once, as (low, high).
                (!both || a < b).then_some((a, b, both))
            })
            .collect();
        v.sort();
        v
    }

    /// Drop `ppm` parts per million of the frames towards port `i` (0 stops it).
    pub fn set_ingress_loss(&self, i: usize, ppm: u32) {
        self.shared.ports[i]
            .loss_ppm
            .store(ppm.min(PPM), Ordering::Relaxed);
    }

    /// The ingress loss of port `i`, parts per million.
    pub fn ingress_loss(&self, i: usize) -> u32 {
        self.shared.ports[i].loss_ppm.load(Ordering::Relaxed)
    }

    /// Frame counts of port `i` (0-based): (rx, tx, dropped by partitions, lost to its
    /// ingress loss).
    pub fn stats(&self, i: usize) -> (u64, u64, u64, u64) {
        let s = &self.shared.ports[i].stats;
        (
            s.rx.load(Ordering::Relaxed),
            s.tx.load(Ordering::Relaxed),
            s.dropped.load(Ordering::Relaxed),
            s.lost.load(Ordering::Relaxed),
        )
    }

    /// Frames towards port `i` (0-based) dropped because its host did not take them.
    pub fn not_ready(&self, i: usize) -> u64 {
        self.shared.ports[i].stats.not_ready.load(Ordering::Relaxed)
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
    let allowed = |to: usize| to != from && !parts.contains(&(from, to));
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
                .filter(|&to| to != from && parts.contains(&(from, to)))
                .count();
            shared.ports[from]
                .stats
                .dropped
                .fetch_add(cut as u64, Ordering::Relaxed);
            to
        }
    }
}

/// xorshift64: a fast, good-enough uniform source for dropping frames (not cryptographic;
/// nothing depends on it being unpredictable).
fn next_random(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

/// Whether a frame towards a port with `ppm` ingress loss is dropped.
fn lose(ppm: u32, rng: &mut u64) -> bool {
    ppm > 0 && (ppm >= PPM || (next_random(rng) % u64::from(PPM)) < u64::from(ppm))
}

impl Shared {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Send one frame to `out`'s host. A host that is down (killed) has no socket: the frame is
/// lost, as on a cable to a dead machine. A full socket is waited on while its host sends
/// frames itself; one that stays full while its host is [`QUIET`] makes the port not ready.
fn deliver(shared: &Shared, out: &Port, frame: &[u8]) {
    loop {
        match out.socket.send_to(frame, &out.peer) {
            Ok(_) => {
                out.stats.tx.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                let now = shared.now_ms();
                let quiet = now.saturating_sub(out.last_rx_ms.load(Ordering::Relaxed))
                    >= QUIET.as_millis() as u64;
                if quiet || shared.stop.load(Ordering::Relaxed) {
                    out.stats.not_ready.fetch_add(1, Ordering::Relaxed);
                    out.not_ready_until_ms
                        .store(now + NOT_READY_HOLD.as_millis() as u64, Ordering::Relaxed);
                    return;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn port_loop(shared: &Shared, i: usize) {
    let mut buf = vec![0u8; MAX_FRAME];
    let port = &shared.ports[i];
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    // Never zero (xorshift's fixed point), different per port.
    let mut rng = (seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1))) | 1;
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
        port.last_rx_ms.store(shared.now_ms(), Ordering::Relaxed);
        for to in destinations(shared, i, &buf[..n]) {
            let out = &shared.ports[to];
            if lose(out.loss_ppm.load(Ordering::Relaxed), &mut rng) {
                out.stats.lost.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if shared.now_ms() < out.not_ready_until_ms.load(Ordering::Relaxed) {
                out.stats.not_ready.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            deliver(shared, out, &buf[..n]);
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

    /// The "hosts" h1..hN: plain datagram sockets at hK.fab, reads bounded to 500 ms.
    fn bind_hosts(dir: &Path, n: usize) -> Vec<UnixDatagram> {
        (1..=n)
            .map(|k| {
                let p = host_path(dir, k);
                let _ = std::fs::remove_file(&p);
                let s = UnixDatagram::bind(&p).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                s
            })
            .collect()
    }

    fn recv(s: &UnixDatagram) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 2048];
        s.recv(&mut buf).ok().map(|n| buf[..n].to_vec())
    }

    /// A switch of `n` ports in a directory of its own (`tag`), and its `n` "hosts".
    fn switch_with_hosts(tag: &str, n: usize) -> (PathBuf, Switch, Vec<UnixDatagram>) {
        let dir = std::env::temp_dir().join(format!("rdma-lab-sw{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sw = Switch::start(&dir, n).unwrap();
        let hosts = bind_hosts(&dir, n);
        (dir, sw, hosts)
    }

    /// Host `k`'s MAC (1-based), as the lab gives it.
    fn mac(k: u8) -> [u8; 6] {
        [0x52, 0x54, 0, 2, 0, k]
    }

    /// Three "hosts" are plain datagram sockets at hK.fab: flooding, learning, partitions.
    #[test]
    fn floods_learns_and_partitions() {
        let (dir, sw, hosts) = switch_with_hosts("", 3);
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
        assert_eq!(sw.partitions(), vec![(0, 1, true)]);
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
        assert!(!sw.heal(0, 1), "nothing left to heal");

        // One way: h1 -> h2 dropped, h2 -> h1 passes; a broadcast from h1 misses h2 only.
        sw.partition_oneway(0, 1);
        assert_eq!(sw.partitions(), vec![(0, 1, false)]);
        send(0, &uni);
        assert_eq!(recv(&hosts[1]), None);
        send(1, &reply);
        assert_eq!(recv(&hosts[0]).as_deref(), Some(&reply[..]));
        send(0, &bcast);
        assert_eq!(recv(&hosts[2]).as_deref(), Some(&bcast[..]));
        assert_eq!(recv(&hosts[1]), None);
        // Both ways on top of one way is one two-way partition; heal undoes it whole.
        sw.partition_oneway(1, 0);
        assert_eq!(sw.partitions(), vec![(0, 1, true)]);
        sw.partition_oneway(2, 0);
        assert_eq!(sw.partitions(), vec![(0, 1, true), (2, 0, false)]);
        assert_eq!(sw.heal_all(), 2);
        assert!(sw.partitions().is_empty());
        send(0, &uni);
        assert_eq!(recv(&hosts[1]).as_deref(), Some(&uni[..]));
        // Runt frames are ignored.
        send(0, b"short");
        assert_eq!(recv(&hosts[1]), None);
        drop(sw);
        assert!(!switch_path(&dir, 1).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Ingress loss on h2: about that fraction of h1's frames to h2 is dropped and counted
    /// at h2's port; h2's own frames to h1 are untouched; 0 stops it, 100% drops all.
    #[test]
    fn ingress_loss_drops_a_fraction_towards_one_port() {
        let (dir, sw, hosts) = switch_with_hosts("-loss", 2);
        let to_h2 = frame(mac(2), mac(1), b"data");
        let to_h1 = frame(mac(1), mac(2), b"back");
        // Learn both MACs first.
        hosts[1].send_to(&to_h1, switch_path(&dir, 2)).unwrap();
        assert!(recv(&hosts[0]).is_some());
        hosts[0].send_to(&to_h2, switch_path(&dir, 1)).unwrap();
        assert!(recv(&hosts[1]).is_some());

        sw.set_ingress_loss(1, 300_000);
        assert_eq!(sw.ingress_loss(1), 300_000);
        // h2's socket queue is short: a thread drains it while h1 sends.
        let h2 = hosts[1].try_clone().unwrap();
        let drain = std::thread::spawn(move || {
            let mut n = 0u64;
            while recv(&h2).is_some() {
                n += 1;
            }
            n
        });
        let sent = 2000u64;
        let before = sw.stats(1);
        for _ in 0..sent {
            hosts[0].send_to(&to_h2, switch_path(&dir, 1)).unwrap();
        }
        let got = drain.join().unwrap();
        let after = sw.stats(1);
        let lost = after.3 - before.3;
        // h2 never sends: a reader that fell behind for a SEND_WAIT made its port not ready.
        let not_ready = sw.not_ready(1);
        assert_eq!(
            got + lost + not_ready,
            sent,
            "every frame is delivered or counted lost or not ready"
        );
        // 30% of 2000: the binomial's standard deviation is ~20, so 450..750 is 7 of them.
        assert!((450..=750).contains(&lost), "lost {lost} of {sent} at 30%");
        // The other direction is untouched.
        for _ in 0..20 {
            hosts[1].send_to(&to_h1, switch_path(&dir, 2)).unwrap();
            assert_eq!(recv(&hosts[0]).as_deref(), Some(&to_h1[..]));
        }
        sw.set_ingress_loss(1, PPM);
        hosts[0].send_to(&to_h2, switch_path(&dir, 1)).unwrap();
        assert_eq!(recv(&hosts[1]), None, "100% drops everything");
        sw.set_ingress_loss(1, 0);
        hosts[0].send_to(&to_h2, switch_path(&dir, 1)).unwrap();
        assert_eq!(recv(&hosts[1]).as_deref(), Some(&to_h2[..]));
        drop(sw);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A host that reads nothing and sends nothing (a booting qemu) does not hold the others
    /// up; one that reads slowly but sends (a busy guest) loses nothing.
    #[test]
    fn a_silent_full_host_is_not_ready_and_a_busy_one_loses_nothing() {
        let (dir, sw, hosts) = switch_with_hosts("-full", 3);
        // The switch's clock must be past QUIET for a host that never sent to be quiet.
        std::thread::sleep(QUIET);
        // h2 never reads: every broadcast of h1 still reaches h3, more than h2's socket
        // holds (600 frames of 1,400 bytes: past any datagram queue and send buffer).
        let body = vec![0x5a; 1400];
        for n in 0..600u32 {
            let mut f = frame([0xff; 6], mac(1), &body);
            f.extend_from_slice(&n.to_be_bytes());
            hosts[0].send_to(&f, switch_path(&dir, 1)).unwrap();
            assert_eq!(
                recv(&hosts[2]).as_deref(),
                Some(&f[..]),
                "broadcast {n} reached h3"
            );
        }
        assert!(sw.not_ready(1) >= 1, "h2's port was found not ready");
        assert_eq!(sw.not_ready(2), 0, "h3 took every frame");

        // h3 announces itself (it is not quiet) and reads only after a pause longer than
        // SEND_WAIT: every unicast of h1 to it arrives, in order, none dropped.
        hosts[2]
            .send_to(&frame(mac(1), mac(3), b"hello"), switch_path(&dir, 3))
            .unwrap();
        let to_h3 = |n: u32| {
            let mut f = frame(mac(3), mac(1), &body);
            f.extend_from_slice(&n.to_be_bytes());
            f
        };
        let reader = {
            let h3 = hosts[2].try_clone().unwrap();
            std::thread::spawn(move || {
                std::thread::sleep(SEND_WAIT * 3);
                (0..300u32).map(|_| recv(&h3)).collect::<Vec<_>>()
            })
        };
        for n in 0..300u32 {
            hosts[0].send_to(&to_h3(n), switch_path(&dir, 1)).unwrap();
        }
        let got = reader.join().unwrap();
        for (n, f) in got.iter().enumerate() {
            assert_eq!(
                f.as_deref(),
                Some(&to_h3(n as u32)[..]),
                "unicast {n} to h3"
            );
        }
        assert_eq!(sw.not_ready(2), 0, "a host that sends is waited for");
        drop(sw);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
