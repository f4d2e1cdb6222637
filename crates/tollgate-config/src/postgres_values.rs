//! The values of `postgres_url` and of the `postgres` settings, each
//! expanded (`${VAR}`) and checked as it is read, so that a mistake is
//! reported at its line.

use std::fmt;
use std::time::Duration;

use serde::de::{self, MapAccess, Unexpected, Visitor};
use serde::Deserialize;

use crate::fields::deserialize_any_with;
use crate::values::{expanded, shown, Flag};

/// `postgres_url`: a libpq connection URL or key-value string, kept as
/// written (TLS parameters such as `sslmode` and `sslrootcert` go to the
/// backend unchanged); empty (for example `${DATABASE_URL:-}` with the
/// variable unset) means no PostgreSQL.
pub(crate) struct PostgresUrl(pub(crate) Option<String>);
deserialize_any_with!(PostgresUrl, PostgresUrlVisitor);

struct PostgresUrlVisitor;

impl Visitor<'_> for PostgresUrlVisitor {
    type Value = PostgresUrl;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a PostgreSQL URL, such as \"postgres://app@db.internal:5432/app\"")
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<PostgresUrl, E> {
        let text = expanded(raw)?;
        let url = text.trim();
        if url.is_empty() {
            return Ok(PostgresUrl(None));
        }
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        let url_form = matches!(scheme, Some("postgres" | "postgresql"));
        // A key-value string (`host=db dbname=app`) names no scheme.
        let key_value = scheme.is_none() && url.contains('=');
        if !url_form && !key_value {
            // The value may hold a password: it is not repeated.
            return Err(E::custom(
                "is not a PostgreSQL URL: expected postgres://[user[:password]@]host[:port]/database \
                 (or postgresql://…), with TLS as parameters such as ?sslmode=require, or a \
                 key-value string such as \"host=db dbname=app\"",
            ));
        }
        Ok(PostgresUrl(Some(url.to_owned())))
    }

    fn visit_unit<E: de::Error>(self) -> Result<PostgresUrl, E> {
        Ok(PostgresUrl(None))
    }

    fn visit_none<E: de::Error>(self) -> Result<PostgresUrl, E> {
        Ok(PostgresUrl(None))
    }
}

/// `postgres`: the settings of the database's connections, each optional.
#[derive(Default)]
pub(crate) struct PostgresSettings {
    pub(crate) schema: Option<String>,
    pub(crate) pool_size: Option<usize>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) unlogged: Option<bool>,
    pub(crate) synchronous_commit: Option<bool>,
}
deserialize_any_with!(PostgresSettings, PostgresSettingsVisitor);

/// What `postgres` holds, each value read (and expanded) at its own line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PostgresFields {
    #[serde(default)]
    schema: Option<SchemaName>,
    #[serde(default)]
    pool_size: Option<PoolSize>,
    #[serde(default)]
    timeout: Option<Timeout>,
    #[serde(default)]
    connect_timeout: Option<Timeout>,
    #[serde(default)]
    unlogged: Option<Flag>,
    #[serde(default)]
    synchronous_commit: Option<Flag>,
}

struct PostgresSettingsVisitor;

impl<'de> Visitor<'de> for PostgresSettingsVisitor {
    type Value = PostgresSettings;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a map of the PostgreSQL settings: `schema`, `pool_size`, `timeout`, \
             `connect_timeout`, `unlogged` and `synchronous_commit`, each optional",
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PostgresSettings, A::Error> {
        let fields = PostgresFields::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(PostgresSettings {
            schema: fields.schema.map(|s| s.0),
            pool_size: fields.pool_size.map(|p| p.0),
            timeout: fields.timeout.map(|t| t.0),
            connect_timeout: fields.connect_timeout.map(|t| t.0),
            unlogged: fields.unlogged.map(|f| f.0),
            synchronous_commit: fields.synchronous_commit.map(|f| f.0),
        })
    }
}

/// `postgres.schema`: a name the backend takes, a lowercase letter or `_`
/// then up to 62 lowercase letters, digits or `_` (so it needs no quoting
/// in SQL).
struct SchemaName(String);
deserialize_any_with!(SchemaName, SchemaNameVisitor);

struct SchemaNameVisitor;

impl Visitor<'_> for SchemaNameVisitor {
    type Value = SchemaName;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a schema name, such as \"tollgate\"")
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<SchemaName, E> {
        let text = expanded(raw)?;
        let name = text.trim();
        let mut chars = name.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_');
        let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if first_ok && rest_ok && name.len() <= 63 {
            return Ok(SchemaName(name.to_owned()));
        }
        Err(E::custom(format!(
            "{} is not a schema name tollgate takes: a lowercase letter or `_`, then up to 62 \
             lowercase letters, digits or `_`",
            shown(raw, name)
        )))
    }
}

/// The largest `postgres.pool_size`: far beyond any server's
/// `max_connections`, a bound against typing mistakes.
const MAX_POOL_SIZE: u64 = 10_000;

/// `postgres.pool_size`: a whole number from 1 to [`MAX_POOL_SIZE`].
struct PoolSize(usize);
deserialize_any_with!(PoolSize, PoolSizeVisitor);

struct PoolSizeVisitor;

impl Visitor<'_> for PoolSizeVisitor {
    type Value = PoolSize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number of connections, at least 1 (such as 16)")
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<PoolSize, E> {
        if !(1..=MAX_POOL_SIZE).contains(&n) {
            return Err(E::custom(format!(
                "must be from 1 to {MAX_POOL_SIZE}: the most connections each process opens to \
                 the database (mind the server's max_connections across the fleet)"
            )));
        }
        usize::try_from(n)
            .map(PoolSize)
            .map_err(|_| E::custom(format!("must be at most {}", usize::MAX)))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<PoolSize, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::invalid_value(Unexpected::Signed(n), &self)),
        }
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<PoolSize, E> {
        let text = expanded(raw)?;
        match text.trim().parse::<u64>() {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::custom(format!("{} is not a whole number", shown(raw, &text)))),
        }
    }
}

/// The longest `postgres.timeout` and `postgres.connect_timeout`.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// `postgres.timeout` and `postgres.connect_timeout`: a duration from 1 ms
/// to an hour.
struct Timeout(Duration);
deserialize_any_with!(Timeout, TimeoutVisitor);

struct TimeoutVisitor;

impl Visitor<'_> for TimeoutVisitor {
    type Value = Timeout;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration with a unit, such as \"500ms\" or \"5s\"")
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<Timeout, E> {
        let text = expanded(raw)?;
        let timeout = humantime::parse_duration(text.trim())
            .map_err(|e| E::custom(format!("{} is not a duration ({e})", shown(raw, &text))))?;
        if timeout < Duration::from_millis(1) || timeout > MAX_TIMEOUT {
            return Err(E::custom(
                "must be from 1ms to 1h: a timeout of 0 would fail every call, and one beyond an \
                 hour would hold requests as long",
            ));
        }
        Ok(Timeout(timeout))
    }
}
