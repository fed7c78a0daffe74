//! Fetching a Prometheus `/metrics` page (rdmad's), over HTTP or HTTPS with the client side
//! of rdmad's `--web.config.file`: a CA file to verify the server with, and basic auth.
//! Feature `scrape` (ureq with rustls on ring: no C toolchain beyond what rdmad needs).
//!
//! The settings are named after Prometheus' own scrape configuration (`tls_config.ca_file`,
//! `basic_auth.username`, `basic_auth.password_file`); the password file is read again on
//! every fetch, so it can be rotated, and its surrounding whitespace is not part of the
//! password. Without a CA file, HTTPS servers are verified against the Mozilla roots. No
//! redirect is followed. [`Scraper::fetch`] returns the body of a 200 answer; anything else
//! is an error that says what happened (status, TLS, connection), never a panic.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};

/// How to reach a `/metrics` page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrapeConfig {
    /// `http://host:port[/path]` or `https://...`; the path defaults to `/metrics`.
    pub url: String,
    /// PEM file of the CA(s) that signed the server's certificate (HTTPS only).
    pub ca_file: Option<PathBuf>,
    /// Basic auth user.
    pub username: Option<String>,
    /// File holding the basic auth password (needs `username`).
    pub password_file: Option<PathBuf>,
    /// Connect, send and read, all together.
    pub timeout: Duration,
    /// The most of a body read.
    pub limit: u64,
}

impl ScrapeConfig {
    /// A plain configuration for `url`: no TLS settings, no auth, 2 s, 8 MiB.
    pub fn new(url: impl Into<String>) -> ScrapeConfig {
        ScrapeConfig {
            url: url.into(),
            ca_file: None,
            username: None,
            password_file: None,
            timeout: Duration::from_secs(2),
            limit: 8 << 20,
        }
    }
}

/// Why a scrape could not be set up or did not return a page.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScrapeError {
    /// The URL is not one we can fetch.
    #[error("{url}: {why}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A settings file (CA, password) could not be read or holds nothing usable.
    #[error("{path}: {why}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A password file without a user name.
    #[error("a password file needs a user name")]
    PasswordWithoutUser,
    /// The request failed (connection, TLS, timeout, a body over the limit).
    #[error("GET {url}: {source}")]
    Request {
        /// The URL fetched.
        url: String,
        /// What ureq said.
        source: Box<ureq::Error>,
    },
    /// The server answered with another status than 200.
    #[error("GET {url}: HTTP {status}")]
    Status {
        /// The URL fetched.
        url: String,
        /// The status code.
        status: u16,
    },
}

/// A configured client for one `/metrics` URL.
#[derive(Clone)]
pub struct Scraper {
    agent: ureq::Agent,
    url: String,
    username: Option<String>,
    password_file: Option<PathBuf>,
    limit: u64,
}

impl std::fmt::Debug for Scraper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scraper")
            .field("url", &self.url)
            .field("username", &self.username)
            .field("password_file", &self.password_file)
            .finish_non_exhaustive()
    }
}

/// `url` with `/metrics` as the path when it has none; checks the scheme and that there is
/// a host.
pub fn metrics_url(url: &str) -> Result<String, ScrapeError> {
    let bad = |why| ScrapeError::Url {
        url: url.to_owned(),
        why,
    };
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or(bad("only http:// and https:// URLs are supported"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.is_empty() || authority.starts_with(':') {
        return Err(bad("no host"));
    }
    if authority.contains('@') {
        return Err(bad("put the user in --rdmad.username, not in the URL"));
    }
    let port = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once("]:").map(|(_, p)| p),
        None => authority.rsplit_once(':').map(|(_, p)| p),
    };
    if let Some(port) = port {
        port.parse::<u16>().map_err(|_| bad("bad port"))?;
    }
    let full = if path.is_empty() || path == "/" {
        format!("{}{authority}/metrics", &url[..url.len() - rest.len()])
    } else {
        url.to_owned()
    };
    full.parse::<ureq::http::Uri>()
        .map_err(|_| bad("not a valid URL"))?;
    Ok(full)
}

fn read_file(path: &Path) -> Result<Vec<u8>, ScrapeError> {
    std::fs::read(path).map_err(|e| ScrapeError::File {
        path: path.to_owned(),
        why: e.to_string(),
    })
}

/// The certificates of a PEM file; an error when it has none.
fn ca_certificates(path: &Path) -> Result<Vec<Certificate<'static>>, ScrapeError> {
    let pem = read_file(path)?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(cert)) => certs.push(cert),
            Ok(_) => {}
            Err(e) => {
                return Err(ScrapeError::File {
                    path: path.to_owned(),
                    why: format!("not PEM: {e}"),
                })
            }
        }
    }
    if certs.is_empty() {
        return Err(ScrapeError::File {
            path: path.to_owned(),
            why: "no certificate in it".into(),
        });
    }
    Ok(certs)
}

impl Scraper {
    /// Check `config` (URL, CA file, password file) and build the client.
    pub fn new(config: &ScrapeConfig) -> Result<Scraper, ScrapeError> {
        let url = metrics_url(&config.url)?;
        if config.password_file.is_some() && config.username.is_none() {
            return Err(ScrapeError::PasswordWithoutUser);
        }
        let mut tls = TlsConfig::builder();
        if let Some(path) = &config.ca_file {
            tls = tls.root_certs(RootCerts::Specific(Arc::new(ca_certificates(path)?)));
        }
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .tls_config(tls.build())
            .build()
            .new_agent();
        let scraper = Scraper {
            agent,
            url,
            username: config.username.clone(),
            password_file: config.password_file.clone(),
            limit: config.limit,
        };
        // Unreadable now is a setup error, not a failure of every fetch.
        scraper.authorization()?;
        Ok(scraper)
    }

    /// The URL fetched.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The `Authorization` header value, reading the password file.
    fn authorization(&self) -> Result<Option<String>, ScrapeError> {
        let Some(user) = &self.username else {
            return Ok(None);
        };
        let password = match &self.password_file {
            Some(path) => {
                let bytes = read_file(path)?;
                String::from_utf8(bytes)
                    .map_err(|_| ScrapeError::File {
                        path: path.clone(),
                        why: "not UTF-8".into(),
                    })?
                    .trim()
                    .to_owned()
            }
            None => String::new(),
        };
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        Ok(Some(format!("Basic {token}")))
    }

    /// GET the page: its body on a 200 answer.
    pub fn fetch(&self) -> Result<String, ScrapeError> {
        let mut get = self.agent.get(&self.url).header("Accept", "text/plain");
        if let Some(auth) = self.authorization()? {
            get = get.header("Authorization", auth);
        }
        let failed = |e: ureq::Error| ScrapeError::Request {
            url: self.url.clone(),
            source: Box::new(e),
        };
        let mut response = get.call().map_err(failed)?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(ScrapeError::Status {
                url: self.url.clone(),
                status,
            });
        }
        response
            .body_mut()
            .with_config()
            .limit(self.limit)
            .read_to_string()
            .map_err(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_the_metrics_path_and_bad_ones_are_refused() {
        assert_eq!(
            metrics_url("http://127.0.0.1:9736").unwrap(),
            "http://127.0.0.1:9736/metrics"
        );
        assert_eq!(
            metrics_url("https://lab:9736/").unwrap(),
            "https://lab:9736/metrics"
        );
        assert_eq!(
            metrics_url("http://lab/custom").unwrap(),
            "http://lab/custom"
        );
        assert_eq!(
            metrics_url("http://[::1]:9").unwrap(),
            "http://[::1]:9/metrics"
        );
        for bad in [
            "ftp://x",
            "http://",
            "http:///metrics",
            "http://x:port",
            "http://:9736",
            "https://user:pw@x",
        ] {
            assert!(metrics_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn settings_files_are_checked_when_the_client_is_built() {
        let mut config = ScrapeConfig::new("https://127.0.0.1:1");
        config.ca_file = Some("/nonexistent/ca.pem".into());
        let e = Scraper::new(&config).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");

        let dir = std::env::temp_dir().join(format!("rdmakit-scrape.{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("ca.pem");
        std::fs::write(&not_pem, "hello\n").unwrap();
        config.ca_file = Some(not_pem);
        let e = Scraper::new(&config).unwrap_err();
        assert!(e.to_string().contains("no certificate"), "{e}");

        let mut config = ScrapeConfig::new("http://127.0.0.1:1");
        config.password_file = Some(dir.join("password"));
        assert!(matches!(
            Scraper::new(&config),
            Err(ScrapeError::PasswordWithoutUser)
        ));
        config.username = Some("prometheus".into());
        let e = Scraper::new(&config).unwrap_err();
        assert!(e.to_string().contains("password"), "{e}");
        std::fs::write(dir.join("password"), "s3cret\n").unwrap();
        let scraper = Scraper::new(&config).unwrap();
        assert_eq!(
            scraper.authorization().unwrap().as_deref(),
            Some("Basic cHJvbWV0aGV1czpzM2NyZXQ="),
            "prometheus:s3cret, the newline is not part of the password"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
