use super::*;
use std::net::TcpListener;
use std::time::Instant;

#[test]
fn a_bound_listener_is_listening_and_a_dropped_one_is_not() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().unwrap().port();
    assert!(listening(port), "port {port} listens");
    assert!(wait_listening(port, Duration::from_secs(5)));
    drop(l);
    assert!(!listening(port), "port {port} closed");
    let t0 = Instant::now();
    assert!(!wait_listening(port, Duration::from_millis(200)));
    assert!(t0.elapsed() >= Duration::from_millis(200));
}
