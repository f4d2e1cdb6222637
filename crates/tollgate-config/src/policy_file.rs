//! A loaded policy file: its policies, where state lives, and the limiter
//! settings.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use tollgate::__private::redact_url;
use tollgate::{ConfigError, FailPolicy, Policy, Strategy};

use crate::error::ConfigFileError;
use crate::format::Format;
use crate::load;
use crate::postgres_storage::PostgresStorage;
use crate::postgres_values::PostgresSettings;
use crate::settings::{Own, Settings};

/// The strategy of every policy when the file names none.
pub const DEFAULT_STRATEGY: Strategy = Strategy::SlidingWindow;

/// A parsed and validated policy file.
///
/// ```
/// use tollgate_config::{Format, PolicyFile, Target};
///
/// let file = PolicyFile::from_str(
///     r#"
/// tollgate:
///   default: { limit: 100, window: 1m }
///   resources:
///     login: { limit: 5, window: 1m, strategy: fixed_window }
/// "#,
///     Format::Yaml,
///     "policies.yaml",
/// )?;
/// for (target, policy) in file.effective_policies() {
///     println!("{target}: {policy}");
/// }
/// assert_eq!(file.policy("login").limits()[0].limit(), 5);
/// assert_eq!(file.policy("search").limits()[0].limit(), 100);
/// # Ok::<(), tollgate_config::ConfigFileError>(())
/// ```
#[derive(Clone, Debug)]
pub struct PolicyFile {
    origin: String,
    format: Format,
    strategy: Strategy,
    default: Policy,
    resources: BTreeMap<String, Policy>,
    /// The concurrency limits resources combine with their rates.
    in_flight: BTreeMap<String, Policy>,
    storage: Storage,
    fail_policy: FailPolicy,
    key_prefix: String,
    /// The file-wide settings (the default policy's).
    settings: Settings,
    /// The settings resources give themselves, for those that give any.
    own: BTreeMap<String, Own>,
}

impl PolicyFile {
    /// Reads, parses and validates the policy file at `path`, in the format
    /// its extension names (`.yaml`/`.yml`, `.toml`, `.json`).
    ///
    /// # Errors
    ///
    /// A [`ConfigFileError`] naming the file, and for content errors the
    /// line, column and field: an unknown extension, an unreadable file,
    /// a file larger than 16 MiB (of which no more is read), a byte that is not UTF-8, malformed syntax, an unknown or missing field, a wrong type, an
    /// invalid value, an unset environment variable.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigFileError> {
        Self::load_bytes(path.as_ref()).map(|(file, _)| file)
    }

    /// As [`PolicyFile::load`], also returning the bytes read.
    pub(crate) fn load_bytes(path: &Path) -> Result<(Self, Vec<u8>), ConfigFileError> {
        let origin = path.display().to_string();
        // The name is checked before anything is read.
        Format::from_path(path).ok_or_else(|| ConfigFileError::unknown_format(&origin))?;
        let bytes = load::read(path, &origin)?;
        Ok((Self::from_bytes(path, &bytes)?, bytes))
    }

    /// Parses `bytes`, read from the file at `path`, in the format its
    /// extension names.
    pub(crate) fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Self, ConfigFileError> {
        let origin = path.display().to_string();
        let format = Format::from_path(path).ok_or_else(|| ConfigFileError::unknown_format(&origin))?;
        Self::from_str(load::decode(bytes, &origin)?, format, &origin)
    }

    /// Parses and validates `text` in `format`; `origin` names it in errors
    /// (a file name, or something like `<stdin>`).
    ///
    /// # Errors
    ///
    /// As for [`PolicyFile::load`].
    pub fn from_str(text: &str, format: Format, origin: &str) -> Result<Self, ConfigFileError> {
        let section = load::parse(text, format, origin)?;
        let strategy = section.strategy.unwrap_or(DEFAULT_STRATEGY);
        // What can only be checked once the whole file is read, without a line.
        let unlocated = |err: ConfigError| {
            ConfigFileError::invalid(origin, None, err.field().to_owned(), err.reason().to_owned())
        };
        let default = section
            .default
            .policy(strategy)
            .map_err(|e| unlocated(e.within("tollgate.default")))?;
        let mut file_wide = section
            .settings
            .resolve(strategy, "tollgate")
            .map_err(unlocated)?;
        let mut resources = BTreeMap::new();
        let mut own = BTreeMap::new();
        let mut in_flight = BTreeMap::new();
        for (name, entry) in &section.resources {
            let path = format!("tollgate.{}", tollgate::Limiters::resource_path(name));
            let policy = entry
                .policy
                .policy(strategy)
                .map_err(|e| unlocated(e.within(&path)))?;
            resources.insert(name.clone(), policy);
            if let Some(slots) = entry.policy.in_flight() {
                in_flight.insert(name.clone(), slots);
            }
            let settings = entry.settings.resolve(strategy, &path).map_err(unlocated)?;
            if !settings.is_empty() {
                own.insert(name.clone(), settings);
            }
        }
        // At most one store is named: the schema refuses several.
        let named = (
            section.postgres_url,
            section.redis_url,
            section.redis_cluster,
            section.redis_sentinel,
        );
        let storage = match named {
            (Some(url), ..) => Storage::Postgres(postgres_storage(url, section.postgres)),
            (None, Some(url), _, _) => Storage::Redis(url),
            (None, None, Some(seeds), _) => Storage::RedisCluster(seeds),
            (None, None, None, Some(sentinel)) => Storage::RedisSentinel {
                master: sentinel.master,
                urls: sentinel.urls,
                username: sentinel.username,
                password: sentinel.password,
                db: sentinel.db,
            },
            (None, None, None, None) => Storage::Memory,
        };
        // A remote store's denials are cached unless the file says not to:
        // the cache changes no decision (SEMANTICS.md) and keeps an
        // over-limit key from costing a round trip per request.
        if storage != Storage::Memory {
            file_wide.deny_cache_by_default();
        }
        let settings = file_wide.file_wide();
        Ok(Self {
            origin: origin.to_owned(),
            format,
            strategy,
            default,
            resources,
            in_flight,
            storage,
            fail_policy: match (&settings.fallback, section.fail_open) {
                (Some(_), _) => FailPolicy::Fallback,
                (None, Some(true)) => FailPolicy::Open,
                (None, Some(false) | None) => FailPolicy::Closed,
            },
            key_prefix: section
                .key_prefix
                .unwrap_or_else(|| tollgate::Limiter::DEFAULT_KEY_PREFIX.to_owned()),
            settings,
            own,
        })
    }

    /// The file's name as given to [`PolicyFile::load`], or the origin given
    /// to [`PolicyFile::from_str`].
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The file's format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The strategy of policies that name none (`tollgate.strategy`, or
    /// [`DEFAULT_STRATEGY`]).
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The policy of every resource without its own (`tollgate.default`).
    pub fn default_policy(&self) -> &Policy {
        &self.default
    }

    /// The named resources and their policies, sorted by name.
    pub fn resources(&self) -> impl Iterator<Item = (&str, &Policy)> {
        self.resources
            .iter()
            .map(|(name, policy)| (name.as_str(), policy))
    }

    /// The concurrency limit `resource` combines with its rate limits
    /// (a `strategy: concurrency` limit in its `limits`): its requests
    /// hold a permit of it while they run, besides the rates of
    /// [`PolicyFile::policy`] ([`tollgate::Limiters::in_flight`]). `None`
    /// for a resource of rates only or of a concurrency limit alone, and
    /// for a resource the file does not name.
    ///
    /// ```
    /// use tollgate_config::{Format, PolicyFile};
    ///
    /// let file = PolicyFile::from_str(
    ///     r#"
    /// tollgate:
    ///   default: { limit: 100, window: 1m }
    ///   resources:
    ///     export:
    ///       limits:
    ///         - { limit: 10, window: 1m }
    ///         - { strategy: concurrency, limit: 2, ttl: 5m }
    /// "#,
    ///     Format::Yaml,
    ///     "policies.yaml",
    /// )?;
    /// assert_eq!(file.policy("export").to_string(), "sliding_window 10 per 60s");
    /// assert_eq!(file.in_flight("export").unwrap().to_string(), "concurrency 2 at once, ttl 300s");
    /// # Ok::<(), tollgate_config::ConfigFileError>(())
    /// ```
    pub fn in_flight(&self, resource: &str) -> Option<&Policy> {
        self.in_flight.get(resource)
    }

    /// Every resource that combines its rates with a concurrency limit,
    /// and that limit, sorted by name.
    pub(crate) fn in_flight_limits(&self) -> impl Iterator<Item = (&str, &Policy)> {
        self.in_flight.iter().map(|(name, p)| (name.as_str(), p))
    }

    /// The policy that applies to `resource`: its own, or the default.
    pub fn policy(&self, resource: &str) -> &Policy {
        self.resources.get(resource).unwrap_or(&self.default)
    }

    /// Every policy with what it applies to, for display: the default first,
    /// then the resources sorted by name, each with its strategy resolved.
    pub fn effective_policies(&self) -> Vec<(Target<'_>, Policy)> {
        std::iter::once((Target::Default, self.default))
            .chain(
                self.resources
                    .iter()
                    .map(|(name, policy)| (Target::Resource(name), *policy)),
            )
            .collect()
    }

    /// Where rate-limit state lives.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// What limiters do when the storage fails: [`FailPolicy::Fallback`]
    /// when the file gives a `fallback`, else [`FailPolicy::Open`] with
    /// `fail_open: true`, else [`FailPolicy::Closed`].
    pub fn fail_policy(&self) -> FailPolicy {
        self.fail_policy
    }

    /// The settings beside the policies that apply to `target`: for
    /// [`Target::Default`] (and any resource the file does not name), the
    /// file-wide ones under `tollgate`; for a named resource, those with the
    /// resource's own on top (its `exempt` and `deny` entries added to the
    /// file-wide ones, its `shadow`, `deny_cache` and `fallback` in place
    /// of the file-wide ones where it gives them).
    ///
    /// ```
    /// use tollgate_config::{Format, PolicyFile, Target};
    ///
    /// let file = PolicyFile::from_str(
    ///     r#"
    /// tollgate:
    ///   exempt: ["10.0.0.0/8"]
    ///   default: { limit: 100, window: 1m }
    ///   resources:
    ///     login: { limit: 5, window: 1m, shadow: true, exempt: [health-checker] }
    /// "#,
    ///     Format::Yaml,
    ///     "policies.yaml",
    /// )?;
    /// let login = file.settings(Target::Resource("login"));
    /// assert!(login.shadow);
    /// assert!(login.exempt.contains(b"10.1.2.3") && login.exempt.contains(b"health-checker"));
    /// let default = file.settings(Target::Default);
    /// assert!(!default.shadow && !default.exempt.contains(b"health-checker"));
    /// # Ok::<(), tollgate_config::ConfigFileError>(())
    /// ```
    pub fn settings(&self, target: Target<'_>) -> Settings {
        match target {
            Target::Resource(name) => match self.own.get(name) {
                Some(own) => self.settings.with(own),
                None => self.settings.clone(),
            },
            Target::Default => self.settings.clone(),
        }
    }

    /// Whether the file gives any setting beside the policies (`exempt`,
    /// `deny`, `shadow`, `deny_cache`, `top_keys`, `fallback`), file-wide
    /// or for a resource; top keys kept by default do not count.
    pub fn has_settings(&self) -> bool {
        let untouched = Settings {
            top_keys: Some(tollgate::top::TopKeys::new()),
            ..Settings::default()
        };
        self.settings != untouched || !self.own.is_empty()
    }

    /// The file-wide settings, for the limiter builder.
    pub(crate) fn file_wide_settings(&self) -> &Settings {
        &self.settings
    }

    /// The settings resource `name` gives itself, if any.
    pub(crate) fn own_settings_of(&self, name: &str) -> Option<&Own> {
        self.own.get(name)
    }

    /// The prefix of every state key (`tollgate.key_prefix`, default
    /// `tollgate`).
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }
}

/// The database at `url` with the file's `postgres` settings.
fn postgres_storage(url: String, settings: Option<PostgresSettings>) -> PostgresStorage {
    let settings = settings.unwrap_or_default();
    let mut storage = PostgresStorage::new(url);
    storage.schema = settings.schema;
    storage.pool_size = settings.pool_size;
    storage.timeout = settings.timeout;
    storage.connect_timeout = settings.connect_timeout;
    storage.unlogged = settings.unlogged;
    storage.synchronous_commit = settings.synchronous_commit;
    storage
}

/// What a policy applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target<'a> {
    /// Every resource without its own policy.
    Default,
    /// One named resource.
    Resource(&'a str),
}

impl fmt::Display for Target<'_> {
    /// `default`, or the resource's name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Default => f.write_str("default"),
            Target::Resource(name) => f.write_str(name),
        }
    }
}

/// Where a policy file keeps rate-limit state.
///
/// `Debug` and `Display` hide any user name and password in the URLs, and
/// the primary's password under `redis_sentinel`.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Storage {
    /// In this process (no `redis_url`, `redis_cluster`, `redis_sentinel`
    /// or `postgres_url`).
    Memory,
    /// One Redis server (`redis_url`).
    Redis(String),
    /// A Redis Cluster, reached through these seed URLs (`redis_cluster`).
    RedisCluster(Vec<String>),
    /// The primary that Redis Sentinel names (`redis_sentinel`).
    RedisSentinel {
        /// The name the sentinels monitor the primary by
        /// (`redis_sentinel.master`).
        master: String,
        /// The sentinels' URLs (`redis_sentinel.urls`); a password in one
        /// is that sentinel's.
        urls: Vec<String>,
        /// The primary's ACL user (`redis_sentinel.username`); `None` for
        /// the `default` user.
        username: Option<String>,
        /// The primary's password (`redis_sentinel.password`), if it has
        /// one.
        password: Option<String>,
        /// The primary's database number (`redis_sentinel.db`, default 0).
        db: i64,
    },
    /// A PostgreSQL database (`postgres_url`, with the settings under
    /// `postgres`).
    Postgres(PostgresStorage),
}

impl Storage {
    /// The field that names this store in a policy file (`None` for
    /// memory, which no field names).
    pub(crate) fn field(&self) -> Option<&'static str> {
        match self {
            Storage::Memory => None,
            Storage::Redis(_) => Some("tollgate.redis_url"),
            Storage::RedisCluster(_) => Some("tollgate.redis_cluster"),
            Storage::RedisSentinel { .. } => Some("tollgate.redis_sentinel"),
            Storage::Postgres(_) => Some("tollgate.postgres_url"),
        }
    }
}

impl fmt::Display for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Storage::Memory => f.write_str("in memory"),
            Storage::Redis(url) => write!(f, "Redis at {}", redact_url(url)),
            Storage::Postgres(postgres) => postgres.fmt(f),
            Storage::RedisCluster(seeds) => {
                let seeds: Vec<String> = seeds.iter().map(|s| redact_url(s)).collect();
                write!(f, "Redis Cluster through {}", seeds.join(", "))
            }
            Storage::RedisSentinel {
                master,
                urls,
                username,
                password,
                db,
            } => {
                let urls: Vec<String> = urls.iter().map(|s| redact_url(s)).collect();
                write!(f, "Redis primary {master:?}")?;
                let mut login = Vec::new();
                if let Some(username) = username {
                    login.push(format!("user {username:?}"));
                }
                if password.is_some() {
                    login.push("password ***".to_owned());
                }
                if *db != 0 {
                    login.push(format!("database {db}"));
                }
                if !login.is_empty() {
                    write!(f, " ({})", login.join(", "))?;
                }
                write!(f, " through Sentinel {}", urls.join(", "))
            }
        }
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Storage::Memory => f.write_str("Memory"),
            Storage::Redis(url) => f.debug_tuple("Redis").field(&redact_url(url)).finish(),
            Storage::Postgres(postgres) => f.debug_tuple("Postgres").field(postgres).finish(),
            Storage::RedisCluster(seeds) => f
                .debug_tuple("RedisCluster")
                .field(&seeds.iter().map(|s| redact_url(s)).collect::<Vec<_>>())
                .finish(),
            Storage::RedisSentinel {
                master,
                urls,
                username,
                password,
                db,
            } => f
                .debug_struct("RedisSentinel")
                .field("master", master)
                .field("urls", &urls.iter().map(|s| redact_url(s)).collect::<Vec<_>>())
                .field("username", username)
                .field("password", &password.as_ref().map(|_| "***"))
                .field("db", db)
                .finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_credentials() {
        let storage = Storage::Redis("redis://user:s3cret@cache:6379/1".to_owned());
        assert_eq!(storage.to_string(), "Redis at redis://user:***@cache:6379/1");
        assert!(!format!("{storage:?}").contains("s3cret"));
        let cluster =
            Storage::RedisCluster(vec!["redis://:pw@a:7000".to_owned(), "redis://b:7001".to_owned()]);
        assert_eq!(
            cluster.to_string(),
            "Redis Cluster through redis://:***@a:7000, redis://b:7001"
        );
        assert!(!format!("{cluster:?}").contains("pw"));
        let mut sentinel = Storage::RedisSentinel {
            master: "main".to_owned(),
            urls: vec!["redis://:pw@a:26379".to_owned(), "redis://b:26379".to_owned()],
            username: None,
            password: None,
            db: 0,
        };
        assert_eq!(
            sentinel.to_string(),
            "Redis primary \"main\" through Sentinel redis://:***@a:26379, redis://b:26379"
        );
        assert!(!format!("{sentinel:?}").contains("pw"));
        if let Storage::RedisSentinel {
            username,
            password,
            db,
            ..
        } = &mut sentinel
        {
            *username = Some("limiter".to_owned());
            *password = Some("primary-s3cret".to_owned());
            *db = 2;
        }
        assert_eq!(
            sentinel.to_string(),
            "Redis primary \"main\" (user \"limiter\", password ***, database 2) through Sentinel \
             redis://:***@a:26379, redis://b:26379"
        );
        let debug = format!("{sentinel:?}");
        assert!(!debug.contains("s3cret") && debug.contains("\"***\""), "{debug}");
    }
}
