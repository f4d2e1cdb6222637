//! TLS to the server as libpq's connection parameters ask for it:
//! `sslmode` (`disable`, `prefer`, the default, `require`, `verify-ca`,
//! `verify-full`) and `sslrootcert` (a PEM file of the certificates that
//! may sign the server's, or `system` for the system's roots).
//!
//! As in libpq, `prefer` and `require` encrypt without checking who
//! answers (unless `sslrootcert` is given: then `require` checks the chain
//! as `verify-ca` does); `verify-ca` checks that a trusted authority signed
//! the server's certificate; `verify-full` also that it names the host.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::PostgresError;

/// What `sslmode` asks of the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// The TLS settings of a connection URL.
#[derive(Clone, Debug)]
pub(crate) struct Tls {
    mode: Mode,
    root: Option<String>,
}

/// Takes `sslmode` and `sslrootcert` out of `url` (a URL's query or a
/// key-value string), which the client does not read in full, and returns
/// the rest with the settings.
pub(crate) fn split(url: &str) -> Result<(String, Tls), PostgresError> {
    let mut tls = Tls {
        mode: Mode::Prefer,
        root: None,
    };
    let mut take = |key: &str, value: &str| -> Result<bool, PostgresError> {
        match key {
            "sslmode" => tls.mode = mode_of(value)?,
            "sslrootcert" => tls.root = Some(value.to_owned()),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let rest = if url.contains("://") {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if !take(key, &percent_decoded(value))? {
                kept.push(pair);
            }
        }
        if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        }
    } else {
        let mut kept = Vec::new();
        for word in url.split_whitespace() {
            let (key, value) = word.split_once('=').unwrap_or((word, ""));
            if !take(key.trim(), value.trim_matches('\''))? {
                kept.push(word);
            }
        }
        kept.join(" ")
    };
    Ok((rest, tls))
}

/// `sslmode`'s value, refused when libpq would not know it.
fn mode_of(value: &str) -> Result<Mode, PostgresError> {
    Ok(match value {
        "disable" => Mode::Disable,
        "allow" | "prefer" => Mode::Prefer,
        "require" => Mode::Require,
        "verify-ca" => Mode::VerifyCa,
        "verify-full" => Mode::VerifyFull,
        other => {
            return Err(PostgresError::new(
                "postgres_url",
                format!(
                    "sslmode={other} is not a TLS mode: give disable, prefer, require, verify-ca or \
                     verify-full"
                ),
            ))
        }
    })
}

/// `%XX` escapes of a URL's value decoded (a path may carry them).
fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Tls {
    /// The mode the client itself takes: TLS off, tried, or required (the
    /// checks of `verify-ca` and `verify-full` are the connector's).
    pub(crate) fn ssl_mode(&self) -> SslMode {
        match self.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            _ => SslMode::Require,
        }
    }

    /// The connector that makes and checks TLS sessions as the mode asks.
    pub(crate) fn connector(&self) -> Result<MakeRustlsConnect, PostgresError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = match (&self.root, self.mode) {
            (None, Mode::VerifyCa | Mode::VerifyFull) => {
                return Err(PostgresError::new(
                    "postgres_url",
                    "sslmode=verify-ca and verify-full check the server's certificate against \
                     sslrootcert: add sslrootcert=/path/to/ca.pem (or sslrootcert=system)",
                ))
            }
            (None, _) => None,
            (Some(root), _) => Some(
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots(root)?), provider.clone())
                    .build()
                    .map_err(|e| PostgresError::new("postgres_url", format!("sslrootcert={root}: {e}")))?,
            ),
        };
        let verifier = Arc::new(Checks {
            provider: provider.clone(),
            chain,
            name: self.mode == Mode::VerifyFull,
        });
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| PostgresError::new("postgres_url", format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

/// The certificates of `sslrootcert`: a PEM file, or the system's roots.
fn roots(root: &str) -> Result<RootCertStore, PostgresError> {
    let bad = |what: String| PostgresError::new("postgres_url", format!("sslrootcert={root}: {what}"));
    let mut store = RootCertStore::empty();
    let certificates: Vec<CertificateDer<'static>> = if root == "system" {
        let found = rustls_native_certs::load_native_certs();
        found.certs
    } else {
        CertificateDer::pem_file_iter(root)
            .map_err(|e| bad(format!("cannot read it as a PEM file: {e}")))?
            .collect::<Result<_, _>>()
            .map_err(|e| bad(format!("not a PEM certificate: {e}")))?
    };
    let (added, _) = store.add_parsable_certificates(certificates);
    if added == 0 {
        return Err(bad("holds no certificate".to_owned()));
    }
    Ok(store)
}

/// What a connection checks of the server's certificate: nothing but the
/// handshake's signatures without `sslrootcert` (`prefer` and `require`,
/// as libpq); the chain to `sslrootcert` with it (`verify-ca`, and
/// `require` given a root); and the host's name too (`verify-full`).
#[derive(Debug)]
struct Checks {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
    name: bool,
}

impl ServerCertVerifier for Checks {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
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
