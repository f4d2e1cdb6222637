//! Files that name PostgreSQL: limiters share state through a database of
//! the test's own, and a database that cannot be used is an error naming
//! the field to change and what to do.

use tollgate::Error;
use tollgate_config::{Format, PolicyFile};
use tollgate_test_support::postgres_databases::TestDatabase;
use tollgate_test_support::redis::free_port;

fn file(text: &str) -> PolicyFile {
    PolicyFile::from_str(text, Format::Yaml, "policies.yaml").unwrap_or_else(|err| panic!("{err}"))
}

/// The file's limiter fails to build: the field and the message of its
/// configuration error.
async fn refused(text: &str) -> (String, String) {
    match file(text).build().await {
        Err(Error::Config(err)) => (err.field().to_owned(), err.reason().to_owned()),
        Err(other) => panic!("expected a configuration error, got {other:?}"),
        Ok(_) => panic!("built:\n{text}"),
    }
}

#[tokio::test]
async fn limiters_built_from_the_file_share_state_in_postgresql() {
    let db = TestDatabase::create();
    std::env::set_var("TGC_PG_A_URL", db.url());
    let policies = file(
        "tollgate:\n  postgres_url: ${TGC_PG_A_URL}\n  postgres: { schema: limits, pool_size: 2 }\n  key_prefix: app\n  default: { limit: 100, window: 1m }\n  resources:\n    login: { limit: 2, window: 1h, strategy: fixed_window }\n",
    );
    let first = policies.build().await.unwrap();
    let second = policies.build().await.unwrap(); // as another process would

    assert!(first.limiter("login").allow("alice").await.unwrap().allowed);
    let d = second.limiter("login").allow("alice").await.unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 0));
    let d = first.limiter("login").allow("alice").await.unwrap();
    assert!(!d.allowed);
    assert!(d.retry_after.is_some());
    let d = second.limiter("search").allow("alice").await.unwrap();
    assert_eq!((d.allowed, d.limit, d.remaining), (true, 100, 99));
    // In the schema the file names.
    assert_eq!(db.sql("SELECT count(*) FROM limits.state"), "2");
}

#[tokio::test]
async fn a_leased_policy_leases_from_postgresql_and_gives_back_what_is_unspent() {
    let db = TestDatabase::create();
    std::env::set_var("TGC_PG_LEASE_URL", db.url());
    let policies = file(
        "tollgate:\n  postgres_url: ${TGC_PG_LEASE_URL}\n  postgres: { schema: leased, pool_size: 2 }\n  lease: { max_units: 8, max_age: 1m }\n  default: { limit: 100, window: 1h, strategy: fixed_window }\n",
    );
    let first = policies.build().await.unwrap();
    let second = policies.build().await.unwrap(); // as another process would
    let charged = || -> u64 { db.sql("SELECT b FROM leased.state").parse().unwrap() };
    // Each process's requests past the first take leases (up to 8 units
    // beyond their cost, sized by what the process spent lately), and
    // spend them without the database.
    for limiters in [&first, &second] {
        for _ in 0..20 {
            assert!(limiters.limiter("").allow("k").await.unwrap().allowed);
        }
    }
    let held = charged() - 40;
    assert!(held > 0, "units leased and not yet spent");
    assert_eq!(
        db.sql("SELECT count(*) FROM leased.lessees"),
        "2",
        "both processes lease the key"
    );
    // Ended, the leases give back their unspent units: what is charged is
    // what was admitted.
    let given = first.end_leases().await.unwrap() + second.end_leases().await.unwrap();
    assert_eq!(given, held);
    assert_eq!(charged(), 40);
}

#[tokio::test]
async fn an_unreachable_database_fails_closed_naming_the_url() {
    let port = free_port(); // nothing listens there
    let (field, message) = refused(&format!(
        "tollgate:\n  postgres_url: postgres://app:s3cret@127.0.0.1:{port}/app\n  default: {{ limit: 1, window: 1s }}\n"
    ))
    .await;
    assert_eq!(field, "tollgate.postgres_url");
    assert!(
        message.contains("check the host, the port and that the server is running"),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");
}

#[tokio::test]
async fn failing_open_the_limiter_starts_while_the_database_is_down() {
    let port = free_port();
    let text = format!(
        "tollgate:\n  postgres_url: postgres://app@127.0.0.1:{port}/app\n  fail_open: true\n  default: {{ limit: 1, window: 1s }}\n"
    );
    let limiters = file(&text).build().await.unwrap();
    let d = limiters.limiter("").allow("a").await.unwrap();
    assert!(d.allowed && d.fail_open, "{d:?}");
    let text = format!(
        "tollgate:\n  postgres_url: postgres://app@127.0.0.1:{port}/app\n  fallback: {{ limit: 1, window: 1m }}\n  default: {{ limit: 5, window: 1s }}\n"
    );
    let limiters = file(&text).build().await.unwrap();
    let d = limiters.limiter("").allow("a").await.unwrap();
    assert!(d.allowed && d.fallback, "{d:?}");
    let d = limiters.limiter("").allow("a").await.unwrap();
    assert!(!d.allowed && d.fallback, "{d:?}");
}

#[tokio::test]
async fn a_url_that_does_not_parse_names_the_url() {
    let (field, message) = refused(
        "tollgate:\n  postgres_url: postgres://app@127.0.0.1:notaport/app\n  default: { limit: 1, window: 1s }\n",
    )
    .await;
    assert_eq!(field, "tollgate.postgres_url");
    assert!(
        message.contains("is not a PostgreSQL connection URL"),
        "{message}"
    );
    // Failing open too: the URL is parsed when the backend is made.
    let err = file(
        "tollgate:\n  postgres_url: postgres://app@127.0.0.1:notaport/app\n  fail_open: true\n  default: { limit: 1, window: 1s }\n",
    )
    .build()
    .await
    .unwrap_err();
    assert!(err.to_string().contains("tollgate.postgres_url"), "{err}");
}

#[tokio::test]
async fn a_refused_login_names_the_url_and_what_to_check() {
    let db = TestDatabase::create();
    let (field, message) = refused(&format!(
        "tollgate:\n  postgres_url: {}\n  default: {{ limit: 1, window: 1s }}\n",
        db.url_as("tollgate_nobody", "wrong")
    ))
    .await;
    assert_eq!(field, "tollgate.postgres_url");
    assert!(
        message.contains("the server refused the login: check the user and password"),
        "{message}"
    );
    assert!(!message.contains("wrong"), "{message}");
}

#[tokio::test]
async fn a_role_without_rights_names_the_schema_and_the_statement_to_run() {
    let mut db = TestDatabase::create();
    let role = db.role("pw");
    let (field, message) = refused(&format!(
        "tollgate:\n  postgres_url: {}\n  default: {{ limit: 1, window: 1s }}\n",
        db.url_as(&role, "pw")
    ))
    .await;
    assert_eq!(field, "tollgate.postgres.schema");
    assert!(
        message.contains("CREATE SCHEMA tollgate AUTHORIZATION"),
        "{message}"
    );
}

#[tokio::test]
async fn concurrency_limits_are_refused_naming_the_resource() {
    let db = TestDatabase::create();
    let (field, message) = refused(&format!(
        "tollgate:\n  postgres_url: {}\n  default: {{ limit: 1, window: 1s }}\n  resources:\n    exports: {{ strategy: concurrency, limit: 5 }}\n",
        db.url()
    ))
    .await;
    assert!(
        field.starts_with("tollgate.resources.exports"),
        "{field}: {message}"
    );
}
