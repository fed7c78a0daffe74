use super::judge::{judge, judge_two, sections, Observed};
use super::*;

#[test]
fn every_exercise_has_a_todo_and_a_different_solution() {
    for e in EXERCISES {
        // The header comment states the task (one TODO); the starter adds its own.
        assert!(
            e.starter.matches("TODO").count() > e.solution.matches("TODO").count(),
            "{}",
            e.name
        );
        assert_ne!(e.starter, e.solution, "{}", e.name);
        assert!(!e.expect.is_empty());
    }
}

/// What the observer prints for a good 13-credits run (shape of a lab run's lines).
const GOOD: &str = "12 messages delivered in order, no RNR
@@obs counter rdma_recvs 12
@@obs counter rdma_sends 12
@@obs counter send_rnr_err 0
@@obs counter rcvd_rnr_err 0
@@obs res cq 0 0
@@obs res ctx 0 0
@@obs res pd 0 0
@@obs res qp 0 0
@@obs exit 0
";

fn observed(text: &str) -> (Observed, String) {
    let mut out = text.to_string();
    let o = Observed::parse(&mut out);
    (o, out)
}

#[test]
fn parse_separates_the_observer_from_the_program() {
    let (o, out) = observed(GOOD);
    assert_eq!(out, "12 messages delivered in order, no RNR\n");
    assert_eq!(o.code, 0);
    assert_eq!(o.counters["rdma_recvs"], 12);
    assert_eq!(o.res_before["pd"], 0);
    assert!(o.res_checkpoint.is_none());
    assert!(o.errors.is_empty());
    let (o, _) = observed("@@obs checkpoint-reached\n@@obs checkpoint pd 1\n@@obs bogus\n");
    assert_eq!(o.res_checkpoint.unwrap()["pd"], 1);
    assert_eq!(o.errors.len(), 1);
    assert_eq!(o.code, -1, "no exit line: not a clean exit");
}

#[test]
fn judge_rests_on_behaviour_not_on_printed_lines() {
    let e = find("13-credits").unwrap();
    let mut r = Vec::new();
    let (good, _) = observed(GOOD);
    assert!(judge(e, &good, &mut r), "{r:?}");
    // The printed line alone passes nothing: the counters did not move.
    let (o, _) = observed(&GOOD.replace("rdma_recvs 12", "rdma_recvs 0"));
    assert!(!judge(e, &o, &mut r));
    // An RNR NAK is the failure credits exist to prevent.
    let (o, _) = observed(&GOOD.replace("send_rnr_err 0", "send_rnr_err 1"));
    assert!(!judge(e, &o, &mut r));
    let (o, _) = observed(&GOOD.replace("exit 0", "exit 1"));
    assert!(!judge(e, &o, &mut r));
    // Something left behind after the exit.
    let (o, _) = observed(&GOOD.replace("res qp 0 0", "res qp 0 1"));
    assert!(!judge(e, &o, &mut r));
    // A counter the device does not have is not a pass.
    let (o, _) = observed(&GOOD.replace("@@obs counter rcvd_rnr_err 0\n", ""));
    assert!(!judge(e, &o, &mut r));
    // The observer could not read the resources: nothing to judge on.
    let (o, _) = observed(&GOOD.replace("@@obs res", "res"));
    assert!(!judge(e, &o, &mut r));
    assert!(find("nope").is_err());
}

#[test]
fn teardown_is_judged_at_the_checkpoint() {
    let e = find("09-teardown").unwrap();
    let base = "@@obs res pd 1 1\n@@obs res cq 0 0\n@@obs exit 0\n";
    let mut r = Vec::new();
    let (o, _) = observed(base);
    assert!(!judge(e, &o, &mut r), "never reached the checkpoint");
    let (o, _) = observed(&format!(
        "{base}@@obs checkpoint-reached\n@@obs checkpoint pd 1\n@@obs checkpoint cq 0\n@@obs checkpoint ctx 1\n"
    ));
    assert!(judge(e, &o, &mut r), "{r:?}");
    let (o, _) = observed(&format!(
        "{base}@@obs checkpoint-reached\n@@obs checkpoint pd 2\n@@obs checkpoint cq 1\n"
    ));
    r.clear();
    assert!(!judge(e, &o, &mut r));
    assert!(r.iter().any(|l| l.contains("pd +1, cq +1")), "{r:?}");
}

#[test]
fn two_host_exercises_are_judged_on_both_hosts() {
    let e = find("16-credit-flow").unwrap();
    assert!(e.two.is_some());
    assert_eq!(e.libs(), &["-libverbs", "-lrdmacm"]);
    assert_eq!(find("13-credits").unwrap().libs(), &["-libverbs"]);
    let h1 = "@@obs counter rdma_sends 32\n@@obs counter rcvd_rnr_err 0\n@@obs res qp 0 0\n@@obs exit 0\n";
    let h2 = "@@obs counter rdma_recvs 32\n@@obs counter send_rnr_err 0\n@@obs res qp 0 0\n@@obs exit 0\n";
    let mut r = Vec::new();
    let (o1, _) = observed(h1);
    let (o2, _) = observed(h2);
    assert!(judge_two(e, &o1, &o2, &mut r).unwrap(), "{r:?}");
    assert!(r.iter().any(|l| l.starts_with("  h1 [pass]")));
    assert!(r.iter().any(|l| l.starts_with("  h2 [pass]")));
    // The receiver answered with an RNR NAK: h2 fails, so the exercise does.
    let (bad, _) = observed(&h2.replace("send_rnr_err 0", "send_rnr_err 1"));
    r.clear();
    assert!(!judge_two(e, &o1, &bad, &mut r).unwrap());
    assert!(
        r.iter()
            .any(|l| l.starts_with("  h2 [FAIL] rxe0 send_rnr_err")),
        "{r:?}"
    );
    // The sender exited 1 (its SEND failed): h1 fails.
    let (bad, _) = observed(&h1.replace("exit 0", "exit 1"));
    assert!(!judge_two(e, &bad, &o2, &mut r).unwrap());
    // A one-host exercise is not judged as two.
    assert!(judge_two(find("13-credits").unwrap(), &o1, &o2, &mut r).is_err());
}

#[test]
fn sections_split_the_observer_script_output() {
    let text = "=== a.solution\nhello\n@@obs exit 0\n=== exit 0\n=== a.starter\n@@obs exit 1\n=== exit 3\n";
    let s = sections(text.lines());
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].0, "a.solution");
    assert_eq!(s[0].1.code, 0);
    assert_eq!(s[0].2, "hello\n");
    assert_eq!(s[1].1.code, 1);
    assert_eq!(s[1].1.errors, vec!["the observer exited 3".to_string()]);
}
