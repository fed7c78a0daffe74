use super::*;
use crate::cmd::sleep_until_flag;
use std::sync::atomic::Ordering;

#[test]
fn the_interval_lasts_its_length_when_nothing_ends_it() {
    let end = AtomicBool::new(false);
    let t0 = Instant::now();
    assert!(!sleep_until_flag(Duration::from_millis(120), &end));
    assert!(t0.elapsed() >= Duration::from_millis(120));
}

#[test]
fn an_end_already_asked_for_ends_the_interval_at_once() {
    let end = AtomicBool::new(true);
    let t0 = Instant::now();
    assert!(sleep_until_flag(Duration::from_secs(600), &end));
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
}

#[test]
fn an_end_during_the_interval_cuts_it_short() {
    let end = Arc::new(AtomicBool::new(false));
    let setter = {
        let end = Arc::clone(&end);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            end.store(true, Ordering::Relaxed);
        })
    };
    let t0 = Instant::now();
    assert!(sleep_until_flag(Duration::from_secs(600), &end));
    let waited = t0.elapsed();
    setter.join().unwrap();
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    // Generous for a loaded machine, and still far below the 600 s asked for.
    assert!(waited < Duration::from_secs(60), "{waited:?}");
}
