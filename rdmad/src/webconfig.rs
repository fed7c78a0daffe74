//! `--web.config.file`: TLS and HTTP basic auth, in the format of the Prometheus
//! exporter-toolkit "web configuration file" (the file node_exporter takes with the same flag).
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt          # both cert_file and key_file (or cert and key inline)
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert
//!   client_ca_file: clients-ca.crt
//!   min_version: TLS12             # TLS12 (default) or TLS13
//! http_server_config:
//!   headers:
//!     Strict-Transport-Security: max-age=31536000
//! basic_auth_users:
//!   prometheus: $2y$10$...         # bcrypt hash
//! ```
//!
//! Parsing is strict, as in exporter-toolkit: an unknown key, a certificate without its key, a
//! file that cannot be read or holds no PEM object, a TLS version or cipher suite rustls does
//! not implement, an invalid bcrypt hash are errors at startup that name the file and the key.
//! Relative paths are relative to the directory of the web configuration file. Certificate and
//! key files are read again when their modification time changes (certificate rotation needs
//! no restart); a rotated pair that does not load is logged and the previous one kept.
//!
//! Differences from exporter-toolkit (Go's crypto/tls versus rustls with the *ring* provider):
//! TLS 1.0 and 1.1 and the CBC cipher suites do not exist in rustls; `CurveP521` and
//! post-quantum groups are not in *ring*; `client_allowed_sans` and `rate_limit` are not
//! implemented (each an error that says so, never silently ignored); HTTP/2 is not built in,
//! so `http2: true` (the default) still serves HTTP/1.1, which is what Prometheus uses.
//!
//! Basic auth: every request (`/`, `/healthz`, `/metrics`) needs a valid `Authorization: Basic`
//! header, else `401` with `WWW-Authenticate: Basic`. bcrypt is slow on purpose (tens of
//! milliseconds at cost 10) and Prometheus sends the same credentials with every scrape, so a
//! successful check is remembered: per user, a keyed hash (HMAC-SHA256 under a key drawn at
//! startup) of the last accepted password, compared in constant time. The cache holds at most
//! one entry per configured user and only successes, so no request can grow it. bcrypt checks
//! run one at a time on a blocking thread, so a flood of wrong passwords costs at most one
//! core; an unknown user is checked against a dummy hash of the same cost, so the response time
//! does not tell which users exist. Passwords and hashes are never logged.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::{anyhow, bail, Context, Result};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use base64::Engine as _;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use serde::Deserialize;

/// The parsed and checked web configuration.
pub struct WebConfig {
    /// The file it came from.
    pub path: PathBuf,
    /// The TLS server configuration; `None`: plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Basic auth; `None`: no authentication.
    pub auth: Option<Arc<BasicAuth>>,
    /// Extra response headers (`http_server_config.headers`).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("path", &self.path)
            .field("tls", &self.tls.is_some())
            .field(
                "auth_users",
                &self.auth.as_ref().map_or(0, |a| a.users.len()),
            )
            .field("headers", &self.headers)
            .finish()
    }
}

// The file, as exporter-toolkit's `Config` (strict: unknown keys are errors).

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping of tls_server_config, http_server_config, basic_auth_users"
)]
struct FileConfig {
    tls_server_config: Option<TlsFile>,
    http_server_config: Option<HttpFile>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    rate_limit: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping (cert_file, key_file, ...)"
)]
struct TlsFile {
    cert_file: Option<String>,
    key_file: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    client_ca_file: Option<String>,
    client_ca: Option<String>,
    client_auth_type: Option<String>,
    cipher_suites: Option<Vec<String>>,
    curve_preferences: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    prefer_server_cipher_suites: Option<bool>,
    client_allowed_sans: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a mapping (http2, headers)")]
struct HttpFile {
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// The headers exporter-toolkit lets a web configuration set, with their allowed values (empty:
/// any value).
const EXTRA_HEADERS: &[(&str, &[&str])] = &[
    ("Strict-Transport-Security", &[]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-XSS-Protection", &[]),
    ("Content-Security-Policy", &[]),
];

/// Read and check a web configuration file.
pub fn load(path: &Path) -> Result<WebConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read web config file {}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    parse(&text, dir)
        .map(|mut config| {
            config.path = path.to_path_buf();
            config
        })
        .with_context(|| format!("web config file {}", path.display()))
}

/// Check web configuration text; relative paths are taken from `dir`.
pub fn parse(text: &str, dir: &Path) -> Result<WebConfig> {
    // An empty file (or one of comments only) is valid: no TLS, no auth.
    let file: FileConfig = if text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        FileConfig::default()
    } else {
        serde_yaml_ng::from_str(text).map_err(|e| anyhow!("{e}"))?
    };
    if file.rate_limit.is_some() {
        bail!("rate_limit: not supported by rdmad (remove it; --web.max-requests limits scrapes)");
    }
    let tls = match file.tls_server_config {
        Some(tls) => tls_config(tls, dir).map_err(|e| anyhow!("tls_server_config.{e:#}"))?,
        None => None,
    };
    let http = file.http_server_config.unwrap_or_default();
    let _http2 = http.http2; // Accepted; HTTP/1.1 only (see the module doc).
    let mut headers = Vec::new();
    for (name, value) in http.headers.unwrap_or_default() {
        headers.push(extra_header(&name, &value).map_err(|e| anyhow!("http_server_config.{e}"))?);
    }
    let auth = match file.basic_auth_users {
        Some(users) if !users.is_empty() => Some(Arc::new(
            BasicAuth::new(users).map_err(|e| anyhow!("basic_auth_users.{e:#}"))?,
        )),
        _ => None,
    };
    Ok(WebConfig {
        path: PathBuf::new(),
        tls,
        auth,
        headers,
    })
}

fn extra_header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue)> {
    let Some((canonical, allowed)) = EXTRA_HEADERS
        .iter()
        .find(|(h, _)| h.eq_ignore_ascii_case(name))
    else {
        let known: Vec<&str> = EXTRA_HEADERS.iter().map(|(h, _)| *h).collect();
        bail!(
            "headers.{name}: this header cannot be set (one of: {})",
            known.join(", ")
        );
    };
    if !allowed.is_empty() && !allowed.contains(&value) {
        bail!("headers.{canonical}: {value:?} is not one of {allowed:?}");
    }
    let value = HeaderValue::from_str(value)
        .map_err(|_| anyhow!("headers.{canonical}: {value:?} is not a valid header value"))?;
    Ok((HeaderName::from_static(lowercase(canonical)), value))
}

fn lowercase(name: &'static str) -> &'static str {
    match name {
        "Strict-Transport-Security" => "strict-transport-security",
        "X-Content-Type-Options" => "x-content-type-options",
        "X-Frame-Options" => "x-frame-options",
        "X-XSS-Protection" => "x-xss-protection",
        _ => "content-security-policy",
    }
}

/// A path of the file, relative to its directory; `""` counts as unset (as in Go).
fn file_path(dir: &Path, value: &Option<String>) -> Option<PathBuf> {
    value
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(|s| dir.join(s))
}

fn nonempty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|s| !s.is_empty())
}

/// The rustls server configuration, or `None` when the section sets no TLS key (as
/// exporter-toolkit's `IsEnabled`). Errors start with the key they are about.
fn tls_config(tls: TlsFile, dir: &Path) -> Result<Option<Arc<rustls::ServerConfig>>> {
    let cert_file = file_path(dir, &tls.cert_file);
    let key_file = file_path(dir, &tls.key_file);
    let client_ca_file = file_path(dir, &tls.client_ca_file);
    let enabled = cert_file.is_some()
        || key_file.is_some()
        || nonempty(&tls.cert).is_some()
        || nonempty(&tls.key).is_some()
        || client_ca_file.is_some()
        || nonempty(&tls.client_ca).is_some()
        || nonempty(&tls.client_auth_type).is_some();

    let mut provider = rustls::crypto::ring::default_provider();
    let (min, max) = versions(&tls)?;
    if let Some(names) = &tls.cipher_suites {
        provider.cipher_suites = cipher_suites(&provider, names)?;
    }
    if let Some(names) = &tls.curve_preferences {
        provider.kx_groups = curves(names)?;
    }
    if tls.client_allowed_sans.is_some() {
        bail!("client_allowed_sans: not supported by rdmad (sign client certificates with a dedicated CA in client_ca_file instead)");
    }
    if !enabled {
        if tls.min_version.is_some()
            || tls.cipher_suites.is_some()
            || tls.curve_preferences.is_some()
        {
            tracing::warn!(
                "the web config sets TLS options but no certificate: serving plain HTTP"
            );
        }
        return Ok(None);
    }
    let has_cert = cert_file.is_some() || nonempty(&tls.cert).is_some();
    let has_key = key_file.is_some() || nonempty(&tls.key).is_some();
    if !has_cert {
        bail!("cert_file: missing (TLS needs both cert_file and key_file, or cert and key)");
    }
    if !has_key {
        bail!("key_file: missing (TLS needs both cert_file and key_file, or cert and key)");
    }
    let provider = Arc::new(provider);
    let source = CertSource {
        cert: match (&cert_file, nonempty(&tls.cert)) {
            (Some(path), _) => Pem::File(path.clone()),
            (None, Some(text)) => Pem::Inline(text.to_owned()),
            (None, None) => unreachable!("checked above"),
        },
        key: match (&key_file, nonempty(&tls.key)) {
            (Some(path), _) => Pem::File(path.clone()),
            (None, Some(text)) => Pem::Inline(text.to_owned()),
            (None, None) => unreachable!("checked above"),
        },
    };
    let resolver = Arc::new(ReloadingCert::new(source, Arc::clone(&provider))?);

    let client_cas = match (&client_ca_file, nonempty(&tls.client_ca)) {
        (Some(path), _) => Some(roots(
            &std::fs::read(path)
                .with_context(|| format!("client_ca_file: cannot read {}", path.display()))?,
            "client_ca_file",
            &path.display().to_string(),
        )?),
        (None, Some(text)) => Some(roots(text.as_bytes(), "client_ca", "the inline PEM")?),
        (None, None) => None,
    };
    let auth_type = nonempty(&tls.client_auth_type).unwrap_or("NoClientCert");
    let verifier: Option<Arc<dyn ClientCertVerifier>> = match auth_type {
        "NoClientCert" => {
            if client_cas.is_some() {
                bail!("client_ca_file: set, but client_auth_type is NoClientCert (set client_auth_type, e.g. RequireAndVerifyClientCert)");
            }
            None
        }
        "RequireAndVerifyClientCert" | "VerifyClientCertIfGiven" => {
            let Some(roots) = client_cas else {
                bail!("client_auth_type: {auth_type} needs client_ca_file (the CA that signs client certificates)");
            };
            let builder =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider));
            let builder = if auth_type == "VerifyClientCertIfGiven" {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            Some(
                builder
                    .build()
                    .map_err(|e| anyhow!("client_ca_file: {e}"))?,
            )
        }
        "RequestClientCert" | "RequireAnyClientCert" | "RequireClientCert" => {
            Some(Arc::new(AnyClientCert {
                mandatory: auth_type != "RequestClientCert",
                provider: Arc::clone(&provider),
            }))
        }
        other => bail!(
            "client_auth_type: unknown value {other:?} (one of NoClientCert, RequestClientCert, \
             RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert)"
        ),
    };

    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| (min..=max).contains(v))
    .map(|(_, v)| v)
    .collect();
    if min <= TlsVersion::Tls12
        && max >= TlsVersion::Tls12
        && !provider
            .cipher_suites
            .iter()
            .any(|s| s.version() == &rustls::version::TLS12)
    {
        bail!(
            "cipher_suites: no TLS 1.2 suite left, but TLS 1.2 is allowed (set min_version: TLS13)"
        );
    }
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| anyhow!("min_version/max_version: {e}"))?;
    let builder = match verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.ignore_client_order = tls.prefer_server_cipher_suites.unwrap_or(true);
    Ok(Some(Arc::new(config)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum TlsVersion {
    Tls10,
    Tls11,
    Tls12,
    Tls13,
}

fn versions(tls: &TlsFile) -> Result<(TlsVersion, TlsVersion)> {
    let parse = |key: &str, value: &Option<String>, default| -> Result<TlsVersion> {
        let version = match nonempty(value) {
            None => return Ok(default),
            Some("TLS10") => TlsVersion::Tls10,
            Some("TLS11") => TlsVersion::Tls11,
            Some("TLS12") => TlsVersion::Tls12,
            Some("TLS13") => TlsVersion::Tls13,
            Some(other) => bail!("{key}: unknown TLS version {other:?} (TLS12 or TLS13)"),
        };
        if version < TlsVersion::Tls12 {
            bail!(
                "{key}: {} is not supported (rustls implements TLS12 and TLS13 only)",
                value.as_deref().unwrap_or_default()
            );
        }
        Ok(version)
    };
    let min = parse("min_version", &tls.min_version, TlsVersion::Tls12)?;
    let max = parse("max_version", &tls.max_version, TlsVersion::Tls13)?;
    if min > max {
        bail!("min_version: {min:?} is above max_version {max:?}");
    }
    Ok((min, max))
}

/// The TLS 1.2 suites named, in the order given, then every TLS 1.3 suite: as in Go, TLS 1.3
/// suites are not configurable, and naming one is accepted and changes nothing.
fn cipher_suites(
    provider: &CryptoProvider,
    names: &[String],
) -> Result<Vec<rustls::SupportedCipherSuite>> {
    let name_of = |s: &rustls::SupportedCipherSuite| format!("{:?}", s.suite());
    let tls13: Vec<_> = provider
        .cipher_suites
        .iter()
        .filter(|s| s.version() == &rustls::version::TLS13)
        .copied()
        .collect();
    let mut chosen = Vec::new();
    for name in names {
        // Go spells the TLS 1.3 suites TLS_AES_128_GCM_SHA256, rustls TLS13_AES_128_GCM_SHA256.
        let tls13_name = name.replacen("TLS_", "TLS13_", 1);
        if tls13
            .iter()
            .any(|s| name_of(s) == tls13_name || name_of(s) == *name)
        {
            continue;
        }
        match provider
            .cipher_suites
            .iter()
            .find(|s| s.version() == &rustls::version::TLS12 && name_of(s) == *name)
        {
            Some(suite) => {
                if !chosen.contains(suite) {
                    chosen.push(*suite)
                }
            }
            None => {
                let known: Vec<String> = provider
                    .cipher_suites
                    .iter()
                    .filter(|s| s.version() == &rustls::version::TLS12)
                    .map(name_of)
                    .collect();
                bail!(
                    "cipher_suites: {name} is not supported by rustls (TLS 1.2 suites: {})",
                    known.join(", ")
                );
            }
        }
    }
    chosen.extend(tls13);
    Ok(chosen)
}

fn curves(names: &[String]) -> Result<Vec<&'static dyn rustls::crypto::SupportedKxGroup>> {
    use rustls::crypto::ring::kx_group;
    let mut groups: Vec<&'static dyn rustls::crypto::SupportedKxGroup> = Vec::new();
    for name in names {
        let group: &'static dyn rustls::crypto::SupportedKxGroup = match name.as_str() {
            "X25519" => kx_group::X25519,
            "CurveP256" => kx_group::SECP256R1,
            "CurveP384" => kx_group::SECP384R1,
            "CurveP521" | "X25519MLKEM768" => bail!(
                "curve_preferences: {name} is not supported by rustls with ring (X25519, CurveP256, CurveP384)"
            ),
            other => bail!(
                "curve_preferences: unknown curve {other:?} (X25519, CurveP256, CurveP384)"
            ),
        };
        if !groups.iter().any(|g| g.name() == group.name()) {
            groups.push(group);
        }
    }
    if groups.is_empty() {
        bail!("curve_preferences: empty");
    }
    Ok(groups)
}

fn roots(pem: &[u8], key: &str, what: &str) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| anyhow!("{key}: {what}: bad PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| anyhow!("{key}: {what}: not a usable CA certificate: {e}"))?;
    }
    if roots.is_empty() {
        bail!("{key}: {what} holds no CERTIFICATE");
    }
    Ok(roots)
}

/// A PEM object: a file (read again when it changes) or inline text.
#[derive(Debug, Clone)]
enum Pem {
    File(PathBuf),
    Inline(String),
}

impl Pem {
    fn read(&self, key: &str) -> Result<Vec<u8>> {
        match self {
            Pem::File(path) => std::fs::read(path)
                .with_context(|| format!("{key}: cannot read {}", path.display())),
            Pem::Inline(text) => Ok(text.as_bytes().to_vec()),
        }
    }

    fn modified(&self) -> Option<SystemTime> {
        match self {
            Pem::File(path) => std::fs::metadata(path).and_then(|m| m.modified()).ok(),
            Pem::Inline(_) => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Pem::File(path) => path.display().to_string(),
            Pem::Inline(_) => "the inline PEM".into(),
        }
    }
}

#[derive(Debug)]
struct CertSource {
    cert: Pem,
    key: Pem,
}

impl CertSource {
    fn load(&self, provider: &CryptoProvider) -> Result<CertifiedKey> {
        let (cert_key, key_key) = match (&self.cert, &self.key) {
            (Pem::File(_), Pem::File(_)) => ("cert_file", "key_file"),
            (Pem::File(_), Pem::Inline(_)) => ("cert_file", "key"),
            (Pem::Inline(_), Pem::File(_)) => ("cert", "key_file"),
            (Pem::Inline(_), Pem::Inline(_)) => ("cert", "key"),
        };
        let cert_pem = self.cert.read(cert_key)?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow!("{cert_key}: {}: bad PEM: {e}", self.cert.describe()))?;
        if chain.is_empty() {
            bail!("{cert_key}: {} holds no CERTIFICATE", self.cert.describe());
        }
        let key_pem = self.key.read(key_key)?;
        // Never put the key's bytes in a message.
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| {
            anyhow!(
                "{key_key}: {} holds no usable PRIVATE KEY (PKCS#8, RSA or EC PEM)",
                self.key.describe()
            )
        })?;
        CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => anyhow!(
                "{key_key}: {} does not belong to the certificate in {cert_key} {}",
                self.key.describe(),
                self.cert.describe()
            ),
            e => anyhow!("{key_key}: {}: {e}", self.key.describe()),
        })
    }

    fn modified(&self) -> Stamp {
        (self.cert.modified(), self.key.modified())
    }
}

/// The modification times of the certificate and key files (`None`: inline or unreadable).
type Stamp = (Option<SystemTime>, Option<SystemTime>);

/// The server certificate, read again at a handshake when a file's modification time changed.
#[derive(Debug)]
struct ReloadingCert {
    source: CertSource,
    provider: Arc<CryptoProvider>,
    /// The stamp of the files last loaded (or tried), and the certificate in use.
    current: Mutex<(Stamp, Arc<CertifiedKey>)>,
}

impl ReloadingCert {
    fn new(source: CertSource, provider: Arc<CryptoProvider>) -> Result<ReloadingCert> {
        let stamp = source.modified();
        let key = Arc::new(source.load(&provider)?);
        Ok(ReloadingCert {
            source,
            provider,
            current: Mutex::new((stamp, key)),
        })
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let stamp = self.source.modified();
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if stamp != current.0 {
            // Whatever the outcome, do not retry before the files change again.
            current.0 = stamp;
            match self.source.load(&self.provider) {
                Ok(key) => {
                    tracing::info!("TLS certificate reloaded");
                    current.1 = Arc::new(key);
                }
                Err(e) => tracing::warn!(
                    "TLS certificate changed but does not load, keeping the previous one: {e:#}"
                ),
            }
        }
        Some(Arc::clone(&current.1))
    }
}

/// `RequestClientCert` / `RequireAnyClientCert`: ask for a client certificate (optional or
/// mandatory) without checking who signed it; the handshake signature is still verified.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `basic_auth_users`: users and their bcrypt hashes, and the cache of accepted passwords.
pub struct BasicAuth {
    users: HashMap<String, String>,
    /// Checked for unknown users, so that they take as long as known ones.
    dummy_hash: String,
    /// Keys the cache's HMACs; drawn at startup, never leaves the process.
    key: ring::hmac::Key,
    /// Per user, the HMAC of `user \0 password` of the last accepted password.
    accepted: Mutex<HashMap<String, ring::hmac::Tag>>,
    /// One bcrypt check at a time.
    bcrypt_slot: tokio::sync::Semaphore,
    /// bcrypt checks run so far (tests: the cache works).
    bcrypt_runs: std::sync::atomic::AtomicU64,
}

impl BasicAuth {
    /// Check every hash; errors name the user, never the hash.
    pub fn new(users: BTreeMap<String, String>) -> Result<BasicAuth> {
        let mut max_cost = 4;
        for (user, hash) in &users {
            if user.contains(':') {
                bail!("{user}: a user name cannot contain ':' (HTTP basic auth separates user and password with it)");
            }
            let cost = check_hash(hash).map_err(|e| anyhow!("{user}: not a bcrypt hash: {e}"))?;
            max_cost = max_cost.max(cost);
        }
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .map_err(|_| anyhow!("no randomness from the OS"))?;
        let mut secret = [0u8; 16];
        ring::rand::SecureRandom::fill(&rng, &mut secret)
            .map_err(|_| anyhow!("no randomness from the OS"))?;
        let dummy_hash = bcrypt::hash(secret, max_cost).context("making the dummy hash")?;
        Ok(BasicAuth {
            users: users.into_iter().collect(),
            dummy_hash,
            key,
            accepted: Mutex::new(HashMap::new()),
            bcrypt_slot: tokio::sync::Semaphore::new(1),
            bcrypt_runs: Default::default(),
        })
    }

    /// How many users are configured.
    pub fn users(&self) -> usize {
        self.users.len()
    }

    /// How many bcrypt checks ran.
    pub fn bcrypt_runs(&self) -> u64 {
        self.bcrypt_runs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the request's `Authorization` header holds a valid user and password.
    pub async fn allows(self: &Arc<Self>, headers: &HeaderMap) -> bool {
        let Some((user, password)) = credentials(headers) else {
            return false;
        };
        let message = [user.as_bytes(), b"\0", password.as_bytes()].concat();
        if self.cached(&user, &message) {
            return true;
        }
        // One bcrypt at a time; the semaphore is never closed.
        let Ok(_slot) = self.bcrypt_slot.acquire().await else {
            return false;
        };
        // A concurrent request with the same credentials may have filled the cache meanwhile.
        if self.cached(&user, &message) {
            return true;
        }
        let auth = Arc::clone(self);
        let check_user = user.clone();
        let verified = tokio::task::spawn_blocking(move || {
            auth.bcrypt_runs
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match auth.users.get(&check_user) {
                Some(hash) => bcrypt::verify(&password, hash).unwrap_or(false),
                None => {
                    let _ = bcrypt::verify(&password, &auth.dummy_hash);
                    false
                }
            }
        })
        .await
        .unwrap_or(false);
        if verified {
            let tag = ring::hmac::sign(&self.key, &message);
            self.accepted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(user, tag);
        }
        verified
    }

    /// Whether `user`'s last accepted password is the one in `message` (constant time).
    fn cached(&self, user: &str, message: &[u8]) -> bool {
        let accepted = self.accepted.lock().unwrap_or_else(|e| e.into_inner());
        match accepted.get(user) {
            Some(tag) => ring::hmac::verify(&self.key, message, tag.as_ref()).is_ok(),
            None => false,
        }
    }
}

/// The cost of a bcrypt hash, or why it is not one.
fn check_hash(hash: &str) -> Result<u32, String> {
    let parts: bcrypt::HashParts = hash
        .parse()
        .map_err(|e: bcrypt::BcryptError| e.to_string())?;
    let cost = parts.get_cost();
    if !(4..=31).contains(&cost) {
        return Err(format!("cost {cost} is outside 4..=31"));
    }
    let body = hash.rsplit('$').next().unwrap_or_default();
    if !body
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/')
    {
        return Err("salt and hash must be bcrypt base64 (./A-Za-z0-9)".into());
    }
    Ok(cost)
}

/// The user and password of an `Authorization: Basic` header.
fn credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// What the middleware needs.
#[derive(Clone)]
struct Guard {
    auth: Option<Arc<BasicAuth>>,
    headers: Arc<Vec<(HeaderName, HeaderValue)>>,
}

impl WebConfig {
    /// `router` behind basic auth and with the extra headers (unchanged when neither is set).
    pub fn apply(&self, router: Router) -> Router {
        if self.auth.is_none() && self.headers.is_empty() {
            return router;
        }
        let guard = Guard {
            auth: self.auth.clone(),
            headers: Arc::new(self.headers.clone()),
        };
        router.layer(axum::middleware::from_fn_with_state(guard, guard_request))
    }
}

async fn guard_request(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let allowed = match &guard.auth {
        Some(auth) => auth.allows(request.headers()).await,
        None => true,
    };
    let mut response = if allowed {
        next.run(request).await
    } else {
        tracing::debug!(path = %request.uri().path(), "basic auth: request refused");
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"rdmad\"")],
            "Unauthorized\n",
        )
            .into_response()
    };
    for (name, value) in guard.headers.iter() {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        format!("{:#}", parse(text, Path::new("/nonexistent")).unwrap_err())
    }

    #[test]
    fn empty_file_and_empty_sections_mean_nothing() {
        for text in [
            "",
            "# only a comment\n",
            "tls_server_config:\nbasic_auth_users:\n",
            "basic_auth_users: {}\n",
            "http_server_config:\n  http2: false\n",
        ] {
            let c = parse(text, Path::new(".")).unwrap_or_else(|e| panic!("{text:?}: {e:#}"));
            assert!(
                c.tls.is_none() && c.auth.is_none() && c.headers.is_empty(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn unknown_keys_are_errors_naming_the_key() {
        let e = err("tls_server_config:\n  cert_fiel: a.pem\n");
        assert!(e.contains("unknown field `cert_fiel`"), "{e}");
        assert!(e.contains("tls_server_config"), "{e}");
        let e = err("basic_auth:\n  a: b\n");
        assert!(e.contains("unknown field `basic_auth`"), "{e}");
        let e = err("http_server_config:\n  header: {}\n");
        assert!(e.contains("unknown field `header`"), "{e}");
        let e = err("tls_server_config: [\n");
        assert!(!e.is_empty());
    }

    #[test]
    fn tls_settings_are_checked() {
        let e = err("tls_server_config:\n  cert_file: a.pem\n");
        assert!(e.contains("tls_server_config.key_file: missing"), "{e}");
        let e = err("tls_server_config:\n  key_file: a.key\n");
        assert!(e.contains("tls_server_config.cert_file: missing"), "{e}");
        let e = err("tls_server_config:\n  cert_file: a.pem\n  key_file: a.key\n");
        assert!(
            e.contains("tls_server_config.cert_file: cannot read /nonexistent/a.pem"),
            "{e}"
        );
        let e = err("tls_server_config:\n  min_version: TLS11\n");
        assert!(
            e.contains("tls_server_config.min_version: TLS11 is not supported"),
            "{e}"
        );
        let e = err("tls_server_config:\n  max_version: TLS10\n");
        assert!(e.contains("max_version: TLS10 is not supported"), "{e}");
        let e = err("tls_server_config:\n  min_version: TLS13\n  max_version: TLS12\n");
        assert!(e.contains("above max_version"), "{e}");
        let e = err("tls_server_config:\n  min_version: SSL3\n");
        assert!(e.contains("unknown TLS version \"SSL3\""), "{e}");
        let e = err("tls_server_config:\n  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n");
        assert!(
            e.contains("cipher_suites: TLS_RSA_WITH_AES_128_CBC_SHA is not supported by rustls"),
            "{e}"
        );
        assert!(e.contains("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"), "{e}");
        let e = err("tls_server_config:\n  curve_preferences: [CurveP521]\n");
        assert!(
            e.contains("curve_preferences: CurveP521 is not supported"),
            "{e}"
        );
        let e = err("tls_server_config:\n  client_allowed_sans: [a]\n");
        assert!(e.contains("client_allowed_sans: not supported"), "{e}");
        let e = err("rate_limit:\n  burst: 1\n");
        assert!(e.contains("rate_limit: not supported"), "{e}");
    }

    #[test]
    fn cipher_suites_and_curves_map_to_rustls() {
        let provider = rustls::crypto::ring::default_provider();
        let names = [
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_string(),
            "TLS_AES_128_GCM_SHA256".to_string(),
        ];
        let suites = cipher_suites(&provider, &names).unwrap();
        let tls12: Vec<String> = suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS12)
            .map(|s| format!("{:?}", s.suite()))
            .collect();
        assert_eq!(tls12, ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]);
        assert_eq!(suites.len(), 4, "the three TLS 1.3 suites stay");
        let groups = curves(&["CurveP256".into(), "X25519".into()]).unwrap();
        assert_eq!(
            groups.iter().map(|g| g.name()).collect::<Vec<_>>(),
            [rustls::NamedGroup::secp256r1, rustls::NamedGroup::X25519]
        );
    }

    #[test]
    fn headers_are_restricted_as_in_exporter_toolkit() {
        let c = parse(
            "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n    \
             Strict-Transport-Security: max-age=31536000\n",
            Path::new("."),
        )
        .unwrap();
        assert_eq!(c.headers.len(), 2);
        assert!(c
            .headers
            .iter()
            .any(|(n, v)| n == "x-content-type-options" && v == "nosniff"));
        let e = err("http_server_config:\n  headers:\n    Content-Type: foo\n");
        assert!(
            e.contains("http_server_config.headers.Content-Type: this header cannot be set"),
            "{e}"
        );
        let e = err("http_server_config:\n  headers:\n    X-Frame-Options: allow\n");
        assert!(
            e.contains("headers.X-Frame-Options: \"allow\" is not one of"),
            "{e}"
        );
    }

    #[test]
    fn bcrypt_hashes_are_checked_and_never_echoed() {
        let bad = "$2y$10$tooshort";
        let e = err(&format!("basic_auth_users:\n  alice: '{bad}'\n"));
        assert!(
            e.contains("basic_auth_users.alice: not a bcrypt hash"),
            "{e}"
        );
        assert!(!e.contains("tooshort"), "{e}");
        let e = err("basic_auth_users:\n  alice: plaintext\n");
        assert!(
            e.contains("basic_auth_users.alice: not a bcrypt hash"),
            "{e}"
        );
        assert!(!e.contains("plaintext"), "{e}");
        let e = err("basic_auth_users:\n  'a:b': '$2y$04$aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'\n");
        assert!(e.contains("cannot contain ':'"), "{e}");
    }

    fn basic(user: &str, password: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {encoded}")).unwrap(),
        );
        headers
    }

    #[tokio::test]
    async fn basic_auth_checks_and_caches_successes_only() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let auth =
            Arc::new(BasicAuth::new(BTreeMap::from([("prometheus".to_string(), hash)])).unwrap());
        assert!(!auth.allows(&HeaderMap::new()).await, "no header");
        assert_eq!(auth.bcrypt_runs(), 0, "no header, no bcrypt");
        let mut bearer = HeaderMap::new();
        bearer.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        assert!(!auth.allows(&bearer).await, "another scheme");

        assert!(auth.allows(&basic("prometheus", "s3cret")).await);
        assert_eq!(auth.bcrypt_runs(), 1);
        for _ in 0..5 {
            assert!(auth.allows(&basic("prometheus", "s3cret")).await);
        }
        assert_eq!(auth.bcrypt_runs(), 1, "later checks hit the cache");

        assert!(!auth.allows(&basic("prometheus", "wrong")).await);
        assert!(!auth.allows(&basic("prometheus", "wrong")).await);
        assert_eq!(auth.bcrypt_runs(), 3, "failures are not cached");
        assert!(
            !auth.allows(&basic("mallory", "s3cret")).await,
            "unknown user"
        );
        assert_eq!(auth.bcrypt_runs(), 4, "an unknown user costs a bcrypt too");
        assert!(
            !auth.allows(&basic("prometheus", "s3cret\0")).await,
            "a cached password only matches exactly"
        );
        assert!(auth.allows(&basic("prometheus", "s3cret")).await);
        assert_eq!(auth.bcrypt_runs(), 5);
    }

    #[tokio::test]
    async fn concurrent_scrapes_share_one_bcrypt() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let auth = Arc::new(BasicAuth::new(BTreeMap::from([("u".to_string(), hash)])).unwrap());
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let auth = Arc::clone(&auth);
                tokio::spawn(async move { auth.allows(&basic("u", "pw")).await })
            })
            .collect();
        for task in tasks {
            assert!(task.await.unwrap());
        }
        assert_eq!(auth.bcrypt_runs(), 1, "the others waited and hit the cache");
    }
}
