//! The declaration table: what each experiment shows, which lesson it belongs to, its parts,
//! and which counters each part must move and must leave alone.
//!
//! This table is data. The runner reads it to check the counters after every part, the live
//! tests read the same expectations back from the JSON report, `rdmactl experiment list`
//! prints it, and its unit tests tie every name to the counter catalog: each experiment is a
//! [`catalog::Experiment`], each lesson a [`catalog::Lesson`], each counter a catalog entry
//! of [`Declaration::family`].
use rdmakit::catalog::{Experiment, Lesson};

/// One part of an experiment: a scenario with its own counter window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PartDecl {
    /// Stable id (`rnr`, `rem_access`, ...), used in the JSON and by the tests.
    pub name: &'static str,
    /// One line for humans.
    pub title: &'static str,
    /// Counters that must move (delta > 0) during the part.
    pub moves: &'static [&'static str],
    /// Counters that must not move (delta == 0) during the part.
    pub stays: &'static [&'static str],
}

/// One experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Declaration {
    /// Which experiment (its `rdmactl experiment run` name, title and chapter are
    /// `experiment`'s).
    pub experiment: Experiment,
    /// What it shows, in two or three sentences.
    pub shows: &'static str,
    /// The counter family whose names `parts` use (`rxe`: the lab's device). On another
    /// family the counter expectations are reported as not applicable.
    pub family: &'static str,
    /// The parts, in run order.
    pub parts: &'static [PartDecl],
}

impl Declaration {
    /// The experiment's command-line name.
    pub fn name(&self) -> &'static str {
        self.experiment.as_str()
    }

    /// Its title.
    pub fn title(&self) -> &'static str {
        self.experiment.title()
    }

    /// The course chapter it belongs to.
    pub fn lesson(&self) -> Lesson {
        self.experiment.lesson()
    }

    /// A part by name.
    pub fn part(&self, name: &str) -> Option<&'static PartDecl> {
        self.parts.iter().find(|p| p.name == name)
    }

    /// Every counter the declaration names, deduplicated, in first-use order.
    pub fn counters(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for p in self.parts {
            for c in p.moves.iter().chain(p.stays) {
                if !out.contains(c) {
                    out.push(c);
                }
            }
        }
        out
    }
}

/// Packets on the wire (any traffic moves both on a loopback pair).
const PKTS: &[&str] = &["sent_pkts", "rcvd_pkts"];
/// The two retry-exhaustion counters: only the matching error may move them.
const RETRY_ERRS: &[&str] = &["retry_exceeded_err", "retry_rnr_exceeded_err"];
/// RNR counters and retry exhaustion: none may move in a part without RNR or timeouts.
const NO_RNR_NO_RETRY: &[&str] = &[
    "retry_exceeded_err",
    "retry_rnr_exceeded_err",
    "rcvd_rnr_err",
    "send_rnr_err",
];

/// All experiments, in course order.
pub const DECLARATIONS: &[Declaration] = &[
    Declaration {
        experiment: Experiment::MrRegistration,
        shows: "Registering a buffer pins its pages (VmPin grows by the buffer size) and costs \
                time proportional to its size; deregistering unpins it. The kernel refuses \
                REMOTE_WRITE without LOCAL_WRITE with EINVAL. Registration is control path: no \
                packet moves.",
        family: "rxe",
        parts: &[
            PartDecl {
                name: "sizes",
                title: "register and deregister 4 KiB .. 1 GiB, timing each and reading VmPin/VmLck",
                moves: &[],
                stays: PKTS,
            },
            PartDecl {
                name: "access",
                title: "access flags the kernel refuses (REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE)",
                moves: &[],
                stays: PKTS,
            },
            PartDecl {
                name: "rereg",
                title: "registering the same size again: the cost is paid every time, the keys change",
                moves: &[],
                stays: PKTS,
            },
        ],
    },
    Declaration {
        experiment: Experiment::QpStates,
        shows: "Each transition needs its own attributes; a skipped state or a missing attribute \
                is refused with the real errno (EINVAL) and the QP stays where it was. \
                Transitions are control path: only the data transfer moves packet counters.",
        family: "rxe",
        parts: &[
            PartDecl {
                name: "walk",
                title: "RESET -> INIT -> RTR -> RTS with the attributes each step needs",
                moves: &[],
                stays: PKTS,
            },
            PartDecl {
                name: "illegal",
                title: "skipping a state and leaving out a required attribute",
                moves: &[],
                stays: PKTS,
            },
            PartDecl {
                name: "traffic",
                title: "an RDMA WRITE once both QPs are in RTS",
                moves: PKTS,
                stays: RETRY_ERRS,
            },
            PartDecl {
                name: "drain_and_reset",
                title: "RTS -> SQD (SQ_DRAINED event) -> RTS -> ERR -> RESET -> INIT",
                moves: &[],
                stays: PKTS,
            },
        ],
    },
    Declaration {
        experiment: Experiment::QpErrors,
        shows: "Each error has a cause, a completion status on one or both sides, a QP that \
                ends in ERR, and on rxe sometimes a counter. RNR and transport retries are \
                counted separately; access and length errors leave the retry counters alone. \
                Every WR posted after the QP failed is flushed.",
        family: "rxe",
        parts: &[
            PartDecl {
                name: "rnr",
                title: "SEND with no receive posted and rnr_retry=0: RNR_RETRY_EXC_ERR",
                moves: &["send_rnr_err", "rcvd_rnr_err", "retry_rnr_exceeded_err"],
                stays: &["retry_exceeded_err"],
            },
            PartDecl {
                name: "rem_access",
                title: "WRITE with a wrong rkey: REM_ACCESS_ERR",
                moves: PKTS,
                stays: NO_RNR_NO_RETRY,
            },
            PartDecl {
                name: "loc_len",
                title: "SEND of 64 B into a 16 B receive: LOC_LEN_ERR at the receiver (rxe: LOC_QP_OP_ERR)",
                moves: PKTS,
                stays: NO_RNR_NO_RETRY,
            },
            PartDecl {
                name: "loc_prot",
                title: "SEND from a buffer with a wrong lkey: LOC_PROT_ERR (rxe: LOC_QP_OP_ERR), nothing sent",
                moves: &[],
                stays: &[
                    "retry_exceeded_err",
                    "retry_rnr_exceeded_err",
                    "rcvd_rnr_err",
                    "send_rnr_err",
                    "rcvd_pkts",
                ],
            },
            PartDecl {
                name: "retry_exc",
                title: "WRITE to a destroyed peer QP (retry_cnt=2, timeout=12): RETRY_EXC_ERR",
                moves: &["retry_exceeded_err", "completer_retry_err", "sent_pkts"],
                stays: &["retry_rnr_exceeded_err", "send_rnr_err", "rcvd_rnr_err"],
            },
            PartDecl {
                name: "flush",
                title: "receives pending when the QP enters ERR, and a send posted after: WR_FLUSH_ERR",
                moves: &[],
                stays: &[
                    "sent_pkts",
                    "rcvd_pkts",
                    "retry_exceeded_err",
                    "retry_rnr_exceeded_err",
                ],
            },
        ],
    },
    Declaration {
        experiment: Experiment::SecurityKeys,
        shows: "A peer with an rkey may touch exactly the MR's range with exactly its access \
                rights, from a QP of the same PD; everything else completes with \
                REM_ACCESS_ERR and kills the connection. Deregistration and window \
                invalidation revoke access. The rkey travels in clear in every RDMA header.",
        family: "rxe",
        parts: &[
            PartDecl {
                name: "out_of_bounds",
                title: "WRITE past the end of the MR with its valid rkey",
                moves: PKTS,
                stays: NO_RNR_NO_RETRY,
            },
            PartDecl {
                name: "no_remote_read",
                title: "READ from an MR registered without REMOTE_READ",
                moves: PKTS,
                stays: NO_RNR_NO_RETRY,
            },
            PartDecl {
                name: "other_pd",
                title: "WRITE with the rkey of an MR in another protection domain",
                moves: PKTS,
                stays: NO_RNR_NO_RETRY,
            },
            PartDecl {
                name: "guess",
                title: "guessing the 8-bit key part of a known rkey index",
                moves: PKTS,
                stays: NO_RNR_NO_RETRY,
            },
            PartDecl {
                name: "memory_window",
                title: "type-2 memory window: bind, write inside, write outside, invalidate",
                moves: PKTS,
                stays: NO_RNR_NO_RETRY,
            },
            PartDecl {
                name: "dereg",
                title: "deregistering the MR revokes its rkey",
                moves: PKTS,
                stays: NO_RNR_NO_RETRY,
            },
            PartDecl {
                name: "wire",
                title: "what an RDMA WRITE carries on the wire",
                moves: &[],
                stays: PKTS,
            },
        ],
    },
    Declaration {
        experiment: Experiment::OneVsTwoSided,
        shows: "The same 64 B transfer four ways: who gets a completion, the latency, and the \
                CPU each side's application spends per message. With WRITE and READ the target \
                application does nothing; on rxe the 'NIC' is the kernel, so system CPU still \
                moves.",
        family: "rxe",
        parts: &[
            PartDecl {
                name: "send_recv",
                title: "SEND/RECV: both sides get a completion",
                moves: PKTS,
                stays: RETRY_ERRS,
            },
            PartDecl {
                name: "write",
                title: "RDMA WRITE: only the requester gets a completion",
                moves: PKTS,
                stays: NO_RNR_NO_RETRY,
            },
            PartDecl {
                name: "write_imm",
                title: "RDMA WRITE with immediate: the target gets a completion with 32 bits",
                moves: PKTS,
                stays: RETRY_ERRS,
            },
            PartDecl {
                name: "read",
                title: "RDMA READ: only the requester gets a completion",
                moves: PKTS,
                stays: NO_RNR_NO_RETRY,
            },
        ],
    },
    Declaration {
        experiment: Experiment::CqModes,
        shows: "A receiver waiting for messages: busy polling notices a completion as soon as \
                it lands and burns a core doing it; a completion channel sleeps in the kernel \
                until an event wakes it, paying a wake-up in latency and saving CPU.",
        family: "rxe",
        parts: &[
            PartDecl {
                name: "busy_poll",
                title: "wait for each incoming SEND by spinning on ibv_poll_cq",
                moves: PKTS,
                stays: RETRY_ERRS,
            },
            PartDecl {
                name: "events",
                title: "wait for each incoming SEND asleep: ibv_req_notify_cq, channel fd, ibv_get_cq_event, poll",
                moves: PKTS,
                stays: RETRY_ERRS,
            },
        ],
    },
    Declaration {
        experiment: Experiment::Transports,
        shows: "Reads the port and GID table from the device: RoCE addresses QPs by GID \
                (IPv4-mapped for RoCE v2 over IPv4), has no LID and no subnet manager, and \
                derives its MTU from the netdev. Reading attributes sends nothing.",
        family: "rxe",
        parts: &[PartDecl {
            name: "addressing",
            title: "port attributes, GID table, MTU, LID/SM",
            moves: &[],
            stays: PKTS,
        }],
    },
];

/// The declaration of an experiment (every [`Experiment`] has one; see the unit tests).
pub fn declaration(experiment: Experiment) -> Option<&'static Declaration> {
    DECLARATIONS.iter().find(|d| d.experiment == experiment)
}

/// The declaration by command-line name.
pub fn by_name(name: &str) -> Option<&'static Declaration> {
    DECLARATIONS.iter().find(|d| d.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmakit::catalog::Catalog;

    fn catalog() -> &'static Catalog {
        Catalog::embedded().expect("the embedded catalog loads")
    }

    #[test]
    fn every_catalog_experiment_is_declared_once_and_in_order() {
        // `wire` is rdmactl's (on the tracer, not on verbs): every other one is declared here.
        let verbs: Vec<Experiment> = Experiment::ALL
            .iter()
            .copied()
            .filter(|e| *e != Experiment::Wire)
            .collect();
        let declared: Vec<Experiment> = DECLARATIONS.iter().map(|d| d.experiment).collect();
        assert_eq!(declared, verbs);
        assert!(declaration(Experiment::Wire).is_none());
        for e in &verbs {
            assert_eq!(declaration(*e).map(|d| d.name()), Some(e.as_str()));
            assert_eq!(by_name(e.as_str()).map(|d| d.experiment), Some(*e));
        }
        assert!(by_name("no-such-experiment").is_none());
    }

    #[test]
    fn every_named_counter_is_in_the_catalog_family() {
        let cat = catalog();
        for d in DECLARATIONS {
            assert!(
                cat.families().contains(&d.family),
                "{}: unknown family {}",
                d.name(),
                d.family
            );
            for c in d.counters() {
                let info = cat.get(d.family, c).unwrap_or_else(|| {
                    panic!(
                        "{}: counter {c} is not in the {} catalog",
                        d.name(),
                        d.family
                    )
                });
                assert_eq!(info.name, c, "exact spelling");
            }
        }
    }

    #[test]
    fn every_lesson_exists_and_has_a_chapter() {
        for d in DECLARATIONS {
            assert!(Lesson::ALL.contains(&d.lesson()), "{}", d.name());
            assert!((1..=11).contains(&d.lesson().chapter()), "{}", d.name());
            assert_eq!(Lesson::parse(d.lesson().as_str()), Some(d.lesson()));
        }
    }

    #[test]
    fn parts_are_unique_and_no_counter_must_both_move_and_stay() {
        for d in DECLARATIONS {
            assert!(!d.parts.is_empty(), "{}", d.name());
            assert!(!d.title().is_empty() && !d.shows.is_empty());
            for (i, p) in d.parts.iter().enumerate() {
                assert!(
                    d.parts[..i].iter().all(|q| q.name != p.name),
                    "{}: duplicate part {}",
                    d.name(),
                    p.name
                );
                assert_eq!(d.part(p.name), Some(p));
                for m in p.moves {
                    assert!(!p.stays.contains(m), "{}/{}: {m}", d.name(), p.name);
                }
            }
        }
    }

    #[test]
    fn catalog_counters_that_point_to_an_experiment_are_exercised_by_it() {
        // The catalog says "see experiment X" for some counters: X must declare them.
        let cat = catalog();
        for c in cat.counters().iter().filter(|c| c.driver == "rxe") {
            if let Some(e) = c.experiment {
                let d = declaration(e).expect("declared");
                if e == Experiment::QpErrors {
                    assert!(
                        d.counters().contains(&c.name.as_str()),
                        "catalog sends {} to {} but it does not name it",
                        c.name,
                        d.name()
                    );
                }
            }
        }
    }
}
