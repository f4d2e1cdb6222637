//! `postgres_url` and the `postgres` settings as files write them, and
//! their mistakes, each at its line and field.

use std::time::Duration;

use crate::support::rejects;
use tollgate_config::{Format, PolicyFile, PostgresStorage, Storage, Target};

fn file(format: Format, text: &str) -> PolicyFile {
    PolicyFile::from_str(text, format, "policies").unwrap_or_else(|err| panic!("{err}"))
}

#[test]
fn the_url_reaches_the_backend_as_written_with_the_settings() {
    std::env::set_var("TGC_PG_PASSWORD", "s3cret");
    let url = "postgres://app:${TGC_PG_PASSWORD}@db.internal:5432/app?sslmode=verify-full&sslrootcert=/etc/ssl/ca.pem";
    let expanded =
        "postgres://app:s3cret@db.internal:5432/app?sslmode=verify-full&sslrootcert=/etc/ssl/ca.pem";
    let yaml = format!(
        "tollgate:\n  postgres_url: {url}\n  postgres: {{ schema: limits, pool_size: 4, timeout: 250ms, connect_timeout: 2s, unlogged: true, synchronous_commit: \"true\" }}\n  default: {{ limit: 1, window: 1s }}\n"
    );
    let toml = format!(
        "[tollgate]\npostgres_url = \"{url}\"\ndefault = {{ limit = 1, window = \"1s\" }}\n[tollgate.postgres]\nschema = \"limits\"\npool_size = 4\ntimeout = \"250ms\"\nconnect_timeout = \"2s\"\nunlogged = true\nsynchronous_commit = true\n"
    );
    let mut expected = PostgresStorage::new(expanded);
    expected.schema = Some("limits".to_owned());
    expected.pool_size = Some(4);
    expected.timeout = Some(Duration::from_millis(250));
    expected.connect_timeout = Some(Duration::from_secs(2));
    expected.unlogged = Some(true);
    expected.synchronous_commit = Some(true);
    for (format, text) in [(Format::Yaml, yaml), (Format::Toml, toml)] {
        let file = file(format, &text);
        assert_eq!(file.storage(), &Storage::Postgres(expected.clone()), "{text}");
        let shown = file.storage().to_string();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.starts_with("PostgreSQL at postgres://app:***@db.internal"),
            "{shown}"
        );
        // A remote store: denials are cached unless the file says not to.
        assert!(file.settings(Target::Default).deny_cache.is_some());
    }
    // A key-value connection string is taken as well.
    let kv = file(
        Format::Json,
        r#"{"tollgate": {"postgres_url": "host=db dbname=app", "default": {"limit": 1, "window": "1s"}}}"#,
    );
    assert_eq!(
        kv.storage(),
        &Storage::Postgres(PostgresStorage::new("host=db dbname=app"))
    );
}

#[test]
fn an_empty_url_keeps_state_in_memory_and_its_settings_apply_to_nothing() {
    let file = file(
        Format::Yaml,
        "tollgate:\n  postgres_url: ${TGC_PG_UNSET_URL:-}\n  postgres: { pool_size: 2 }\n  lease: true\n  default: { limit: 1, window: 1s }\n",
    );
    assert_eq!(file.storage(), &Storage::Memory);
    assert!(file.settings(Target::Default).deny_cache.is_none());
}

#[test]
fn postgres_and_redis_are_mutually_exclusive() {
    let message = "`redis_url` and `postgres_url` are mutually exclusive: state lives in one store";
    rejects(
        Format::Yaml,
        "tollgate:\n  redis_url: redis://127.0.0.1:6379\n  postgres_url: postgres://db/app\n  default: { limit: 1, window: 1s }\n",
        3,
        "tollgate.postgres_url",
        message,
    );
    rejects(
        Format::Yaml,
        "tollgate:\n  postgres_url: postgres://db/app\n  redis_url: redis://127.0.0.1:6379\n  default: { limit: 1, window: 1s }\n",
        3,
        "tollgate.redis_url",
        message,
    );
    rejects(
        Format::Toml,
        "[tollgate]\npostgres_url = \"postgres://db/app\"\nredis_cluster = \"redis://127.0.0.1:7000\"\ndefault = { limit = 1, window = \"1s\" }\n",
        3,
        "tollgate.redis_cluster",
        "`redis_cluster` and `postgres_url` are mutually exclusive",
    );
}

#[test]
fn urls_that_are_not_postgresql_are_refused_without_their_password() {
    let err = rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 1s }\n  postgres_url: mysql://app:s3cret@db/app\n",
        3,
        "tollgate.postgres_url",
        "is not a PostgreSQL URL: expected postgres://",
    );
    assert!(!err.to_string().contains("s3cret"), "{err}");
}

#[test]
fn postgres_settings_need_postgres_url() {
    let message = "`postgres` is given but `postgres_url` is not";
    // After the section is read: reported at the section.
    rejects(
        Format::Yaml,
        "tollgate:\n  postgres: { pool_size: 2 }\n  default: { limit: 1, window: 1s }\n",
        2,
        "tollgate",
        message,
    );
    // Beside Redis: at the value.
    rejects(
        Format::Yaml,
        "tollgate:\n  redis_url: redis://127.0.0.1:6379\n  default: { limit: 1, window: 1s }\n  postgres: { pool_size: 2 }\n",
        4,
        "tollgate.postgres",
        message,
    );
}

#[test]
fn each_postgres_setting_is_checked_at_its_line() {
    let head =
        "tollgate:\n  postgres_url: postgres://db/app\n  default: { limit: 1, window: 1s }\n  postgres:\n";
    for (value, message) in [
        ("0", "must be from 1 to 10000"),
        ("many", "\"many\" is not a whole number"),
    ] {
        let text = format!("{head}    unlogged: false\n    pool_size: {value}\n");
        rejects(Format::Yaml, &text, 6, "tollgate.postgres.pool_size", message);
    }
    for (line, field, message) in [
        ("    timeout: 1 lightyear\n", "timeout", "is not a duration"),
        ("    timeout: 0s\n", "timeout", "must be from 1ms to 1h"),
        (
            "    connect_timeout: 5 parsecs\n",
            "connect_timeout",
            "is not a duration",
        ),
        (
            "    schema: Limits\n",
            "schema",
            "\"Limits\" is not a schema name tollgate takes",
        ),
        (
            "    unlogged: maybe\n",
            "unlogged",
            "\"maybe\" is not true or false",
        ),
        (
            "    synchronous_commit: 2\n",
            "synchronous_commit",
            "true or false",
        ),
        ("    pool: 3\n", "pool", "unknown field `pool`"),
    ] {
        let text = format!("{head}    pool_size: 2\n{line}");
        rejects(
            Format::Yaml,
            &text,
            6,
            &format!("tollgate.postgres.{field}"),
            message,
        );
    }
}

#[test]
fn leases_on_postgresql_are_taken() {
    let file = file(
        Format::Yaml,
        "tollgate:\n  postgres_url: postgres://db/app\n  lease: true\n  default: { limit: 1, window: 1s }\n  resources:\n    api: { limit: 5, window: 1s, lease: { max_units: 8 } }\n",
    );
    assert!(file.settings(Target::Default).lease.is_some());
}
