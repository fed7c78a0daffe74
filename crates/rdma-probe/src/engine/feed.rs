//! Peer discovery on a thread of its own ([`super`]): a refresh that waits (a DNS server
//! that does not answer holds a lookup for its timeout, per attempt) holds that thread,
//! never a round. Run inline, such a wait used to come after the round's start, so every
//! run of the round started past its deadline and failed at once, as if the RDMA path to
//! every peer were down.
use super::*;
use crate::discovery::PeerSet;

/// The newest discovered set and its counts.
type Found = (PeerSet, DiscoveryStats);

pub(super) enum Feed {
    /// Refreshed by the discovery thread once per interval.
    Thread {
        rx: mpsc::Receiver<Found>,
        latest: Option<Found>,
    },
    /// No thread could be started: refreshed in the round, as before.
    Inline {
        discovery: Box<Discovery>,
        latest: Found,
    },
}

impl Feed {
    /// Start the discovery thread; it refreshes every `interval` until the engine stops or
    /// the feed is dropped. It is not joined: stopping the engine never waits for a lookup
    /// (each one is bounded, see [`crate::discovery`]; the thread ends after it).
    pub(super) fn start(shared: &Arc<Shared>, interval: Duration, config: DiscoveryConfig) -> Feed {
        let shared = Arc::clone(shared);
        let (tx, rx) = mpsc::channel::<Found>();
        let theirs = config.clone();
        let spawned = std::thread::Builder::new()
            .name("rdma-probe-discovery".into())
            .spawn(move || {
                let mut d = Discovery::new(theirs);
                loop {
                    let set = d.refresh();
                    if tx.send((set, d.stats().clone())).is_err() {
                        return;
                    }
                    if shared.sleep_until(Instant::now() + interval) {
                        return;
                    }
                }
            });
        match spawned {
            Ok(_) => Feed::Thread { rx, latest: None },
            Err(e) => {
                tracing::warn!("no thread for peer discovery ({e}): it runs in the rounds");
                let mut discovery = Box::new(Discovery::new(config));
                let set = discovery.refresh();
                let stats = discovery.stats().clone();
                Feed::Inline {
                    discovery,
                    latest: (set, stats),
                }
            }
        }
    }

    /// The newest set, without waiting, except for the first one (the first round starts
    /// with its peers); None when the discovery thread ended before its first answer.
    pub(super) fn latest(&mut self) -> Option<&Found> {
        match self {
            Feed::Thread { rx, latest } => {
                if latest.is_none() {
                    *latest = Some(rx.recv().ok()?);
                }
                while let Ok(newer) = rx.try_recv() {
                    *latest = Some(newer);
                }
                latest.as_ref()
            }
            Feed::Inline { discovery, latest } => {
                let set = discovery.refresh();
                *latest = (set, discovery.stats().clone());
                Some(latest)
            }
        }
    }
}
