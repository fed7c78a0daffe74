//! The web configuration file's schema, as exporter-toolkit's `Config` (strict: unknown keys
//! are errors), and the checks of its plain values (extra headers, paths).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use axum::http::{HeaderName, HeaderValue};
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping of tls_server_config, http_server_config, basic_auth_users"
)]
pub(super) struct FileConfig {
    pub(super) tls_server_config: Option<TlsFile>,
    pub(super) http_server_config: Option<HttpFile>,
    pub(super) basic_auth_users: Option<BTreeMap<String, String>>,
    pub(super) rate_limit: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping (cert_file, key_file, ...)"
)]
pub(super) struct TlsFile {
    pub(super) cert_file: Option<String>,
    pub(super) key_file: Option<String>,
    pub(super) cert: Option<String>,
    pub(super) key: Option<String>,
    pub(super) client_ca_file: Option<String>,
    pub(super) client_ca: Option<String>,
    pub(super) client_auth_type: Option<String>,
    pub(super) cipher_suites: Option<Vec<String>>,
    pub(super) curve_preferences: Option<Vec<String>>,
    pub(super) min_version: Option<String>,
    pub(super) max_version: Option<String>,
    pub(super) prefer_server_cipher_suites: Option<bool>,
    pub(super) client_allowed_sans: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a mapping (http2, headers)")]
pub(super) struct HttpFile {
    pub(super) http2: Option<bool>,
    pub(super) headers: Option<BTreeMap<String, String>>,
}

/// The headers exporter-toolkit lets a web configuration set, with their allowed values (empty:
/// any value).
pub(super) const EXTRA_HEADERS: &[(&str, &[&str])] = &[
    ("Strict-Transport-Security", &[]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-XSS-Protection", &[]),
    ("Content-Security-Policy", &[]),
];

pub(super) fn extra_header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue)> {
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

pub(super) fn lowercase(name: &'static str) -> &'static str {
    match name {
        "Strict-Transport-Security" => "strict-transport-security",
        "X-Content-Type-Options" => "x-content-type-options",
        "X-Frame-Options" => "x-frame-options",
        "X-XSS-Protection" => "x-xss-protection",
        _ => "content-security-policy",
    }
}

/// A path of the file, relative to its directory; `""` counts as unset (as in Go).
pub(super) fn file_path(dir: &Path, value: &Option<String>) -> Option<PathBuf> {
    value
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(|s| dir.join(s))
}

pub(super) fn nonempty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|s| !s.is_empty())
}
