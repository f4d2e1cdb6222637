//! The file's structure: the `tollgate` section and its resources, with
//! unknown, missing, repeated and conflicting fields reported at the value
//! they concern (policies are in [`crate::policy_entry`] and
//! [`crate::raw_policy`], the settings beside them in [`crate::settings`],
//! the values themselves in [`crate::values`] and
//! [`crate::setting_values`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use tollgate::Strategy;

use crate::fields::{next, Checked, MapOf};
use crate::policy_entry::{DefaultPolicy, RawEntry};
use crate::postgres_values::{PostgresSettings, PostgresUrl};
use crate::raw_policy::RawPolicy;
use crate::setting_field::SettingField;
use crate::settings::{fail_open_and_fallback, fallback_without_file_wide, RawSettings};
use crate::values::{
    Database, Flag, KeyPrefix, PrimaryName, PrimaryPassword, PrimaryUser, RedisUrl, Seeds, SentinelUrls,
    StrategyName,
};

/// The whole file: one `tollgate` section.
pub(crate) struct Root {
    pub(crate) tollgate: Section,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RootFields {
    tollgate: Section,
}

impl<'de> Deserialize<'de> for Root {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields: RootFields =
            deserializer.deserialize_any(MapOf::new("a map with a `tollgate` section"))?;
        Ok(Root {
            tollgate: fields.tollgate,
        })
    }
}

/// The `tollgate` section, as written.
pub(crate) struct Section {
    pub(crate) strategy: Option<Strategy>,
    pub(crate) redis_url: Option<String>,
    pub(crate) redis_cluster: Option<Vec<String>>,
    pub(crate) redis_sentinel: Option<SentinelSection>,
    pub(crate) postgres_url: Option<String>,
    /// The settings of PostgreSQL's connections (`postgres`), given only
    /// beside `postgres_url`.
    pub(crate) postgres: Option<PostgresSettings>,
    pub(crate) fail_open: Option<bool>,
    pub(crate) key_prefix: Option<String>,
    pub(crate) default: RawPolicy,
    pub(crate) resources: BTreeMap<String, RawEntry>,
    /// The file-wide settings, which the default policy takes.
    pub(crate) settings: RawSettings,
}

/// `redis_sentinel`, as written: the primary's name, the sentinels' URLs,
/// and the primary's credentials and database.
pub(crate) struct SentinelSection {
    pub(crate) master: String,
    pub(crate) urls: Vec<String>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
}

/// `redis_sentinel`: a map with `master` and `urls`; both empty (for example
/// from unset environment variables) means no Redis.
struct RedisSentinel(Option<SentinelSection>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SentinelFields {
    master: PrimaryName,
    urls: SentinelUrls,
    #[serde(default)]
    username: Option<PrimaryUser>,
    #[serde(default)]
    password: Option<PrimaryPassword>,
    #[serde(default)]
    db: Option<Database>,
}

impl<'de> Deserialize<'de> for RedisSentinel {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RedisSentinelVisitor)
    }
}

struct RedisSentinelVisitor;

impl<'de> Visitor<'de> for RedisSentinelVisitor {
    type Value = RedisSentinel;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a map with `master` (the primary's name) and `urls` (the sentinels' URLs), and \
             optionally the primary's `password`, `username` and `db`",
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RedisSentinel, A::Error> {
        let fields = SentinelFields::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let username = fields.username.and_then(|u| u.0);
        let password = fields.password.and_then(|p| p.0);
        if username.is_some() && password.is_none() {
            return Err(de::Error::custom(
                "`username` is given but `password` is not: Redis logs a user in with both",
            ));
        }
        match (fields.master.0, fields.urls.0) {
            (Some(master), Some(urls)) => Ok(RedisSentinel(Some(SentinelSection {
                master,
                urls,
                username,
                password,
                db: fields.db.map_or(0, |db| db.0),
            }))),
            (None, None) => Ok(RedisSentinel(None)),
            (None, Some(_)) => Err(de::Error::custom(
                "`master` is empty but `urls` is not: give the name the sentinels monitor the \
                 primary by",
            )),
            (Some(_), None) => Err(de::Error::custom(
                "`urls` is empty but `master` is not: give at least one sentinel URL",
            )),
        }
    }

    fn visit_unit<E: de::Error>(self) -> Result<RedisSentinel, E> {
        Ok(RedisSentinel(None))
    }

    fn visit_none<E: de::Error>(self) -> Result<RedisSentinel, E> {
        Ok(RedisSentinel(None))
    }
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum SectionField {
    Strategy,
    RedisUrl,
    RedisCluster,
    RedisSentinel,
    PostgresUrl,
    Postgres,
    FailOpen,
    KeyPrefix,
    Default,
    Resources,
    Exempt,
    Deny,
    Shadow,
    DenyCache,
    TopKeys,
    Lease,
    Charge,
    Fallback,
}

/// The fields that name where state lives, in the order messages name them.
const STORAGE_FIELDS: [&str; 4] = ["redis_url", "redis_cluster", "redis_sentinel", "postgres_url"];

/// The error of `field` given beside `other`, both naming where state lives.
fn exclusive(field: &str, other: &str) -> String {
    let position = |name: &str| STORAGE_FIELDS.iter().position(|f| *f == name);
    let (first, second) = if position(field) < position(other) {
        (field, other)
    } else {
        (other, field)
    };
    if second == "postgres_url" {
        return format!(
            "`{first}` and `postgres_url` are mutually exclusive: state lives in one store, Redis \
             (`redis_url`, `redis_cluster` or `redis_sentinel`) or PostgreSQL (`postgres_url`); \
             remove one of them"
        );
    }
    format!(
        "`{first}` and `{second}` are mutually exclusive: give one server's URL (`redis_url`), a \
         cluster's seed URLs (`redis_cluster`) or a primary's sentinels (`redis_sentinel`), not \
         several"
    )
}

/// Which storage field, if any, is already set among `given` (name, set).
fn storage_given<const N: usize>(given: [(&'static str, bool); N]) -> Option<&'static str> {
    given.into_iter().find(|(_, set)| *set).map(|(name, _)| name)
}

/// The fields of a section that name where state lives, as read so far:
/// each may name a store only when the others do not.
#[derive(Default)]
struct StorageFields {
    redis_url: Option<RedisUrl>,
    redis_cluster: Option<Seeds>,
    redis_sentinel: Option<RedisSentinel>,
    postgres_url: Option<PostgresUrl>,
}

impl StorageFields {
    /// Whether `redis_url`, `redis_cluster`, `redis_sentinel` and
    /// `postgres_url`, in that order, name a store so far.
    fn given(&self) -> (bool, bool, bool, bool) {
        (
            self.redis_url.as_ref().is_some_and(|u| u.0.is_some()),
            self.redis_cluster.as_ref().is_some_and(|c| c.0.is_some()),
            self.redis_sentinel.as_ref().is_some_and(|s| s.0.is_some()),
            self.postgres_url.as_ref().is_some_and(|u| u.0.is_some()),
        )
    }

    /// Reads `redis_url`: a server's URL, refused beside a cluster or
    /// sentinels given already.
    fn read_url<'de, A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<(), A::Error> {
        let (_, cluster, sentinel, postgres) = self.given();
        let other = storage_given([
            ("redis_cluster", cluster),
            ("redis_sentinel", sentinel),
            ("postgres_url", postgres),
        ]);
        self.redis_url = Some(next(map, &self.redis_url, |url: &RedisUrl| {
            other
                .filter(|_| url.0.is_some())
                .map(|o| exclusive("redis_url", o))
        })?);
        Ok(())
    }

    /// Reads `redis_cluster`: a cluster's seed URLs, refused beside a
    /// server's URL or sentinels given already.
    fn read_cluster<'de, A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<(), A::Error> {
        let (url, _, sentinel, postgres) = self.given();
        let other = storage_given([
            ("redis_url", url),
            ("redis_sentinel", sentinel),
            ("postgres_url", postgres),
        ]);
        self.redis_cluster = Some(next(map, &self.redis_cluster, |seeds: &Seeds| {
            other
                .filter(|_| seeds.0.is_some())
                .map(|o| exclusive("redis_cluster", o))
        })?);
        Ok(())
    }

    /// Reads `redis_sentinel`: a primary's sentinels, refused beside a
    /// server's URL or a cluster given already.
    fn read_sentinel<'de, A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<(), A::Error> {
        let (url, cluster, _, postgres) = self.given();
        let other = storage_given([
            ("redis_url", url),
            ("redis_cluster", cluster),
            ("postgres_url", postgres),
        ]);
        self.redis_sentinel = Some(next(map, &self.redis_sentinel, |sentinel: &RedisSentinel| {
            other
                .filter(|_| sentinel.0.is_some())
                .map(|o| exclusive("redis_sentinel", o))
        })?);
        Ok(())
    }

    /// Reads `postgres_url`: a PostgreSQL database, refused beside any
    /// Redis store given already.
    fn read_postgres<'de, A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<(), A::Error> {
        let (url, cluster, sentinel, _) = self.given();
        let other = storage_given([
            ("redis_url", url),
            ("redis_cluster", cluster),
            ("redis_sentinel", sentinel),
        ]);
        self.postgres_url = Some(next(map, &self.postgres_url, |postgres: &PostgresUrl| {
            other
                .filter(|_| postgres.0.is_some())
                .map(|o| exclusive("postgres_url", o))
        })?);
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Section {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SectionVisitor)
    }
}

struct SectionVisitor;

impl<'de> Visitor<'de> for SectionVisitor {
    type Value = Section;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the `tollgate` section: a map with `default` and optionally `resources`, `strategy`, \
             `redis_url`, `redis_cluster`, `redis_sentinel`, `postgres_url`, `postgres`, `fail_open`, `key_prefix`, `exempt`, \
             `deny`, `shadow`, `deny_cache`, `top_keys`, `lease`, `charge` and `fallback`",
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Section, A::Error> {
        let mut strategy: Option<StrategyName> = None;
        let mut storage = StorageFields::default();
        let mut postgres: Option<PostgresSettings> = None;
        let mut fail_open: Option<Flag> = None;
        let mut key_prefix: Option<KeyPrefix> = None;
        let mut default: Option<DefaultPolicy> = None;
        let mut resources: Option<Resources> = None;
        let mut settings = RawSettings::default();
        while let Some(field) = map.next_key::<SectionField>()? {
            match field {
                SectionField::Strategy => {
                    strategy = Some(next(&mut map, &strategy, |s: &StrategyName| {
                        s.0.is_concurrency().then(concurrency_by_default)
                    })?);
                }
                SectionField::RedisUrl => storage.read_url(&mut map)?,
                SectionField::RedisCluster => storage.read_cluster(&mut map)?,
                SectionField::RedisSentinel => storage.read_sentinel(&mut map)?,
                SectionField::PostgresUrl => storage.read_postgres(&mut map)?,
                SectionField::Postgres => {
                    let without_url = storage.postgres_url.is_none() && storage_named(&storage);
                    postgres = Some(next(&mut map, &postgres, |_| {
                        without_url.then(postgres_without_url)
                    })?);
                }
                SectionField::FailOpen => {
                    let fallback = settings.fallback.is_some();
                    fail_open = Some(next(&mut map, &fail_open, |open: &Flag| {
                        (open.0 && fallback).then(fail_open_and_fallback)
                    })?);
                }
                SectionField::KeyPrefix => key_prefix = Some(next(&mut map, &key_prefix, |_| None)?),
                SectionField::Default => default = Some(next(&mut map, &default, |_| None)?),
                SectionField::Resources => resources = Some(next(&mut map, &resources, |_| None)?),
                SectionField::Exempt => settings.read(SettingField::Exempt, &mut map, None)?,
                SectionField::Deny => settings.read(SettingField::Deny, &mut map, None)?,
                SectionField::Shadow => settings.read(SettingField::Shadow, &mut map, None)?,
                SectionField::DenyCache => settings.read(SettingField::DenyCache, &mut map, None)?,
                SectionField::TopKeys => settings.read(SettingField::TopKeys, &mut map, None)?,
                SectionField::Lease => settings.read(SettingField::Lease, &mut map, None)?,
                SectionField::Charge => settings.read(SettingField::Charge, &mut map, None)?,
                SectionField::Fallback => {
                    let open = fail_open.as_ref().is_some_and(|f| f.0);
                    settings.read(
                        SettingField::Fallback,
                        &mut map,
                        open.then(fail_open_and_fallback),
                    )?;
                }
            }
        }
        let default = default.ok_or_else(|| de::Error::missing_field("default"))?.0;
        let resources = resources.map(|r| r.0).unwrap_or_default();
        check_section(&settings, &resources, &storage, postgres.is_some()).map_err(de::Error::custom)?;
        Ok(Section {
            strategy: strategy.map(|s| s.0),
            redis_url: storage.redis_url.and_then(|u| u.0),
            redis_cluster: storage.redis_cluster.and_then(|s| s.0),
            redis_sentinel: storage.redis_sentinel.and_then(|s| s.0),
            postgres_url: storage.postgres_url.and_then(|u| u.0),
            postgres,
            fail_open: fail_open.map(|f| f.0),
            key_prefix: key_prefix.map(|p| p.0),
            default,
            resources,
            settings,
        })
    }
}

/// `resources`: a map from resource names to policies.
struct Resources(BTreeMap<String, RawEntry>);

impl<'de> Deserialize<'de> for Resources {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ResourcesVisitor)
    }
}

struct ResourcesVisitor;

impl<'de> Visitor<'de> for ResourcesVisitor {
    type Value = Resources;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map from resource names to policies")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Resources, A::Error> {
        let mut resources = BTreeMap::new();
        while let Some(ResourceName(name)) = map.next_key()? {
            let twice = resources.contains_key(&name);
            let entry = map.next_value_seed(Checked::new(|entry: RawEntry| {
                if twice {
                    Err("this resource is defined twice".to_owned())
                } else {
                    Ok(entry)
                }
            }))?;
            resources.insert(name, entry);
        }
        Ok(Resources(resources))
    }
}

/// A resource name: any non-empty text (not expanded: it is a key).
struct ResourceName(String);

impl<'de> Deserialize<'de> for ResourceName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(ResourceNameVisitor)
    }
}

struct ResourceNameVisitor;

impl Visitor<'_> for ResourceNameVisitor {
    type Value = ResourceName;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a resource name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<ResourceName, E> {
        let name = crate::env::unshield_braces(name);
        check_resource_name(&name).map_err(E::custom)?;
        Ok(ResourceName(name.into_owned()))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<ResourceName, E> {
        Ok(ResourceName(n.to_string()))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<ResourceName, E> {
        Ok(ResourceName(n.to_string()))
    }
}

/// Checks a resource name by the core's rule ([`tollgate::Limiters::check_resource_name`]:
/// not empty, no control characters), so a name the file accepts is one a
/// limiter and a trace accept too.
fn check_resource_name(name: &str) -> Result<(), String> {
    tollgate::Limiters::check_resource_name(name).map_err(|e| e.reason().to_owned())
}

/// `tollgate.strategy: concurrency`, refused: the file's strategy is the
/// rate every policy that names none takes, and a concurrency limit is
/// named where it is meant.
fn concurrency_by_default() -> String {
    "concurrency cannot be every policy's strategy: give `strategy: concurrency` (with `limit` and \
     `ttl`) on the policies it is meant for"
        .to_owned()
}

/// What can only be checked once the section is read (reported at the
/// section): a resource's `fallback` needs the file-wide one, and
/// `postgres` needs `postgres_url`.
fn check_section(
    settings: &RawSettings,
    resources: &BTreeMap<String, RawEntry>,
    storage: &StorageFields,
    postgres_given: bool,
) -> Result<(), String> {
    if settings.fallback.is_none() {
        if let Some((name, _)) = resources.iter().find(|(_, r)| r.settings.fallback.is_some()) {
            return Err(fallback_without_file_wide(name));
        }
    }
    if postgres_given && storage.postgres_url.is_none() {
        return Err(postgres_without_url());
    }
    Ok(())
}

/// Whether a Redis store is named already: `postgres` beside one is
/// refused at once (no `postgres_url` may follow it).
fn storage_named(storage: &StorageFields) -> bool {
    let (url, cluster, sentinel, _) = storage.given();
    url || cluster || sentinel
}

/// The message of `postgres` without `postgres_url`.
fn postgres_without_url() -> String {
    "`postgres` is given but `postgres_url` is not: these settings are those of the PostgreSQL \
     connections; give `postgres_url` (it may be empty, as `${DATABASE_URL:-}`, for state in \
     memory) or remove `postgres`"
        .to_owned()
}
