//! One policy as written: a single limit (`limit`, `window`, optionally
//! `strategy`), or `limits`, a list of such limits decided together (a
//! compound policy); a resource's also with its settings. Mistakes are
//! reported at the value they concern, an element of `limits` by its index
//! (`limits[1].window`).

use std::fmt;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use tollgate::{ConfigError, Limit, Policy, Strategy, MAX_LIMITS};

use crate::fields::{deserialize_any_with, next};
use crate::settings::{RawSettings, SettingField};
use crate::values::{self, StrategyName, Window};

/// One policy entry, as written.
pub(crate) enum RawPolicy {
    /// `limit`, `window` and optionally `strategy`.
    One(RawLimit),
    /// `limits`: one or more limits, decided together.
    Several(Vec<RawLimit>),
}

/// One limit, as written; without `strategy` it takes the file's
/// `tollgate.strategy` when the policy is resolved.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawLimit {
    limit: u64,
    window: Duration,
    strategy: Option<Strategy>,
}

impl RawPolicy {
    /// The validated policy, each limit that names no strategy taking
    /// `fallback`.
    ///
    /// # Errors
    ///
    /// The core's [`ConfigError`], its field relative to the policy (such
    /// as `limits[1]`): two limits that share a strategy and a window once
    /// `fallback` fills in the strategy one of them leaves out. (Everything
    /// that can be checked without `fallback` is checked, with its line,
    /// while the file is read.)
    pub(crate) fn policy(&self, fallback: Strategy) -> Result<Policy, ConfigError> {
        let limits = match self {
            RawPolicy::One(limit) => return limit.resolve(fallback).map(Policy::from),
            RawPolicy::Several(limits) => limits,
        };
        let resolved = limits
            .iter()
            .enumerate()
            .map(|(i, limit)| {
                limit
                    .resolve(fallback)
                    .map_err(|e| e.within(format!("limits[{i}]")))
            })
            .collect::<Result<Vec<Limit>, _>>()?;
        Policy::compound(resolved).map_err(|err| {
            if limits.iter().any(|l| l.strategy.is_none()) {
                let reason = format!(
                    "{}; a limit without `strategy` takes `tollgate.strategy`, here {fallback}",
                    err.reason()
                );
                ConfigError::new(err.field().to_owned(), reason)
            } else {
                err
            }
        })
    }
}

impl RawLimit {
    /// The limit, with `fallback` when it names no strategy.
    fn resolve(&self, fallback: Strategy) -> Result<Limit, ConfigError> {
        Limit::new(self.strategy.unwrap_or(fallback), self.limit, self.window)
    }
}

/// What a policy that is not a map was expected to be.
const EXPECTING_POLICY: &str = "a policy: a map with `limit`, `window` and optionally `strategy`, or \
                                with `limits`, a list of such maps";

/// Where a policy is written, which decides the fields it may give beside
/// its limits.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// `tollgate.default`: its settings are the file-wide ones.
    Default,
    /// A resource: its limits and its own settings.
    Resource,
    /// A `fallback`: limits only.
    Fallback,
}

impl Place {
    /// The fields a policy here may give.
    fn fields(self) -> &'static [&'static str] {
        const LIMITS: &[&str] = &["limit", "window", "strategy", "limits"];
        const WITH_SETTINGS: &[&str] = &[
            "limit",
            "window",
            "strategy",
            "limits",
            "exempt",
            "deny",
            "shadow",
            "deny_cache",
            "fallback",
        ];
        match self {
            Place::Resource => WITH_SETTINGS,
            Place::Default | Place::Fallback => LIMITS,
        }
    }

    /// Why setting `name` is refused here (not in a resource).
    fn refuses(self, name: &str) -> String {
        match self {
            Place::Default => format!(
                "`{name}` is not set in `default`: set it under `tollgate`, where it applies to the \
                 default policy and to every resource (a resource may set its own)"
            ),
            Place::Resource | Place::Fallback => format!(
                "`{name}` is not part of a fallback policy, which gives only `limit`, `window` and \
                 `strategy`, or `limits`"
            ),
        }
    }
}

/// A resource's entry: its policy and its own settings.
pub(crate) struct RawEntry {
    pub(crate) policy: RawPolicy,
    pub(crate) settings: RawSettings,
}

impl<'de> Deserialize<'de> for RawEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PolicyVisitor(Place::Resource))
    }
}

/// `tollgate.default`: a policy without settings of its own.
pub(crate) struct DefaultPolicy(pub(crate) RawPolicy);

impl<'de> Deserialize<'de> for DefaultPolicy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entry = deserializer.deserialize_any(PolicyVisitor(Place::Default))?;
        Ok(DefaultPolicy(entry.policy))
    }
}

/// `fallback`: the policy that decides while the store fails, limits only.
pub(crate) struct FallbackPolicy(pub(crate) RawPolicy);

impl<'de> Deserialize<'de> for FallbackPolicy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entry = deserializer.deserialize_any(PolicyVisitor(Place::Fallback))?;
        Ok(FallbackPolicy(entry.policy))
    }
}

/// A field of a policy.
enum PolicyField {
    Limit,
    Window,
    Strategy,
    Limits,
    Setting(SettingField),
}

/// Reads a policy's field name, refusing the names its [`Place`] does not
/// take.
struct PolicyKey(Place);

impl<'de> DeserializeSeed<'de> for PolicyKey {
    type Value = PolicyField;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<PolicyField, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl Visitor<'_> for PolicyKey {
    type Value = PolicyField;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<PolicyField, E> {
        Ok(match name {
            "limit" => PolicyField::Limit,
            "window" => PolicyField::Window,
            "strategy" => PolicyField::Strategy,
            "limits" => PolicyField::Limits,
            _ => match SettingField::named(name) {
                Some(setting) if self.0 == Place::Resource => PolicyField::Setting(setting),
                Some(_) => return Err(E::custom(self.0.refuses(name))),
                None => return Err(E::unknown_field(name, self.0.fields())),
            },
        })
    }
}

/// `limits` given beside `field`, one of the fields of a single limit.
fn single_and_list(field: &str) -> String {
    format!(
        "`{field}` and `limits` are mutually exclusive: a policy is one limit (`limit`, `window` \
         and optionally `strategy`) or a list of limits (`limits`), not both"
    )
}

/// Reads a policy written at a [`Place`].
struct PolicyVisitor(Place);

impl<'de> Visitor<'de> for PolicyVisitor {
    type Value = RawEntry;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(EXPECTING_POLICY)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawEntry, A::Error> {
        let mut limit: Option<values::Limit> = None;
        let mut window: Option<Window> = None;
        let mut strategy: Option<StrategyName> = None;
        let mut limits: Option<LimitList> = None;
        let mut settings = RawSettings::default();
        while let Some(field) = map.next_key_seed(PolicyKey(self.0))? {
            // A field of one limit after `limits`, or `limits` after one.
            let listed = limits.is_some();
            let single = [
                ("limit", limit.is_some()),
                ("window", window.is_some()),
                ("strategy", strategy.is_some()),
            ]
            .into_iter()
            .find(|(_, given)| *given)
            .map(|(name, _)| name);
            let beside_list = |name: &str| listed.then(|| single_and_list(name));
            match field {
                PolicyField::Limit => limit = Some(next(&mut map, &limit, |_| beside_list("limit"))?),
                PolicyField::Window => window = Some(next(&mut map, &window, |_| beside_list("window"))?),
                PolicyField::Strategy => {
                    strategy = Some(next(&mut map, &strategy, |_| beside_list("strategy"))?);
                }
                PolicyField::Limits => {
                    limits = Some(next(&mut map, &limits, |_| single.map(single_and_list))?);
                }
                PolicyField::Setting(setting) => settings.read(setting, &mut map, None)?,
            }
        }
        let policy = match limits {
            Some(LimitList(limits)) => RawPolicy::Several(limits),
            None => RawPolicy::One(RawLimit {
                limit: limit.ok_or_else(|| de::Error::missing_field("limit"))?.0,
                window: window.ok_or_else(|| de::Error::missing_field("window"))?.0,
                strategy: strategy.map(|s| s.0),
            }),
        };
        Ok(RawEntry { policy, settings })
    }
}

/// One element of `limits`: a map with `limit`, `window` and optionally
/// `strategy`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitFields {
    limit: values::Limit,
    window: Window,
    #[serde(default)]
    strategy: Option<StrategyName>,
}

/// One element of `limits`, read after the elements `before` and checked
/// against them ([`check_another`]). The check runs inside the element's
/// map, so that every format reports it at the element's line.
struct AnotherLimit<'a> {
    before: &'a [RawLimit],
}

impl<'de> DeserializeSeed<'de> for AnotherLimit<'_> {
    type Value = RawLimit;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawLimit, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AnotherLimit<'_> {
    type Value = RawLimit;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a limit: a map with `limit`, `window` and optionally `strategy`")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawLimit, A::Error> {
        let fields = LimitFields::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let limit = RawLimit {
            limit: fields.limit.0,
            window: fields.window.0,
            strategy: fields.strategy.map(|s| s.0),
        };
        check_another(self.before, limit).map_err(de::Error::custom)?;
        Ok(limit)
    }
}

/// `limits`: one to [`MAX_LIMITS`] limits, no two with the same strategy
/// and window.
struct LimitList(Vec<RawLimit>);

deserialize_any_with!(LimitList, LimitListVisitor);

struct LimitListVisitor;

impl<'de> Visitor<'de> for LimitListVisitor {
    type Value = LimitList;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of limits, each a map with `limit`, `window` and optionally `strategy`")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<LimitList, A::Error> {
        let mut limits: Vec<RawLimit> = Vec::new();
        while let Some(limit) = seq.next_element_seed(AnotherLimit { before: &limits })? {
            limits.push(limit);
        }
        if limits.is_empty() {
            return Err(de::Error::custom(
                "lists no limit; give at least one, or give one limit with `limit` and `window` \
                 instead of `limits`",
            ));
        }
        Ok(LimitList(limits))
    }
}

/// Checks `limit`, read after `before`: within [`MAX_LIMITS`], and not the
/// strategy and window of an earlier limit as written (both naming the
/// same strategy, or both none). A limit that names a strategy and one that
/// takes `tollgate.strategy` are compared once the file is read
/// ([`RawPolicy::policy`]).
fn check_another(before: &[RawLimit], limit: RawLimit) -> Result<(), String> {
    if before.len() >= MAX_LIMITS {
        return Err(format!(
            "one limit too many: a policy holds at most {MAX_LIMITS} limits"
        ));
    }
    let same = |other: &RawLimit| other.strategy == limit.strategy && other.window == limit.window;
    let Some(j) = before.iter().position(same) else {
        return Ok(());
    };
    let window = humantime::format_duration(limit.window);
    let what = match limit.strategy {
        Some(strategy) => {
            format!("has the same strategy and window as limits[{j}] ({strategy} per {window})")
        }
        None => format!(
            "has the same window as limits[{j}] ({window}) and, like it, no `strategy` (both take \
             `tollgate.strategy`)"
        ),
    };
    Err(format!(
        "{what}; keep only the smaller limit, the larger could never deny"
    ))
}
