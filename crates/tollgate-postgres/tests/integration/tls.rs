//! TLS as the URL's `sslmode` and `sslrootcert` ask, against the local
//! server's own certificate (Debian's, self-signed, naming the machine and
//! not 127.0.0.1).

use std::time::Duration;

use tollgate::{Limiter, Policy, Strategy};
use tollgate_postgres::{PostgresBackend, PostgresError};

use crate::support::TestDatabase;

/// The server's certificate file, which signs itself; the test fails if
/// the server does not offer TLS.
async fn server_certificate(db: &TestDatabase) -> String {
    let client = db.client().await;
    let ssl: String = client.query_one("SHOW ssl", &[]).await.unwrap().get(0);
    assert_eq!(ssl, "on", "the test server must offer TLS (ssl = on)");
    client.query_one("SHOW ssl_cert_file", &[]).await.unwrap().get(0)
}

/// Connects with `params` added to the database's URL, makes one decision,
/// and says whether the backend's connection is encrypted.
async fn encrypted(db: &TestDatabase, params: &str) -> Result<bool, PostgresError> {
    let backend = PostgresBackend::builder(format!("{}?{params}", db.url()))
        .pool_size(1)
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    let limiter = Limiter::builder()
        .backend(backend)
        .policy(Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(60)).unwrap())
        .build()
        .unwrap();
    assert!(limiter.allow("k").await.unwrap().allowed);
    let name = db.url().rsplit('/').next().unwrap().to_owned();
    let row = db
        .client()
        .await
        .query_one(
            "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'tollgate' AND a.datname = $1",
            &[&name],
        )
        .await
        .unwrap();
    Ok(row.get(0))
}

#[tokio::test]
async fn each_sslmode_encrypts_and_checks_as_libpq_does() {
    let db = TestDatabase::create().await;
    let own = server_certificate(&db).await;
    assert!(!encrypted(&db, "sslmode=disable").await.unwrap());
    assert!(encrypted(&db, "sslmode=require").await.unwrap());
    assert!(encrypted(&db, "application_name=x&sslmode=prefer").await.is_ok());
    // The server's own certificate signs it, so the chain holds...
    assert!(encrypted(&db, &format!("sslmode=verify-ca&sslrootcert={own}"))
        .await
        .unwrap());
    // ...but it does not name 127.0.0.1.
    let err = encrypted(&db, &format!("sslmode=verify-full&sslrootcert={own}"))
        .await
        .unwrap_err();
    assert_eq!(err.setting(), "postgres_url", "{err}");
    assert!(err.message().contains("TLS handshake failed"), "{err}");
    // It names localhost: by that name, verify-full holds.
    let localhost = db.named_host("localhost");
    let backend = PostgresBackend::builder(format!("{localhost}?sslmode=verify-full&sslrootcert={own}"));
    backend.pool_size(1).connect().await.unwrap();

    let stranger = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), stranger.cert.pem()).unwrap();
    let path = file.path().display();
    let err = encrypted(&db, &format!("sslmode=verify-ca&sslrootcert={path}"))
        .await
        .unwrap_err();
    assert_eq!(err.setting(), "postgres_url", "{err}");
    // With a root, require checks the chain as verify-ca does.
    assert!(encrypted(&db, &format!("sslmode=require&sslrootcert={path}"))
        .await
        .is_err());
}

#[tokio::test]
async fn tls_settings_that_cannot_work_are_named() {
    let db = TestDatabase::create().await;
    let err = encrypted(&db, "sslmode=verify-full").await.unwrap_err();
    assert!(err.message().contains("sslrootcert"), "{err}");
    let err = encrypted(&db, "sslmode=sometimes").await.unwrap_err();
    assert!(err.message().contains("sslmode=sometimes"), "{err}");
    let err = encrypted(&db, "sslmode=verify-ca&sslrootcert=/no/such/ca.pem")
        .await
        .unwrap_err();
    assert!(err.message().contains("/no/such/ca.pem"), "{err}");
    // The key-value form reads them too.
    let name = db.url().rsplit('/').next().unwrap().to_owned();
    let backend = PostgresBackend::builder(format!(
        "host=127.0.0.1 user=postgres dbname={name} sslmode=verify-full"
    ))
    .connect()
    .await
    .unwrap_err();
    assert!(backend.message().contains("sslrootcert"), "{backend}");
}
