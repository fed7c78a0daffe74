//! `tls_server_config`: the rustls server configuration (versions, cipher suites, curves,
//! client certificate verification), with errors that name the key.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use super::reload::{CertSource, Pem, ReloadingCert};
use super::schema::{file_path, nonempty, TlsFile};
use super::verifier::AnyClientCert;

/// The rustls server configuration, or `None` when the section sets no TLS key (as
/// exporter-toolkit's `IsEnabled`). Errors start with the key they are about.
pub(super) fn tls_config(tls: TlsFile, dir: &Path) -> Result<Option<Arc<rustls::ServerConfig>>> {
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
pub(super) enum TlsVersion {
    Tls10,
    Tls11,
    Tls12,
    Tls13,
}

pub(super) fn versions(tls: &TlsFile) -> Result<(TlsVersion, TlsVersion)> {
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
pub(super) fn cipher_suites(
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

pub(super) fn curves(
    names: &[String],
) -> Result<Vec<&'static dyn rustls::crypto::SupportedKxGroup>> {
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

pub(super) fn roots(pem: &[u8], key: &str, what: &str) -> Result<RootCertStore> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
