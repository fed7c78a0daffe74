use super::*;

#[test]
fn device_events_are_logged_by_name_and_filtered() {
    use rdmakit::nldev::EventSource;
    let event = |kind, name: &str| Event {
        kind,
        dev_index: Some(9),
        dev_name: Some(name.into()),
        port: None,
        netdev_index: None,
        netdev: None,
        source: EventSource::Poll,
    };
    let all = DeviceFilter::all();
    assert_eq!(
        event_line(&event(EventKind::Register, "rxe9"), &all).as_deref(),
        Some("device rxe9 added")
    );
    assert!(event_line(&event(EventKind::Unregister, "rxe9"), &all)
        .unwrap()
        .starts_with("device rxe9 removed"));
    let no_rxe9 = DeviceFilter::new(None, Some("rxe9")).unwrap();
    assert_eq!(
        event_line(&event(EventKind::Register, "rxe9"), &no_rxe9),
        None
    );
}
