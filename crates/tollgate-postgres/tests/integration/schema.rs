//! The schema the backend installs: at once from several instances, an
//! older version upgraded, a newer one refused, rights missing named.

use tollgate_postgres::{PostgresBackend, SCHEMA_VERSION};

use crate::support::TestDatabase;

/// The version recorded in `schema` of `db`.
async fn version(db: &TestDatabase, schema: &str) -> i32 {
    let client = db.client().await;
    client
        .query_one(&format!("SELECT version FROM {schema}.version"), &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_starting_at_once_on_an_empty_database_all_start() {
    let db = TestDatabase::create().await;
    let starts: Vec<_> = (0..6)
        .map(|_| {
            let url = db.url();
            tokio::spawn(async move { PostgresBackend::builder(url).pool_size(1).connect().await })
        })
        .collect();
    for start in starts {
        start.await.unwrap().expect("every instance starts");
    }
    assert_eq!(version(&db, "tollgate").await, SCHEMA_VERSION);
    // And again, idempotent: nothing to do, nothing changed.
    PostgresBackend::builder(db.url()).connect().await.unwrap();
    assert_eq!(version(&db, "tollgate").await, SCHEMA_VERSION);
}

#[tokio::test]
async fn an_older_schema_is_upgraded_and_a_newer_one_refused() {
    let db = TestDatabase::create().await;
    PostgresBackend::builder(db.url())
        .schema("limits")
        .connect()
        .await
        .unwrap();
    let client = db.client().await;
    // As version 2 left it: no decision functions yet.
    client
        .batch_execute(
            "UPDATE limits.version SET version = 2; \
             DROP FUNCTION limits.decide(smallint[], bigint[], bigint[], bigint[], bigint[], bytea[], \
             bigint[], bigint, bigint, bigint)",
        )
        .await
        .unwrap();
    PostgresBackend::builder(db.url())
        .schema("limits")
        .connect()
        .await
        .unwrap();
    assert_eq!(version(&db, "limits").await, SCHEMA_VERSION);
    let functions: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = 'limits' AND p.proname = 'decide'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(functions, 1, "the upgrade installed decide again");

    client
        .execute("UPDATE limits.version SET version = $1", &[&(SCHEMA_VERSION + 1)])
        .await
        .unwrap();
    let err = PostgresBackend::builder(db.url())
        .schema("limits")
        .connect()
        .await
        .unwrap_err();
    assert_eq!(err.setting(), "schema");
    assert!(err.message().contains("newer"), "{err}");
    assert!(err.message().contains("upgrade tollgate"), "{err}");
}

#[tokio::test]
async fn a_role_without_rights_and_bad_settings_are_named() {
    let db = TestDatabase::create().await;
    let client = db.client().await;
    let role = format!("tollgate_weak_{}", std::process::id());
    client
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN; \
             REVOKE CREATE ON DATABASE {} FROM PUBLIC; REVOKE CREATE ON SCHEMA public FROM PUBLIC",
            db.url().rsplit('/').next().unwrap()
        ))
        .await
        .unwrap();
    let url = db.url().replacen("postgres@", &format!("{role}@"), 1);
    let err = PostgresBackend::builder(url).connect().await.unwrap_err();
    client.batch_execute(&format!("DROP ROLE {role}")).await.ok();
    assert_eq!(err.setting(), "schema", "{err}");
    assert_eq!(err.code(), Some("42501"), "{err}");
    assert!(
        err.message().contains("CREATE SCHEMA tollgate AUTHORIZATION"),
        "{err}"
    );

    let err = PostgresBackend::builder("postgres://[nonsense")
        .connect()
        .await
        .unwrap_err();
    assert_eq!(err.setting(), "postgres_url", "{err}");
    let err = PostgresBackend::builder(format!("{}/no_such_database_here", crate::support::server_url()))
        .connect()
        .await
        .unwrap_err();
    assert_eq!(err.setting(), "postgres_url", "{err}");
    assert!(err.message().contains("does not exist"), "{err}");
    let err = PostgresBackend::builder(db.url())
        .schema("Bad-Name")
        .connect()
        .await
        .unwrap_err();
    assert_eq!(err.setting(), "schema", "{err}");
}

#[tokio::test]
async fn unlogged_is_applied_to_an_existing_table_both_ways() {
    let db = TestDatabase::create().await;
    let persistence = |client: tokio_postgres::Client| async move {
        let row = client
            .query_one(
                "SELECT relpersistence::text FROM pg_class WHERE oid = 'tollgate.state'::regclass",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, String>(0)
    };
    PostgresBackend::builder(db.url())
        .unlogged(true)
        .connect()
        .await
        .unwrap();
    assert_eq!(persistence(db.client().await).await, "u");
    PostgresBackend::builder(db.url()).connect().await.unwrap();
    assert_eq!(persistence(db.client().await).await, "p");
}
