use super::*;

#[test]
fn iboe_budget() {
    assert_eq!(iboe_mtu(1500), 1024);
    assert_eq!(iboe_mtu(4191), 2048);
    assert_eq!(iboe_mtu(4192), 4096);
    assert_eq!(iboe_mtu(9000), 4096);
    assert_eq!(iboe_mtu(300), 0);
    assert_eq!(iboe_mtu(0), 0);
}

#[test]
fn verdicts_rank_fail_first() {
    let mut v = vec![
        Verdict::Ok,
        Verdict::NotAvailable,
        Verdict::Fail,
        Verdict::Warn,
    ];
    v.sort();
    assert_eq!(
        v,
        vec![
            Verdict::Fail,
            Verdict::Warn,
            Verdict::NotAvailable,
            Verdict::Ok
        ]
    );
    assert_eq!(parse_mtu("4096 (5)"), Some(4096));
    assert_eq!(parse_mtu("junk"), None);
}

#[test]
fn every_check_is_registered_once_and_points_to_a_known_lesson() {
    let mut ids: Vec<&str> = checks::CHECKS.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), 13);
    ids.sort();
    ids.dedup();
    assert_eq!(
        ids.len(),
        checks::CHECKS.len(),
        "a check id is registered twice"
    );
    for c in &checks::CHECKS {
        assert!(LESSONS.contains(&c.lesson), "{}: {}", c.id, c.lesson);
    }
}
