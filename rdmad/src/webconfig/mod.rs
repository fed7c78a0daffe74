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
//!
//! One file per concern: `schema` (the file's keys and plain values), `tls` (the rustls
//! server configuration), `reload` (the certificate read again when its files change),
//! `verifier` (client certificates without a CA check), `auth` (bcrypt users and the cache of
//! accepted passwords), `middleware` (auth and extra headers on the router); this file loads
//! and checks the whole.

mod auth;
mod middleware;
mod reload;
mod schema;
mod tls;
mod verifier;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use axum::http::{HeaderName, HeaderValue};

pub use auth::BasicAuth;
use schema::{extra_header, FileConfig};
use tls::tls_config;

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
            .field("auth_users", &self.auth.as_ref().map_or(0, |a| a.users()))
            .field("headers", &self.headers)
            .finish()
    }
}

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
}
