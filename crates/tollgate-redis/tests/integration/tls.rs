//! `rediss://`: TLS to a server with a private certificate authority.

use std::path::Path;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tollgate::{Limiter, Strategy};
use tollgate_redis::redis::TlsCertificates;
use tollgate_redis::{ConnectErrorKind, RedisBackend};
use tollgate_test_support::redis::RedisServer;

/// Writes a CA and a server certificate for 127.0.0.1 into `dir`; returns
/// the CA certificate in PEM.
fn make_certificates(dir: &Path) -> String {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.distinguished_name.push(DnType::CommonName, "tollgate test CA");
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);

    let server_key = KeyPair::generate().unwrap();
    let mut server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    server.distinguished_name.push(DnType::CommonName, "127.0.0.1");
    let server_pem = server.signed_by(&server_key, &issuer).unwrap().pem();

    std::fs::write(dir.join("ca.crt"), &ca_pem).unwrap();
    std::fs::write(dir.join("server.crt"), server_pem).unwrap();
    std::fs::write(dir.join("server.key"), server_key.serialize_pem()).unwrap();
    ca_pem
}

fn tls_server(dir: &Path) -> RedisServer {
    let file = |name: &str| dir.join(name).display().to_string();
    RedisServer::start_tls(&[
        "--tls-cert-file",
        &file("server.crt"),
        "--tls-key-file",
        &file("server.key"),
        "--tls-ca-cert-file",
        &file("ca.crt"),
        "--tls-auth-clients",
        "no",
    ])
}

#[tokio::test]
async fn rediss_urls_connect_over_tls_with_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca_pem = make_certificates(dir.path());
    let server = tls_server(dir.path());
    let url = format!("rediss://127.0.0.1:{}", server.port());

    let backend = RedisBackend::builder()
        .tls_certificates(TlsCertificates {
            client_tls: None,
            root_cert: Some(ca_pem.into_bytes()),
        })
        .connect(&url)
        .await
        .unwrap();
    let limiter = Limiter::builder()
        .backend(backend)
        .strategy(Strategy::SlidingWindow)
        .limit(2)
        .window(Duration::from_secs(60))
        .build()
        .unwrap();
    assert_eq!(limiter.allow("k").await.unwrap().remaining, 1);
    assert_eq!(limiter.allow("k").await.unwrap().remaining, 0);
    assert!(!limiter.allow("k").await.unwrap().allowed);

    // Without the CA, the system trust store does not know the server.
    let err = RedisBackend::connect(&url).await.unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::Tls, "{err}");
    assert!(err.to_string().contains("certificate"), "{err}");

    // Plain Redis to a TLS port.
    let err = RedisBackend::connect(&format!("redis://127.0.0.1:{}", server.port()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::NotRedis, "{err}");
    assert!(err.to_string().contains("rediss://"), "{err}");
}

#[tokio::test]
async fn tls_to_a_plain_port_is_named() {
    let server = RedisServer::start();
    // A plain server never answers a TLS handshake: the timeout names TLS.
    let err = RedisBackend::builder()
        .connect_timeout(Duration::from_millis(300))
        .connect(&format!("rediss://127.0.0.1:{}", server.port()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::Timeout, "{err}");
    assert!(err.to_string().contains("serve TLS"), "{err}");
}
