//! [`PostgresStorage`]: the PostgreSQL database a policy file names
//! (`postgres_url`) and the settings of its connections (`postgres`).

use std::fmt;
use std::time::Duration;

use tollgate::__private::redact_url;

/// A PostgreSQL database that keeps rate-limit state: the URL as the file
/// gives it (`postgres_url`, passed to the backend unchanged, TLS
/// parameters such as `sslmode` included) and the settings under
/// `postgres`, each `None` where the file leaves the backend's default.
///
/// `Debug` and `Display` hide the password, in the URL's user part or as a
/// `password=` parameter.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresStorage {
    /// The libpq connection URL (`postgres_url`).
    pub url: String,
    /// The schema of the backend's table and functions (`postgres.schema`;
    /// default `tollgate`).
    pub schema: Option<String>,
    /// The most connections each process opens (`postgres.pool_size`;
    /// default 16).
    pub pool_size: Option<usize>,
    /// How long a decision may take, waiting for a connection included
    /// (`postgres.timeout`; default 1 s).
    pub timeout: Option<Duration>,
    /// How long opening a connection may take (`postgres.connect_timeout`;
    /// default 5 s).
    pub connect_timeout: Option<Duration>,
    /// Whether the state table is `UNLOGGED` (`postgres.unlogged`; default
    /// false).
    pub unlogged: Option<bool>,
    /// Whether a decision waits for its commit to reach the disk
    /// (`postgres.synchronous_commit`; default false).
    pub synchronous_commit: Option<bool>,
}

impl PostgresStorage {
    /// The database at `url`, every setting the backend's default.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: None,
            pool_size: None,
            timeout: None,
            connect_timeout: None,
            unlogged: None,
            synchronous_commit: None,
        }
    }

    /// The settings the file gives, as `name value` for messages.
    fn given(&self) -> Vec<String> {
        let duration = |d: &Duration| humantime::format_duration(*d).to_string();
        [
            self.schema.as_ref().map(|s| format!("schema {s:?}")),
            self.pool_size.map(|n| format!("pool_size {n}")),
            self.timeout.as_ref().map(|d| format!("timeout {}", duration(d))),
            self.connect_timeout
                .as_ref()
                .map(|d| format!("connect_timeout {}", duration(d))),
            self.unlogged.map(|u| format!("unlogged {u}")),
            self.synchronous_commit.map(|s| format!("synchronous_commit {s}")),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// `url` without its password: the URL's user part, and any `password=`
/// parameter (of a URL's query or a key-value connection string).
pub(crate) fn redact_postgres_url(url: &str) -> String {
    let shown = redact_url(url);
    let mut out = String::with_capacity(shown.len());
    let mut rest = shown.as_str();
    while let Some(at) = find_password_parameter(rest) {
        let value_start = at + "password=".len();
        out.push_str(&rest[..value_start]);
        out.push_str("***");
        let value = &rest[value_start..];
        let end = if let Some(quoted) = value.strip_prefix('\'') {
            // A quoted key-value value: up to the closing quote.
            quoted.find('\'').map_or(value.len(), |i| i + 2)
        } else {
            value.find(['&', ' ', '\t', '\n']).unwrap_or(value.len())
        };
        rest = &value[end..];
    }
    out.push_str(rest);
    out
}

/// Where a `password=` parameter starts in `text`: at its start or after
/// `?`, `&` or whitespace.
fn find_password_parameter(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find("password=") {
        let at = from + i;
        let before = text[..at].chars().next_back();
        if before.is_none_or(|c| matches!(c, '?' | '&') || c.is_whitespace()) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

impl fmt::Display for PostgresStorage {
    /// `PostgreSQL at URL`, followed by the settings the file gives.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PostgreSQL at {}", redact_postgres_url(&self.url))?;
        let given = self.given();
        if !given.is_empty() {
            write!(f, " ({})", given.join(", "))?;
        }
        Ok(())
    }
}

impl fmt::Debug for PostgresStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStorage")
            .field("url", &redact_postgres_url(&self.url))
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("unlogged", &self.unlogged)
            .field("synchronous_commit", &self.synchronous_commit)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact_postgres_url("postgres://app:s3cret@db:5432/app?sslmode=require"),
            "postgres://app:***@db:5432/app?sslmode=require"
        );
        assert_eq!(
            redact_postgres_url("postgres://db/app?user=app&password=s3cret&sslmode=verify-full"),
            "postgres://db/app?user=app&password=***&sslmode=verify-full"
        );
        assert_eq!(
            redact_postgres_url("host=db user=app password=s3cret dbname=app"),
            "host=db user=app password=*** dbname=app"
        );
        assert_eq!(
            redact_postgres_url("host=db password='s3 cret' dbname=app"),
            "host=db password=*** dbname=app"
        );
        assert_eq!(
            redact_postgres_url("host=db oldpassword=x"),
            "host=db oldpassword=x"
        );
        let mut storage = PostgresStorage::new("postgres://app:s3cret@db/app");
        storage.pool_size = Some(4);
        storage.timeout = Some(Duration::from_millis(250));
        assert_eq!(
            storage.to_string(),
            "PostgreSQL at postgres://app:***@db/app (pool_size 4, timeout 250ms)"
        );
        assert!(!format!("{storage:?}").contains("s3cret"));
    }
}

/// How a [`PostgresStorage`] connects.
#[cfg(feature = "postgres")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// Now: the login must be taken and the schema installed.
    Now,
    /// Now, or in the background when the database does not answer yet (a
    /// database that answers and refuses is still an error).
    NowUnlessDown,
    /// In the background: the first decision that reaches the database
    /// installs the schema.
    InBackground,
}

#[cfg(feature = "postgres")]
impl PostgresStorage {
    /// The backend's builder with the file's settings.
    fn builder(&self) -> tollgate_postgres::PostgresBackendBuilder {
        let mut builder = tollgate_postgres::PostgresBackend::builder(self.url.as_str());
        if let Some(schema) = &self.schema {
            builder = builder.schema(schema.as_str());
        }
        if let Some(size) = self.pool_size {
            builder = builder.pool_size(size);
        }
        if let Some(timeout) = self.timeout {
            builder = builder.timeout(timeout);
        }
        if let Some(timeout) = self.connect_timeout {
            builder = builder.connect_timeout(timeout);
        }
        if let Some(unlogged) = self.unlogged {
            builder = builder.unlogged(unlogged);
        }
        if let Some(on) = self.synchronous_commit {
            builder = builder.synchronous_commit(on);
        }
        builder
    }

    /// Connects the backend as `start` says.
    ///
    /// # Errors
    ///
    /// A [`tollgate::ConfigError`] naming the field to change
    /// (`tollgate.postgres_url`, `tollgate.postgres.schema`, …) and what to
    /// do.
    pub(crate) async fn connect(
        &self,
        start: Start,
    ) -> Result<tollgate_postgres::PostgresBackend, tollgate::Error> {
        let connected = match start {
            Start::InBackground => self.builder().connect_in_background(),
            Start::Now => self.builder().connect().await,
            Start::NowUnlessDown => match self.builder().connect().await {
                Err(err) if is_down(&err) => self.builder().connect_in_background(),
                other => other,
            },
        };
        connected.map_err(config_error)
    }
}

/// Whether `err` says that the database did not answer (rather than
/// answered and refused): about the URL, without a server's error code. A
/// URL that does not parse reads the same, and is refused again when the
/// backend is made in the background.
#[cfg(feature = "postgres")]
fn is_down(err: &tollgate_postgres::PostgresError) -> bool {
    err.setting() == "postgres_url" && err.code().is_none()
}

/// A [`tollgate_postgres::PostgresError`] as the policy file's error: the
/// field of the setting it names (under `tollgate.postgres`, or
/// `tollgate.postgres_url` for the URL and anything the URL carries).
#[cfg(feature = "postgres")]
fn config_error(err: tollgate_postgres::PostgresError) -> tollgate::Error {
    const SETTINGS: [&str; 6] = [
        "schema",
        "pool_size",
        "timeout",
        "connect_timeout",
        "unlogged",
        "synchronous_commit",
    ];
    let setting = err.setting();
    let (field, message) = if SETTINGS.contains(&setting) {
        (format!("tollgate.postgres.{setting}"), err.message().to_owned())
    } else if setting == "postgres_url" {
        ("tollgate.postgres_url".to_owned(), err.message().to_owned())
    } else {
        // A parameter of the URL (TLS's, say): the URL is what to change.
        (
            "tollgate.postgres_url".to_owned(),
            format!("{setting}: {}", err.message()),
        )
    };
    tollgate::ConfigError::new(field, message).into()
}
