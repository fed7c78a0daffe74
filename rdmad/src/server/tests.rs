use super::*;
use crate::collector::CollectorConfig;
use rdmakit::sysfs::DeviceFilter;

#[tokio::test]
async fn listen_address_forms() {
    let any = bind(":0").await.expect(":PORT binds every interface");
    assert!(any.local_addr().unwrap().ip().is_unspecified());
    let lo = bind("127.0.0.1:0").await.expect("HOST:PORT");
    assert!(lo.local_addr().unwrap().ip().is_loopback());
    let err = bind(":http").await.unwrap_err();
    assert!(format!("{err:#}").contains("bad port"), "{err:#}");
    let err = bind("256.0.0.1:1").await.unwrap_err();
    assert!(
        format!("{err:#}").contains("cannot listen on 256.0.0.1:1"),
        "{err:#}"
    );
}

#[tokio::test]
async fn scrapes_beyond_max_requests_get_503() {
    let settings = Settings {
        listen_address: ":0".into(),
        max_requests: 1,
        web_config_file: None,
        disable_compression: false,
        gzip_level: crate::encoding::DEFAULT_GZIP_LEVEL,
        sysfs: "/nonexistent".into(),
        procfs: "/proc".into(),
        scrape_timeout: None,
        owners: Default::default(),
        ethtool_capture: None,
        device_include: None,
        device_exclude: None,
        collectors: vec!["sysfs_info"],
        probe: Default::default(),
        once: false,
        print_metrics: false,
    };
    let config = CollectorConfig::new(&settings.sysfs, DeviceFilter::all());
    let collectors = Collectors::new(&config, &settings.collectors);
    let exporter = Arc::new(Exporter::new(&settings, collectors));
    let held = Arc::clone(&exporter.permits).try_acquire_owned().unwrap();
    let busy = metrics(State(Arc::clone(&exporter)), HeaderMap::new()).await;
    assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
    drop(held);
    let ok = metrics(State(Arc::clone(&exporter)), HeaderMap::new()).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(
        ok.headers()[header::CONTENT_TYPE],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert_eq!(
        exporter.permits.available_permits(),
        1,
        "the permit came back"
    );
    assert!(
        exporter.collecting.available_permits() >= 1,
        "the slot came back"
    );
    let held: Vec<_> = (0..exporter.collecting.available_permits())
        .map(|_| {
            Arc::clone(&exporter.collecting)
                .try_acquire_owned()
                .unwrap()
        })
        .collect();
    // Every collection slot taken: the scrape waits instead of failing.
    let waiting = tokio::spawn(metrics(State(Arc::clone(&exporter)), HeaderMap::new()));
    tokio::task::yield_now().await;
    assert!(
        !waiting.is_finished(),
        "a scrape waits for a collection slot"
    );
    drop(held);
    assert_eq!(waiting.await.unwrap().status(), StatusCode::OK);
}
