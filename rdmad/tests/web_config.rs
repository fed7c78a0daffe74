//! `--web.config.file` end to end: the rdmad binary serving HTTPS, basic auth and mutual TLS
//! on 127.0.0.1, checked with curl; certificates are made at test time with rcgen (a CA, a
//! server certificate for 127.0.0.1 and localhost, a client certificate, and a self-signed
//! client certificate the CA did not sign). A missing curl skips the test, or fails it when
//! `CI` is set (tests/run sets it and installs curl).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

mod common;

use common::{rdmad, spawn_listening, tool_on_path, workspace};

/// Whether `tool` (from the Debian package of the same name) is on PATH; see
/// [`tool_on_path`].
fn have(tool: &str, test: &str) -> bool {
    tool_on_path(tool, tool, test).is_some()
}

fn tools(test: &str) -> bool {
    have("curl", test)
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        // No ':' in the name: curl reads `--cert FILE:PASSWORD`.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rdmad-webconfig-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A certificate signed by `issuer` (self-signed when `None`) for `params`, written as
/// `name.pem` and its key as `name.key` (PKCS#8, P-256, as a key from an openssl CLI would be).
fn write_cert(
    dir: &TempDir,
    name: &str,
    params: CertificateParams,
    issuer: Option<&Issuer<'_, KeyPair>>,
) -> KeyPair {
    let key = KeyPair::generate().expect("a P-256 key");
    let cert = match issuer {
        Some(ca) => params.signed_by(&key, ca),
        None => params.self_signed(&key),
    }
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    dir.write(&format!("{name}.pem"), &cert.pem());
    dir.write(&format!("{name}.key"), &key.serialize_pem());
    key
}

/// Certificate parameters with `cn`, the subject alternative names `sans`, and for an end
/// entity (not a CA) a digitalSignature key usage and the extended key usage `eku`.
fn params(cn: &str, sans: &[&str], eku: Option<ExtendedKeyUsagePurpose>) -> CertificateParams {
    // An IP address becomes an IP SAN, anything else a DNS name.
    let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
    let mut p = CertificateParams::new(sans).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    match eku {
        Some(eku) => {
            p.is_ca = IsCa::ExplicitNoCa;
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            p.extended_key_usages = vec![eku];
        }
        None => {
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        }
    }
    p
}

/// In `dir`: ca.pem/ca.key, server.pem/server.key (signed by the CA, for 127.0.0.1 and
/// localhost), client.pem/client.key (signed by the CA), rogue.pem/rogue.key (self-signed).
fn make_certs(dir: &TempDir) {
    let ca_params = params("rdmad test CA", &[], None);
    let ca_key = write_cert(dir, "ca", ca_params.clone(), None);
    let ca = Issuer::new(ca_params, ca_key);
    let server = params(
        "localhost",
        &["127.0.0.1", "localhost"],
        Some(ExtendedKeyUsagePurpose::ServerAuth),
    );
    write_cert(dir, "server", server, Some(&ca));
    let client = || params("prometheus", &[], Some(ExtendedKeyUsagePurpose::ClientAuth));
    write_cert(dir, "client", client(), Some(&ca));
    write_cert(dir, "rogue", client(), None);
}

/// A running rdmad with a web config on a free loopback port; killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(web_config: &Path) -> Server {
        let (child, address) = spawn_listening(
            rdmad()
                .arg("--web.listen-address=127.0.0.1:0")
                .arg("--web.config.file")
                .arg(web_config)
                .arg("--path.sysfs")
                .arg(workspace().join("tests/fixtures/sysfs/mlx5-ib"))
                .args([
                    "--collector.disable-defaults",
                    "--collector.sysfs_info",
                    "--collector.sysfs_counters",
                ]),
        );
        let port = address
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the listening address ends with a port");
        Server { child, port }
    }

    fn url(&self, scheme: &str, path: &str) -> String {
        format!("{scheme}://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What curl got: its exit code, the status code (0: no HTTP response), headers (lower case)
/// and body.
struct Got {
    exit: i32,
    status: u16,
    headers: String,
    body: String,
    stderr: String,
}

fn curl(args: &[&str]) -> Got {
    let out: Output = Command::new("curl")
        .args(["-sS", "-i", "--max-time", "30"])
        .args(args)
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or(("", &text));
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Got {
        exit: out.status.code().unwrap_or(-1),
        status,
        headers: head.to_ascii_lowercase(),
        body: body.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

const METRIC: &str = "# TYPE rdma_port_xmit_data_bytes_total counter\n";

#[test]
fn https_scrape_with_the_ca_and_plain_http_fails() {
    if !tools("https_scrape_with_the_ca_and_plain_http_fails") {
        return;
    }
    let dir = TempDir::new("tls");
    make_certs(&dir);
    // Relative paths: from the web config file's directory.
    let config = dir.write(
        "web.yml",
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n",
    );
    let server = Server::start(&config);
    let ca = dir.path("ca.pem");
    let ca = ca.to_str().unwrap();

    let got = curl(&["--cacert", ca, &server.url("https", "/metrics")]);
    assert_eq!((got.exit, got.status), (0, 200), "{}", got.stderr);
    assert!(got.body.contains(METRIC), "{}", got.body);
    assert!(got
        .headers
        .contains("content-type: text/plain; version=0.0.4; charset=utf-8"));
    let got = curl(&["--cacert", ca, &server.url("https", "/healthz")]);
    assert_eq!((got.status, got.body.as_str()), (200, "ok\n"));
    let got = curl(&[
        "--cacert",
        ca,
        "--tls-max",
        "1.2",
        &server.url("https", "/healthz"),
    ]);
    assert_eq!(got.status, 200, "TLS 1.2 is on by default: {}", got.stderr);

    let plain = curl(&[&server.url("http", "/metrics")]);
    assert_ne!(plain.exit, 0, "plain HTTP to the TLS port must fail");
    assert!(!plain.body.contains("rdma_"), "{}", plain.body);
    let untrusted = curl(&[&server.url("https", "/metrics")]);
    assert_eq!(
        untrusted.exit, 60,
        "without the CA the certificate is not trusted: {}",
        untrusted.stderr
    );
}

#[test]
fn min_version_tls13_refuses_tls12() {
    if !tools("min_version_tls13_refuses_tls12") {
        return;
    }
    let dir = TempDir::new("tls13");
    make_certs(&dir);
    let config = dir.write(
        "web.yml",
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  \
         min_version: TLS13\n",
    );
    let server = Server::start(&config);
    let ca = dir.path("ca.pem");
    let ca = ca.to_str().unwrap();
    let old = curl(&[
        "--cacert",
        ca,
        "--tls-max",
        "1.2",
        &server.url("https", "/healthz"),
    ]);
    assert_ne!(old.exit, 0, "TLS 1.2 must be refused");
    assert_eq!(old.status, 0);
    let new = curl(&[
        "--cacert",
        ca,
        "--tlsv1.3",
        &server.url("https", "/healthz"),
    ]);
    assert_eq!(new.status, 200, "{}", new.stderr);
}

/// Basic auth guards every endpoint, over TLS and over plain HTTP; the extra headers are on
/// every response, refusals included.
#[test]
fn basic_auth_guards_every_endpoint() {
    if !tools("basic_auth_guards_every_endpoint") {
        return;
    }
    let dir = TempDir::new("auth");
    make_certs(&dir);
    let hash = bcrypt::hash("s3cret pass", 4).unwrap();
    let users = format!("basic_auth_users:\n  prometheus: '{hash}'\n");
    let headers = "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n";
    let tls = dir.write(
        "tls.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n{users}{headers}"
        ),
    );
    let plain = dir.write("plain.yml", &format!("{users}{headers}"));
    let ca = dir.path("ca.pem");
    let ca = ca.to_str().unwrap();

    let server = Server::start(&tls);
    for path in ["/", "/healthz", "/metrics"] {
        let url = server.url("https", path);
        let none = curl(&["--cacert", ca, &url]);
        assert_eq!(none.status, 401, "{path} without credentials");
        assert!(
            none.headers.contains("www-authenticate: basic"),
            "{path}: {}",
            none.headers
        );
        assert!(none.headers.contains("x-content-type-options: nosniff"));
        assert!(!none.body.contains("rdma_"));
        let wrong = curl(&["--cacert", ca, "-u", "prometheus:s3cret", &url]);
        assert_eq!(wrong.status, 401, "{path} with a wrong password");
        let unknown = curl(&["--cacert", ca, "-u", "admin:s3cret pass", &url]);
        assert_eq!(unknown.status, 401, "{path} with an unknown user");
        let right = curl(&["--cacert", ca, "-u", "prometheus:s3cret pass", &url]);
        assert_eq!(
            right.status, 200,
            "{path} with the password: {}",
            right.stderr
        );
        assert!(right.headers.contains("x-content-type-options: nosniff"));
        if path == "/metrics" {
            assert!(right.body.contains(METRIC));
        }
    }
    drop(server);

    let server = Server::start(&plain);
    let url = server.url("http", "/metrics");
    let none = curl(&[&url]);
    assert_eq!(none.status, 401);
    assert!(none.headers.contains("www-authenticate: basic"));
    let right = curl(&["-u", "prometheus:s3cret pass", &url]);
    assert_eq!(right.status, 200);
    assert!(right.body.contains(METRIC));
}

#[test]
fn mutual_tls_requires_a_client_cert_signed_by_the_client_ca() {
    if !tools("mutual_tls_requires_a_client_cert_signed_by_the_client_ca") {
        return;
    }
    let dir = TempDir::new("mtls");
    make_certs(&dir);
    let config = dir.write(
        "web.yml",
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n",
    );
    let server = Server::start(&config);
    let p = |name: &str| dir.path(name).to_str().unwrap().to_string();
    let url = server.url("https", "/metrics");
    let anonymous = curl(&["--cacert", &p("ca.pem"), &url]);
    assert_ne!(anonymous.exit, 0, "no client certificate must be refused");
    assert_eq!(anonymous.status, 0);
    let rogue = curl(&[
        "--cacert",
        &p("ca.pem"),
        "--cert",
        &p("rogue.pem"),
        "--key",
        &p("rogue.key"),
        &url,
    ]);
    assert_ne!(
        rogue.exit, 0,
        "a certificate the CA did not sign must be refused"
    );
    assert_eq!(rogue.status, 0);
    let client = curl(&[
        "--cacert",
        &p("ca.pem"),
        "--cert",
        &p("client.pem"),
        "--key",
        &p("client.key"),
        &url,
    ]);
    assert_eq!(client.status, 200, "{}", client.stderr);
    assert!(client.body.contains(METRIC));
}

/// A renewed certificate (new files, new modification time) is served from the next handshake
/// on, without a restart; a renewal that does not load keeps the previous certificate.
#[test]
fn renewed_certificate_is_picked_up_without_restart() {
    if !tools("renewed_certificate_is_picked_up_without_restart") {
        return;
    }
    let old = TempDir::new("renew-old");
    make_certs(&old);
    let new = TempDir::new("renew-new");
    make_certs(&new);
    let config = old.write(
        "web.yml",
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n",
    );
    let server = Server::start(&config);
    let url = server.url("https", "/healthz");
    let old_ca = old.path("ca.pem");
    let new_ca = new.path("ca.pem");
    let trusts = |ca: &Path| curl(&["--cacert", ca.to_str().unwrap(), &url]).status == 200;
    assert!(trusts(&old_ca) && !trusts(&new_ca), "the first certificate");

    // Renew: replace both files, with a later modification time whatever the clock's grain.
    let later = std::time::SystemTime::now() + Duration::from_secs(5);
    let replace = |name: &str, text: &[u8], at: std::time::SystemTime| {
        std::fs::write(old.path(name), text).unwrap();
        std::fs::File::options()
            .write(true)
            .open(old.path(name))
            .unwrap()
            .set_modified(at)
            .unwrap();
    };
    for name in ["server.pem", "server.key"] {
        replace(name, &std::fs::read(new.path(name)).unwrap(), later);
    }
    assert!(
        trusts(&new_ca) && !trusts(&old_ca),
        "the renewed certificate is served"
    );

    // A broken renewal: the server keeps the certificate it has.
    replace("server.pem", b"garbage\n", later + Duration::from_secs(5));
    assert!(trusts(&new_ca), "a renewal that does not load is ignored");
}

/// SIGTERM stops the TLS server cleanly (exit 0), as it does the plain one.
#[test]
fn tls_server_stops_on_sigterm() {
    if !tools("tls_server_stops_on_sigterm")
        || tool_on_path("kill", "procps", "tls_server_stops_on_sigterm").is_none()
    {
        return;
    }
    let dir = TempDir::new("term");
    make_certs(&dir);
    let config = dir.write(
        "web.yml",
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n",
    );
    let mut server = Server::start(&config);
    let ca = dir.path("ca.pem");
    let got = curl(&[
        "--cacert",
        ca.to_str().unwrap(),
        &server.url("https", "/healthz"),
    ]);
    assert_eq!(got.status, 200);
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(exit) = server.child.try_wait().unwrap() {
            break exit;
        }
        assert!(Instant::now() < deadline, "rdmad did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit:?}");
}

/// rdmad with `web_config` (by flag, or by env when `env` is set): exit code and stderr. It
/// must fail before listening; a server that starts is killed and fails the test.
fn refused(web_config: &Path, env: bool) -> (Option<i32>, String) {
    let mut cmd = rdmad();
    cmd.arg("--web.listen-address=127.0.0.1:0")
        .arg("--path.sysfs")
        .arg(workspace().join("tests/fixtures/sysfs/mlx5-ib"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if env {
        cmd.env("RDMAD_WEB_CONFIG_FILE", web_config);
    } else {
        cmd.arg("--web.config.file").arg(web_config);
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "rdmad started with {}:\n{}",
                web_config.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn config_errors_exit_1_naming_the_file_and_the_key() {
    let dir = TempDir::new("errors");
    dir.write("server.pem", "not a certificate\n");
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "unknown.yml",
            "tls_server_config:\n  cert_file: server.pem\n  keyfile: server.key\n",
            &["tls_server_config", "unknown field `keyfile`"],
        ),
        (
            "nokey.yml",
            "tls_server_config:\n  cert_file: server.pem\n",
            &["tls_server_config.key_file: missing"],
        ),
        (
            "tls11.yml",
            "tls_server_config:\n  min_version: TLS11\n",
            &["tls_server_config.min_version: TLS11 is not supported"],
        ),
        (
            "badpem.yml",
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n",
            &["tls_server_config.cert_file", "holds no CERTIFICATE"],
        ),
        (
            "missing.yml",
            "tls_server_config:\n  cert_file: absent.pem\n  key_file: server.key\n",
            &["tls_server_config.cert_file: cannot read", "absent.pem"],
        ),
        (
            "hash.yml",
            "basic_auth_users:\n  prometheus: secret-in-clear\n",
            &["basic_auth_users.prometheus: not a bcrypt hash"],
        ),
        ("yaml.yml", "tls_server_config: [\n", &["web config file"]),
    ];
    for (i, (name, text, wanted)) in cases.iter().enumerate() {
        let file = dir.write(name, text);
        // Every other case through the environment variable.
        let (code, stderr) = refused(&file, i % 2 == 1);
        assert_eq!(code, Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("web config file {}", file.display())),
            "{name}: the file is named: {stderr}"
        );
        for w in wanted.iter() {
            assert!(stderr.contains(w), "{name}: wanted {w:?} in: {stderr}");
        }
        assert!(!stderr.contains("secret-in-clear"), "{stderr}");
    }
    let (code, stderr) = refused(&dir.path("does-not-exist.yml"), false);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("cannot read web config file") && stderr.contains("does-not-exist.yml"),
        "{stderr}"
    );
}

/// deploy/web-config.yml enables nothing as shipped, and with every setting uncommented (its
/// `/etc/rdmad/tls/` files made here) it turns on TLS with client certificates, the headers
/// and basic auth.
#[test]
fn the_deploy_example_is_valid() {
    let example = workspace().join("deploy/web-config.yml");
    let config =
        rdmad::webconfig::load(&example).unwrap_or_else(|e| panic!("deploy/web-config.yml: {e:#}"));
    assert!(config.tls.is_none() && config.auth.is_none() && config.headers.is_empty());
    let dir = TempDir::new("example");
    make_certs(&dir);
    for (from, to) in [
        ("server.pem", "server.crt"),
        ("server.key", "server.key"),
        ("ca.pem", "clients-ca.crt"),
    ] {
        std::fs::copy(dir.path(from), dir.path(&format!("tls-{to}"))).unwrap();
    }
    let text = std::fs::read_to_string(&example).unwrap();
    let uncommented: String = text
        .lines()
        .map(|l| l.strip_prefix("# ").unwrap_or(l))
        .map(|l| l.replace("/etc/rdmad/tls/", &format!("{}/tls-", dir.0.display())))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        uncommented.contains("\nbasic_auth_users:\n"),
        "{uncommented}"
    );
    let config = rdmad::webconfig::parse(&uncommented, &dir.0)
        .unwrap_or_else(|e| panic!("deploy/web-config.yml uncommented: {e:#}"));
    assert!(config.tls.is_some(), "TLS");
    assert_eq!(config.auth.map(|a| a.users()), Some(1));
    assert_eq!(config.headers.len(), 3);
}

/// The client `rdmactl top --rdmad` scrapes with (`rdmakit::scrape`, ureq on rustls) against
/// a real rdmad with TLS and basic auth: the CA file and the password file are what it needs,
/// and each missing or wrong piece is a clear error, not a page.
#[test]
fn top_scrapes_rdmad_over_tls_with_basic_auth() {
    use rdmakit::scrape::{ScrapeConfig, ScrapeError, Scraper};

    let dir = TempDir::new("top");
    make_certs(&dir);
    let hash = bcrypt::hash("s3cret pass", 4).unwrap();
    let config = dir.write(
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: '{hash}'\n"
        ),
    );
    // The password as a file with a trailing newline, as `echo pw > file` writes it.
    let password = dir.write("password", "s3cret pass\n");
    let wrong_password = dir.write("wrong", "s3cret\n");
    let server = Server::start(&config);
    let scrape = |url: String, ca: bool, user: Option<&str>, password: &Path| {
        let mut config = ScrapeConfig::new(url);
        config.timeout = Duration::from_secs(30);
        config.ca_file = ca.then(|| dir.path("ca.pem"));
        config.username = user.map(str::to_owned);
        config.password_file = user.map(|_| password.to_owned());
        Scraper::new(&config).expect("a valid client").fetch()
    };
    // The URL without a path: /metrics.
    let https = server.url("https", "");

    let text = scrape(https.clone(), true, Some("prometheus"), &password)
        .expect("the scrape with CA and credentials works");
    assert!(text.contains(METRIC), "{text}");
    let exposition = rdmakit::exposition::parse(&text).expect("the page parses");
    assert_eq!(
        exposition
            .types
            .get("rdma_port_xmit_data_bytes_total")
            .map(String::as_str),
        Some("counter")
    );
    assert!(exposition
        .named("rdma_port_xmit_data_bytes_total")
        .any(|s| s.label("device") == Some("mlx5_0")));

    for (what, got) in [
        (
            "no credentials",
            scrape(https.clone(), true, None, &password),
        ),
        (
            "a wrong password",
            scrape(https.clone(), true, Some("prometheus"), &wrong_password),
        ),
        (
            "an unknown user",
            scrape(https.clone(), true, Some("admin"), &password),
        ),
    ] {
        match got {
            Err(ScrapeError::Status { status: 401, .. }) => {}
            other => panic!("{what}: {other:?}"),
        }
    }
    // Without the CA file the server's certificate is not trusted; plain HTTP to the TLS
    // port gets no page.
    for (what, got) in [
        (
            "no CA file",
            scrape(https.clone(), false, Some("prometheus"), &password),
        ),
        (
            "http:// to the TLS port",
            scrape(server.url("http", ""), true, Some("prometheus"), &password),
        ),
    ] {
        match got {
            Err(ScrapeError::Request { .. }) => {}
            other => panic!("{what}: {other:?}"),
        }
    }
}

/// gzip (as Prometheus asks for it) over TLS behind basic auth: the decoded body is the plain
/// one, refusals still refuse, the extra headers are still set.
#[test]
fn compressed_scrape_over_tls_with_basic_auth() {
    if !tools("compressed_scrape_over_tls_with_basic_auth") {
        return;
    }
    let dir = TempDir::new("gzip");
    make_certs(&dir);
    let hash = bcrypt::hash("pw", 4).unwrap();
    let config = dir.write(
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n\
             http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n\
             basic_auth_users:\n  prometheus: '{hash}'\n"
        ),
    );
    let server = Server::start(&config);
    let ca = dir.path("ca.pem");
    let ca = ca.to_str().unwrap();
    let url = server.url("https", "/metrics");
    let auth = ["--cacert", ca, "-u", "prometheus:pw"];
    // Collector durations and the count of responses so far vary from scrape to scrape;
    // everything else is the same.
    let stable = |body: &str| -> Vec<String> {
        body.lines()
            .filter(|l| !l.starts_with("rdma_scrape_collector_duration_seconds{"))
            .filter(|l| !l.starts_with("rdma_exporter_metrics_responses_total{"))
            .map(str::to_owned)
            .collect()
    };
    let plain = curl(&[&auth[..], &[url.as_str()]].concat());
    assert_eq!((plain.exit, plain.status), (0, 200), "{}", plain.stderr);
    assert!(
        !plain.headers.contains("content-encoding"),
        "{}",
        plain.headers
    );
    assert!(plain.body.contains(METRIC));
    // --compressed: curl decodes what it gets; the header it sends is ours.
    let gzip = curl(
        &[
            &auth[..],
            &["-H", "Accept-Encoding: gzip", "--compressed", url.as_str()],
        ]
        .concat(),
    );
    assert_eq!((gzip.exit, gzip.status), (0, 200), "{}", gzip.stderr);
    assert!(
        gzip.headers.contains("content-encoding: gzip"),
        "{}",
        gzip.headers
    );
    assert!(
        gzip.headers.contains("vary: accept-encoding"),
        "{}",
        gzip.headers
    );
    assert!(gzip.headers.contains("x-content-type-options: nosniff"));
    assert_eq!(stable(&gzip.body), stable(&plain.body));
    let refused = curl(&["--cacert", ca, "-H", "Accept-Encoding: gzip", url.as_str()]);
    assert_eq!(refused.status, 401, "no credentials, compressed or not");
    assert!(refused.headers.contains("www-authenticate: basic"));
}
