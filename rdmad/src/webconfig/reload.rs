//! The server certificate and key, read again at a handshake when their files change
//! (certificate rotation without a restart; a rotated pair that does not load is logged and
//! the previous one kept).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::{anyhow, bail, Context, Result};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// A PEM object: a file (read again when it changes) or inline text.
#[derive(Debug, Clone)]
pub(super) enum Pem {
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
pub(super) struct CertSource {
    pub(super) cert: Pem,
    pub(super) key: Pem,
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
pub(super) type Stamp = (Option<SystemTime>, Option<SystemTime>);

/// The server certificate, read again at a handshake when a file's modification time changed.
#[derive(Debug)]
pub(super) struct ReloadingCert {
    source: CertSource,
    provider: Arc<CryptoProvider>,
    /// The stamp of the files last loaded (or tried), and the certificate in use.
    current: Mutex<(Stamp, Arc<CertifiedKey>)>,
}

impl ReloadingCert {
    pub(super) fn new(source: CertSource, provider: Arc<CryptoProvider>) -> Result<ReloadingCert> {
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
