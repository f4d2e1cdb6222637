//! A backend that connects in the background: it starts without its
//! database, fails its decisions as unavailable (the fail policy decides),
//! and installs the schema with the first decision that reaches it.

use std::time::Duration;

use tollgate::backend::BackendErrorKind;
use tollgate::{Error, FailPolicy, Limiter, Policy, Strategy};
use tollgate_postgres::PostgresBackend;

use crate::support::TestDatabase;

fn policy() -> Policy {
    Policy::new(Strategy::FixedWindow, 2, Duration::from_secs(60)).unwrap()
}

#[tokio::test]
async fn without_its_database_it_starts_and_the_fail_policy_decides() {
    // Nothing listens on port 1.
    let backend = PostgresBackend::builder("postgres://postgres@127.0.0.1:1/none")
        .connect_timeout(Duration::from_millis(300))
        .connect_in_background()
        .unwrap();
    assert!(!backend.is_installed());
    let closed = Limiter::builder()
        .backend(backend.clone())
        .policy(policy())
        .build()
        .unwrap();
    match closed.allow("k").await {
        Err(Error::Backend(err)) => assert_eq!(err.kind(), BackendErrorKind::Unavailable, "{err}"),
        other => panic!("expected an unavailable backend, got {other:?}"),
    }
    let open = Limiter::builder()
        .backend(backend)
        .policy(policy())
        .fail_policy(FailPolicy::Open)
        .build()
        .unwrap();
    let decision = open.allow("k").await.unwrap();
    assert!(decision.allowed && decision.fail_open);
}

#[tokio::test]
async fn the_first_decision_that_reaches_the_database_installs_the_schema() {
    let db = TestDatabase::create().await;
    let backend = PostgresBackend::builder(db.url())
        .connect_in_background()
        .unwrap();
    assert!(!backend.is_installed());
    let limiter = Limiter::builder()
        .backend(backend.clone())
        .policy(policy())
        .build()
        .unwrap();
    assert!(limiter.allow("k").await.unwrap().allowed);
    assert!(backend.is_installed());
    assert!(limiter.allow("k").await.unwrap().allowed);
    assert!(!limiter.allow("k").await.unwrap().allowed, "the limit of 2 holds");
}
