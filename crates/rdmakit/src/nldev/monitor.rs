//! Device and link events: kernel notifications where the kernel sends them, and differences
//! between device/port dumps where it does not.
//!
//! Kernels newer than 6.1 multicast `MONITOR` messages on `RDMA_NL_GROUP_NOTIFY` (register,
//! unregister, netdev attach/detach, renames). Linux 6.1 (the lab kernel) has no such group:
//! joining it succeeds but nothing is ever sent. So [`Monitor`] does both: a thread reads the
//! notification socket, and every poll interval a `GET` + `PORT_GET` dump is compared with the
//! previous one. A change already reported by the kernel is not reported again.

use super::client::NldevClient;
use super::error::NldevError;
use super::ids::{NETLINK_RDMA, RDMA_NL_GROUP_NOTIFY};
use super::message::split_messages;
use super::parse;
use super::types::{Event, EventKind, EventSource};
use netlink_packet_core::NetlinkPayload;
use netlink_sys::Socket;
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What the poller remembers about one device: its name and each port's netdev.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceState {
    /// Device name.
    pub name: String,
    /// Port number -> attached netdev (index, name).
    pub ports: BTreeMap<u32, Option<(u32, String)>>,
}

/// Device index -> state.
pub type Topology = BTreeMap<u32, DeviceState>;

/// Read the current topology with one `GET` dump and one `PORT_GET` dump per device.
pub fn topology(client: &mut NldevClient) -> Result<Topology, NldevError> {
    let mut out = Topology::new();
    for dev in client.devices()? {
        let mut state = DeviceState {
            name: dev.name.clone(),
            ports: BTreeMap::new(),
        };
        // A device can vanish between the two dumps: treat its ports as unknown.
        if let Ok(ports) = client.ports(&dev) {
            for p in ports {
                let nd = match (p.netdev_index, p.netdev) {
                    (Some(i), Some(n)) => Some((i, n)),
                    _ => None,
                };
                state.ports.insert(p.port, nd);
            }
        }
        out.insert(dev.index, state);
    }
    Ok(out)
}

fn poll_event(
    kind: EventKind,
    index: u32,
    name: &str,
    port: Option<u32>,
    nd: Option<&(u32, String)>,
) -> Event {
    Event {
        kind,
        dev_index: Some(index),
        dev_name: Some(name.to_string()),
        port,
        netdev_index: nd.map(|n| n.0),
        netdev: nd.map(|n| n.1.clone()),
        source: EventSource::Poll,
    }
}

/// The events that turn `old` into `new`, in a stable order.
pub fn diff(old: &Topology, new: &Topology) -> Vec<Event> {
    let mut out = Vec::new();
    for (index, o) in old {
        if !new.contains_key(index) {
            for (port, nd) in &o.ports {
                if let Some(nd) = nd {
                    out.push(poll_event(
                        EventKind::NetdevDetach,
                        *index,
                        &o.name,
                        Some(*port),
                        Some(nd),
                    ));
                }
            }
            out.push(poll_event(
                EventKind::Unregister,
                *index,
                &o.name,
                None,
                None,
            ));
        }
    }
    for (index, n) in new {
        match old.get(index) {
            None => {
                out.push(poll_event(EventKind::Register, *index, &n.name, None, None));
                for (port, nd) in &n.ports {
                    if let Some(nd) = nd {
                        out.push(poll_event(
                            EventKind::NetdevAttach,
                            *index,
                            &n.name,
                            Some(*port),
                            Some(nd),
                        ));
                    }
                }
            }
            Some(o) => {
                if o.name != n.name {
                    out.push(poll_event(EventKind::Rename, *index, &n.name, None, None));
                }
                for (port, nnd) in &n.ports {
                    let ond = o.ports.get(port).cloned().flatten();
                    match (&ond, nnd) {
                        (None, Some(b)) => out.push(poll_event(
                            EventKind::NetdevAttach,
                            *index,
                            &n.name,
                            Some(*port),
                            Some(b),
                        )),
                        (Some(a), None) => out.push(poll_event(
                            EventKind::NetdevDetach,
                            *index,
                            &n.name,
                            Some(*port),
                            Some(a),
                        )),
                        (Some(a), Some(b)) if a.0 != b.0 => {
                            out.push(poll_event(
                                EventKind::NetdevDetach,
                                *index,
                                &n.name,
                                Some(*port),
                                Some(a),
                            ));
                            out.push(poll_event(
                                EventKind::NetdevAttach,
                                *index,
                                &n.name,
                                Some(*port),
                                Some(b),
                            ));
                        }
                        (Some(a), Some(b)) if a.1 != b.1 => out.push(poll_event(
                            EventKind::NetdevRename,
                            *index,
                            &n.name,
                            Some(*port),
                            Some(b),
                        )),
                        _ => {}
                    }
                }
            }
        }
    }
    out
}

/// A running monitor: kernel notifications plus dump polling.
#[derive(Debug)]
pub struct Monitor {
    client: NldevClient,
    state: Topology,
    kernel: mpsc::Receiver<Event>,
    interval: Duration,
    next_poll: Instant,
    /// Events recently reported by the kernel: (kind, device index, port), to drop their
    /// poll duplicates.
    seen: Vec<(EventKind, Option<u32>, Option<u32>)>,
    pending: std::collections::VecDeque<Event>,
    /// True when joining the notification group worked.
    pub kernel_notifications: bool,
}

impl Monitor {
    /// Start monitoring: take the first topology, join the notification group (best effort)
    /// and poll every `interval`.
    pub fn start(interval: Duration) -> Result<Monitor, NldevError> {
        let mut client = NldevClient::open()?;
        let state = topology(&mut client)?;
        let (tx, rx) = mpsc::channel();
        let kernel_notifications = match notify_socket() {
            Ok(socket) => {
                std::thread::spawn(move || notify_loop(socket, tx));
                true
            }
            Err(_) => false,
        };
        Ok(Monitor {
            client,
            state,
            kernel: rx,
            interval,
            next_poll: Instant::now() + interval,
            seen: Vec::new(),
            pending: Default::default(),
            kernel_notifications,
        })
    }

    /// The topology as last seen.
    pub fn topology(&self) -> &Topology {
        &self.state
    }

    /// The next event, waiting as long as needed (errors from a poll are returned).
    pub fn next_event(&mut self) -> Result<Event, NldevError> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Ok(e);
            }
            let wait = self.next_poll.saturating_duration_since(Instant::now());
            match self.kernel.recv_timeout(wait) {
                Ok(event) => {
                    self.seen.push((event.kind, event.dev_index, event.port));
                    return Ok(event);
                }
                Err(mpsc::RecvTimeoutError::Timeout)
                | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    if Instant::now() < self.next_poll {
                        std::thread::sleep(
                            self.next_poll.saturating_duration_since(Instant::now()),
                        );
                    }
                    self.next_poll = Instant::now() + self.interval;
                    let new = topology(&mut self.client)?;
                    for e in diff(&self.state, &new) {
                        let key = (e.kind, e.dev_index, e.port);
                        if let Some(pos) = self.seen.iter().position(|k| *k == key) {
                            self.seen.remove(pos);
                        } else {
                            self.pending.push_back(e);
                        }
                    }
                    self.seen.clear();
                    self.state = new;
                }
            }
        }
    }
}

fn notify_socket() -> std::io::Result<Socket> {
    let mut socket = Socket::new(NETLINK_RDMA)?;
    socket.bind_auto()?;
    socket.add_membership(RDMA_NL_GROUP_NOTIFY)?;
    Ok(socket)
}

fn notify_loop(socket: Socket, tx: mpsc::Sender<Event>) {
    loop {
        let mut buf = Vec::with_capacity(64 * 1024);
        if socket.recv(&mut buf, 0).is_err() {
            return;
        }
        let Ok(msgs) = split_messages(&buf) else {
            continue;
        };
        for (_, msg) in msgs {
            if let NetlinkPayload::InnerMessage(m) = msg.payload {
                if let Ok(event) = parse::event(&m) {
                    if tx.send(event).is_err() {
                        return;
                    }
                }
            }
        }
    }
}
