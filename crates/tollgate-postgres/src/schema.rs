//! The backend's schema: its tables and functions, installed by the
//! backend itself on every start, under a schema version.
//!
//! Installing takes a transaction-scoped advisory lock named after the
//! schema, so instances starting at once install it one after the other:
//! the first creates what is missing, the others find the version current
//! and change nothing. A schema of an older version is brought up to date
//! by the migrations after its version; one of a newer version is refused.

use tokio_postgres::{Client, Transaction};

use crate::error::PostgresError;

/// The version of the schema this backend installs: one migration each.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// The migrations, version 1 first: each brings the schema from the
/// version before it to its own. `@schema@` stands for the schema's
/// quoted name, `@unlogged@` for `UNLOGGED` or nothing.
const MIGRATIONS: [&str; 5] = [
    include_str!("../sql/1_state.sql"),
    include_str!("../sql/2_strategies.sql"),
    include_str!("../sql/3_decisions.sql"),
    include_str!("../sql/4_fixed_windows.sql"),
    include_str!("../sql/5_together.sql"),
];

/// A schema name the backend accepts: a lowercase letter or underscore,
/// then up to 62 lowercase letters, digits and underscores (a name that
/// needs no quoting, so that it reads the same in every tool).
pub(crate) fn check_name(name: &str) -> Result<(), PostgresError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && name.len() <= 63 {
        return Ok(());
    }
    Err(PostgresError::new(
        "schema",
        format!(
            "{name:?} is not a schema name the backend takes: a lowercase letter or `_`, then up to \
             62 lowercase letters, digits or `_`"
        ),
    ))
}

/// Installs or upgrades the schema `name` through `client`; its tables
/// (state and lessees) `UNLOGGED` when `unlogged` (an existing table is
/// changed to match, which rewrites it).
pub(crate) async fn install(client: &mut Client, name: &str, unlogged: bool) -> Result<(), PostgresError> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| PostgresError::caused("postgres_url", "could not start a transaction", e))?;
    let lock = format!("SELECT pg_advisory_xact_lock(hashtextextended('tollgate schema {name}', 0))");
    tx.batch_execute(&lock)
        .await
        .map_err(|e| PostgresError::caused("schema", "could not lock the schema to install it", e))?;
    create_schema(&tx, name).await?;
    let found = installed_version(&tx, name).await?;
    if found > SCHEMA_VERSION {
        return Err(PostgresError::new(
            "schema",
            format!(
                "schema {name} is at version {found}, newer than the version {SCHEMA_VERSION} this \
                 tollgate installs: upgrade tollgate on this instance, or give it another schema"
            ),
        ));
    }
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        let sql = migration.replace("@schema@", name).replace(
            "CREATE TABLE",
            if unlogged {
                "CREATE UNLOGGED TABLE"
            } else {
                "CREATE TABLE"
            },
        );
        tx.batch_execute(&sql).await.map_err(|e| {
            PostgresError::caused(
                "schema",
                format!("could not install version {} of schema {name}", index + 1),
                e,
            )
        })?;
    }
    set_version(&tx, name, found).await?;
    match_persistence(&tx, name, unlogged).await?;
    tx.commit()
        .await
        .map_err(|e| PostgresError::caused("schema", format!("could not commit schema {name}"), e))
}

/// Creates the schema unless it exists; missing rights get an error that
/// says which to grant.
async fn create_schema(tx: &Transaction<'_>, name: &str) -> Result<(), PostgresError> {
    let exists = tx
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&name])
        .await
        .map_err(|e| PostgresError::caused("schema", "could not read the schemas", e))?
        .is_some();
    if exists {
        return Ok(());
    }
    tx.batch_execute(&format!("CREATE SCHEMA {name}"))
        .await
        .map_err(|e| {
            let rights = e.as_db_error().is_some_and(|db| db.code().code() == "42501");
            let what = if rights {
                format!(
                    "the role may not create schema {name}: create it once as an owner \
                 (`CREATE SCHEMA {name} AUTHORIZATION <role>`) or grant the role CREATE on the \
                 database"
                )
            } else {
                format!("could not create schema {name}")
            };
            PostgresError::caused("schema", what, e)
        })
}

/// The version recorded in the schema (0 for none), creating its version
/// table when missing.
async fn installed_version(tx: &Transaction<'_>, name: &str) -> Result<i32, PostgresError> {
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {name}.version \
         (one boolean PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL)"
    );
    let denied = |e: tokio_postgres::Error| {
        PostgresError::caused(
            "schema",
            format!(
                "could not read or create {name}.version (the role needs CREATE and USAGE on schema {name})"
            ),
            e,
        )
    };
    tx.batch_execute(&create).await.map_err(denied)?;
    let row = tx
        .query_opt(&format!("SELECT version FROM {name}.version"), &[])
        .await
        .map_err(denied)?;
    Ok(row.map_or(0, |row| row.get(0)))
}

/// Records [`SCHEMA_VERSION`] when `found` is older.
async fn set_version(tx: &Transaction<'_>, name: &str, found: i32) -> Result<(), PostgresError> {
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    let sql = format!(
        "INSERT INTO {name}.version (version) VALUES ($1) \
         ON CONFLICT (one) DO UPDATE SET version = EXCLUDED.version"
    );
    tx.execute(&sql, &[&SCHEMA_VERSION])
        .await
        .map(drop)
        .map_err(|e| PostgresError::caused("schema", format!("could not record the version of {name}"), e))
}

/// Makes the tables (state and lessees) unlogged or logged as asked, each
/// that is not.
async fn match_persistence(tx: &Transaction<'_>, name: &str, unlogged: bool) -> Result<(), PostgresError> {
    let rows = tx
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname IN ('state', 'lessees') AND (c.relpersistence = 'u') <> $2",
            &[&name, &unlogged],
        )
        .await
        .map_err(|e| PostgresError::caused("schema", format!("could not find the tables of {name}"), e))?;
    let to = if unlogged { "UNLOGGED" } else { "LOGGED" };
    for row in rows {
        let table: String = row.get(0);
        tx.batch_execute(&format!("ALTER TABLE {name}.{table} SET {to}"))
            .await
            .map_err(|e| {
                PostgresError::caused("unlogged", format!("could not make {name}.{table} {to}"), e)
            })?;
    }
    Ok(())
}
