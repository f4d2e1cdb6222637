//! Envoy rate-limit configuration files, in the YAML format of Envoy's
//! reference rate-limit service: a `domain` and a tree of `descriptors`,
//! each with a `key`, an optional `value`, an optional `rate_limit`
//! (`unit` and `requests_per_unit`, or `unlimited: true`, with an optional
//! `name`, `replaces` and `calendar`), `shadow_mode`, `quota_mode`,
//! `detailed_metric`, `value_to_metric`, `share_threshold`, `metadata`,
//! `charge` and nested `descriptors`; and tollgate's own `calendar` beside
//! the `domain`.

use serde::Deserialize;
use serde_path_to_error::Track;
use serde_saphyr::{MessageFormatter as _, Spanned};

use tollgate::calendar::{Calendar, Period};

use crate::envoy::descriptors::{resource_name, Level, Node, Step};
use crate::envoy::unit::Unit;
use crate::error::ConfigFileError;
use crate::load::field_path;

/// What a configured descriptor enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RateLimit {
    /// `unlimited: true`: always OK, nothing counted.
    Unlimited,
    /// `requests_per_unit` per `unit` (0: every request is over the limit).
    PerUnit {
        /// The window: one `unit`.
        unit: Unit,
        /// `requests_per_unit`: how many requests each window admits.
        requests: u32,
        /// The calendar the unit follows when the limit or its domain
        /// opts in (`calendar:`, for a unit of a day, week, month or
        /// year); `None`: Envoy's own fixed units from the epoch (a month
        /// of 30 days).
        calendar: Option<Calendar>,
    },
}

/// A configured limit: where it is, what it enforces and how.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rule {
    /// The resource name of its state: the domain and the descriptor's
    /// path, escaped (see the [module](crate::envoy)).
    pub resource: String,
    /// What it enforces.
    pub limit: RateLimit,
    /// `rate_limit.name`, which `replaces` of other limits refer to.
    pub name: Option<String>,
    /// The names of the limits this one replaces when both apply.
    pub replaces: Vec<String>,
    /// `shadow_mode`: decided and counted, but never OVER_LIMIT.
    pub shadow: bool,
    /// `quota_mode`: over its limit, the descriptor alone does not make
    /// the request OVER_LIMIT; the request is OVER_LIMIT when every
    /// descriptor of it in quota mode is (or another descriptor is), as in
    /// envoyproxy/ratelimit.
    pub quota: bool,
    /// `charge`: what a request is charged under this limit. `always`
    /// counts every hit, admitted or not, as envoyproxy/ratelimit's fixed
    /// window counts them (usage reported after the fact: a hit's
    /// `hits_addend` of tokens, sent after the response); `admitted`, the
    /// default, counts only the hits of requests that were not over the
    /// limit. A `hits_addend` of 0 stays a check that counts nothing.
    pub charge: tollgate::Charge,
    /// `detailed_metric`: the limit's decisions are counted under its own
    /// `resource` label; otherwise under its domain's (`envoy:DOMAIN`), so
    /// that a file of thousands of descriptors does not make thousands of
    /// series.
    pub detailed_metric: bool,
}

/// A parsed and validated Envoy configuration file.
#[derive(Debug)]
pub struct EnvoyFile {
    pub(crate) domain: String,
    /// The tree; a node's rule is its index in `rules`.
    pub(crate) root: Level<u32>,
    /// Every limit with its path, in file order.
    pub(crate) rules: Vec<Rule>,
}

impl EnvoyFile {
    /// The file's `domain`.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// Every limit the file configures, in file order (a descriptor before
    /// the descriptors nested in it).
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

/// Where a limit is written, for the checks that need every limit: names
/// and what they replace.
struct Site {
    name: Option<String>,
    replaces: Vec<String>,
    line: Option<usize>,
    /// The descriptor's field path, such as `descriptors[1]`.
    field: String,
}

/// The most descriptors a file may configure, at every level together:
/// room for large deployments, and a bound on the memory a file takes.
pub const MAX_DESCRIPTORS: usize = 100_000;

// A rule is named by its index as a `u32` in the tree.
const _: () = assert!(MAX_DESCRIPTORS <= u32::MAX as usize);

/// The deepest nesting of maps and lists the YAML may have (as for policy
/// files).
const MAX_YAML_DEPTH: usize = 80;

/// The most YAML nodes a file may hold: [`MAX_DESCRIPTORS`] descriptors of
/// a few fields each.
const MAX_YAML_NODES: usize = 20 * MAX_DESCRIPTORS;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    domain: String,
    /// tollgate's own: the calendar every day, week, month and year unit
    /// of the domain follows.
    #[serde(default)]
    calendar: Option<RawCalendar>,
    #[serde(default)]
    descriptors: Vec<RawDescriptor>,
}

/// `calendar`: the time zone and anchor a limit's unit follows as a
/// calendar period; the unit gives the period.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCalendar {
    #[serde(default)]
    time_zone: Option<String>,
    #[serde(default)]
    anchor: Option<String>,
}

impl RawCalendar {
    /// The calendar of `period` in this zone, from this anchor.
    fn of(&self, period: Period) -> Result<Calendar, tollgate::ConfigError> {
        Calendar::new(
            period,
            self.time_zone.as_deref().unwrap_or("UTC"),
            self.anchor.as_deref(),
        )
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescriptor {
    key: Spanned<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    rate_limit: Option<RawRateLimit>,
    #[serde(default)]
    shadow_mode: bool,
    /// See [`Rule::quota`].
    #[serde(default)]
    quota_mode: bool,
    /// Every value its wildcard matches counts as one.
    #[serde(default)]
    share_threshold: bool,
    /// envoyproxy/ratelimit's per-value metric names: read, and without
    /// effect here (metrics are by domain, or by limit with
    /// `detailed_metric`, never by request value, so that clients cannot
    /// make series without bound).
    #[serde(default)]
    #[allow(dead_code, reason = "read for compatibility, see the field's doc")]
    value_to_metric: bool,
    /// envoyproxy/ratelimit's metadata returned with a decision: read, and
    /// not returned here.
    #[serde(default)]
    #[allow(dead_code, reason = "read for compatibility, see the field's doc")]
    metadata: Option<serde::de::IgnoredAny>,
    /// `admitted` or `always` (see [`Rule::charge`]).
    #[serde(default)]
    charge: Option<String>,
    /// Metrics of its own (see [`Rule::detailed_metric`]).
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    descriptors: Vec<RawDescriptor>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    requests_per_unit: Option<RequestsPerUnit>,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    replaces: Vec<RawReplaces>,
    /// tollgate's own: the unit follows the calendar (see [`RawCalendar`]).
    #[serde(default)]
    calendar: Option<RawCalendar>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplaces {
    name: String,
}

impl EnvoyFile {
    /// Parses and validates `text`, the content of the file named `file`
    /// (as errors name it). [`crate::PolicySet::load`] reads files this way.
    ///
    /// # Errors
    ///
    /// A [`ConfigFileError`] with the line and the field path
    /// (`descriptors[1].rate_limit.unit`) of the first mistake.
    pub fn parse(text: &str, file: &str) -> Result<Self, ConfigFileError> {
        let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
        let mut track = Track::new();
        let mut options = serde_saphyr::Options::default();
        let mut budget = serde_saphyr::Budget::default();
        budget.max_depth = MAX_YAML_DEPTH;
        budget.flow_nesting_limit = MAX_YAML_DEPTH;
        budget.max_nodes = MAX_YAML_NODES;
        options.budget = Some(budget);
        let raw: RawFile = serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
            RawFile::deserialize(serde_path_to_error::Deserializer::new(de, &mut track))
        })
        .map_err(|err| {
            let line = err
                .location()
                .filter(|at| at.line() > 0)
                .map(|at| at.line() as usize);
            let message = serde_saphyr::UserMessageFormatter.format_message(&err);
            ConfigFileError::at(
                file,
                line,
                field_path(&track.path()),
                explain(message.into_owned()),
            )
        })?;
        if raw.domain.is_empty() {
            return Err(ConfigFileError::at(file, None, "domain", "must not be empty"));
        }
        if let Some(calendar) = &raw.calendar {
            // Checked once here (the month stands for every period), so
            // that a mistake is named at the domain's calendar.
            calendar.of(Period::Month).map_err(|e| {
                ConfigFileError::at(file, None, format!("calendar.{}", e.field()), e.reason())
            })?;
        }
        let mut out = EnvoyFile {
            domain: raw.domain,
            root: Level::default(),
            rules: Vec::new(),
        };
        let mut path = Vec::new();
        let mut root = Level::default();
        let mut sites = Vec::new();
        let mut count = 0;
        out.load_level(
            &mut root,
            raw.descriptors,
            "descriptors",
            &mut path,
            &mut Load {
                file,
                sites: &mut sites,
                count: &mut count,
                calendar: raw.calendar,
            },
        )?;
        check_names(&sites, file)?;
        out.root = root;
        Ok(out)
    }

    fn load_level(
        &mut self,
        level: &mut Level<u32>,
        descriptors: Vec<RawDescriptor>,
        field: &str,
        path: &mut Vec<Step>,
        load: &mut Load<'_>,
    ) -> Result<(), ConfigFileError> {
        let file = load.file;
        for (i, raw) in descriptors.into_iter().enumerate() {
            let field = format!("{field}[{i}]");
            let line = Some(raw.key.referenced.line() as usize).filter(|&l| l > 0);
            let error = |sub: &str, message: String| {
                ConfigFileError::at(file, line, format!("{field}{sub}"), message)
            };
            *load.count += 1;
            if *load.count > MAX_DESCRIPTORS {
                return Err(error(
                    "",
                    format!(
                        "the file configures more than {MAX_DESCRIPTORS} descriptors, the most one file may \
                         hold"
                    ),
                ));
            }
            if raw.key.value.is_empty() {
                return Err(error(".key", "must not be empty".to_owned()));
            }
            let flags = descriptor_flags(&raw, &error)?;
            let step = Step {
                key: raw.key.value,
                value: raw.value.filter(|v| !v.is_empty()),
            };
            path.push(step.clone());
            if raw.share_threshold && !step.value.as_deref().is_some_and(|v| v.contains('*')) {
                return Err(error(
                    ".share_threshold",
                    "is given on a descriptor whose value has no `*`: it makes every value a wildcard \
                     matches count as one"
                        .to_owned(),
                ));
            }
            let index = match raw.rate_limit {
                Some(rate) => {
                    let rule = self.rule(rate, flags, path, load.calendar.as_ref(), &error)?;
                    Some(self.push_rule(rule, load.sites, line, &field))
                }
                None => None,
            };
            let mut children = Level::default();
            self.load_level(
                &mut children,
                raw.descriptors,
                &format!("{field}.descriptors"),
                path,
                load,
            )?;
            path.pop();
            if !level.insert(&step, Node::new(index, children), raw.share_threshold) {
                let what = match &step.value {
                    Some(value) => format!("key {:?} with value {value:?}", step.key),
                    None => format!("key {:?} without a value", step.key),
                };
                return Err(error("", format!("{what} is configured twice at this level")));
            }
        }
        Ok(())
    }

    /// Adds `rule`, written at `line` and `field`, to the file's limits and
    /// its name and `replaces` to `sites` (for the checks that need every
    /// limit); returns its index, by which the tree names it.
    fn push_rule(&mut self, rule: Rule, sites: &mut Vec<Site>, line: Option<usize>, field: &str) -> u32 {
        sites.push(Site {
            name: rule.name.clone(),
            replaces: rule.replaces.clone(),
            line,
            field: field.to_owned(),
        });
        // At most MAX_DESCRIPTORS, checked as `load_level` counts descriptors.
        self.rules.push(rule);
        (self.rules.len() - 1) as u32
    }

    fn rule(
        &self,
        raw: RawRateLimit,
        flags: RuleFlags,
        path: &[Step],
        domain_calendar: Option<&RawCalendar>,
        error: &dyn Fn(&str, String) -> ConfigFileError,
    ) -> Result<Rule, ConfigFileError> {
        let limit = if raw.unlimited {
            if raw.unit.is_some() || raw.requests_per_unit.is_some() {
                return Err(error(
                    ".rate_limit",
                    "an unlimited rate limit takes no unit or requests_per_unit".to_owned(),
                ));
            }
            RateLimit::Unlimited
        } else {
            per_unit(&raw, domain_calendar, error)?
        };
        for (j, replaced) in raw.replaces.iter().enumerate() {
            let at = format!(".rate_limit.replaces[{j}].name");
            if replaced.name.is_empty() {
                return Err(error(&at, "must not be empty".to_owned()));
            }
            if raw.name.as_deref() == Some(replaced.name.as_str()) {
                return Err(error(&at, "a limit cannot replace itself".to_owned()));
            }
        }
        Ok(Rule {
            resource: resource_name(&self.domain, path),
            limit,
            name: raw.name.filter(|n| !n.is_empty()),
            replaces: raw.replaces.into_iter().map(|r| r.name).collect(),
            shadow: flags.shadow,
            quota: flags.quota,
            charge: flags.charge,
            detailed_metric: flags.detailed_metric,
        })
    }
}

/// The settings of the descriptor `raw` beside its `rate_limit`: its
/// modes and its `charge` (`admitted` when not given), which only a
/// descriptor with a `rate_limit` may give.
fn descriptor_flags(
    raw: &RawDescriptor,
    error: &dyn Fn(&str, String) -> ConfigFileError,
) -> Result<RuleFlags, ConfigFileError> {
    let charge = match raw.charge.as_deref() {
        None | Some("admitted") => tollgate::Charge::Admitted,
        Some("always") => tollgate::Charge::Always,
        Some(other) => {
            return Err(error(
                ".charge",
                format!(
                    "{other:?} is not `admitted` or `always`: `always` counts every hit, \
                     admitted or not (usage reported after the fact)"
                ),
            ))
        }
    };
    if raw.charge.is_some() && raw.rate_limit.is_none() {
        return Err(error(
            ".charge",
            "is given on a descriptor without a `rate_limit`: it says how that limit counts hits".to_owned(),
        ));
    }
    Ok(RuleFlags {
        shadow: raw.shadow_mode,
        quota: raw.quota_mode,
        detailed_metric: raw.detailed_metric,
        charge,
    })
}

/// The limit of a `rate_limit` that is not `unlimited`: its `unit` and
/// `requests_per_unit`, both required, and the calendar the unit follows
/// (see [`unit_calendar`]).
fn per_unit(
    raw: &RawRateLimit,
    domain_calendar: Option<&RawCalendar>,
    error: &dyn Fn(&str, String) -> ConfigFileError,
) -> Result<RateLimit, ConfigFileError> {
    let unit = raw.unit.as_deref().ok_or_else(|| {
        error(
            ".rate_limit.unit",
            "is required (or `unlimited: true`)".to_owned(),
        )
    })?;
    let unit = Unit::parse(unit).ok_or_else(|| {
        error(
            ".rate_limit.unit",
            format!("{unit:?} is not a unit: second, minute, hour, day, week, month or year"),
        )
    })?;
    let requests = raw
        .requests_per_unit
        .ok_or_else(|| {
            error(
                ".rate_limit.requests_per_unit",
                format!("is required: a whole number from 0 to {}", u32::MAX),
            )
        })?
        .0;
    let calendar = unit_calendar(unit, raw.calendar.as_ref(), domain_calendar, error)?;
    Ok(RateLimit::PerUnit {
        unit,
        requests,
        calendar,
    })
}

/// The calendar a limit of `unit` follows: its `own` calendar, else its
/// domain's, for a unit of a day, week, month or year (a calendar given
/// for a shorter unit is a mistake); none when neither is given.
fn unit_calendar(
    unit: Unit,
    own: Option<&RawCalendar>,
    domain_calendar: Option<&RawCalendar>,
    error: &dyn Fn(&str, String) -> ConfigFileError,
) -> Result<Option<Calendar>, ConfigFileError> {
    let period = match unit {
        Unit::Day => Some(Period::Day),
        Unit::Week => Some(Period::Week),
        Unit::Month => Some(Period::Month),
        Unit::Year => Some(Period::Year),
        Unit::Second | Unit::Minute | Unit::Hour => None,
    };
    Ok(match (own, period) {
        (Some(_), None) => {
            return Err(error(
                ".rate_limit.calendar",
                format!(
                    "is given for unit {}: a calendar applies to a unit of a day, week, month \
                     or year",
                    unit.name()
                ),
            ))
        }
        (Some(own), Some(period)) => Some(own.of(period).map_err(|e| {
            error(
                &format!(".rate_limit.calendar.{}", e.field()),
                e.reason().to_owned(),
            )
        })?),
        // The domain's, checked when the file was read.
        (None, Some(period)) => match domain_calendar {
            Some(domain) => Some(domain.of(period).map_err(|e| error("", e.to_string()))?),
            None => None,
        },
        (None, None) => None,
    })
}

/// A descriptor's settings beside its `rate_limit`.
#[derive(Clone, Copy)]
struct RuleFlags {
    shadow: bool,
    quota: bool,
    detailed_metric: bool,
    charge: tollgate::Charge,
}

/// What a file's load carries through the levels.
struct Load<'a> {
    file: &'a str,
    /// The domain's `calendar`, which a limit without its own follows.
    calendar: Option<RawCalendar>,
    sites: &'a mut Vec<Site>,
    /// Descriptors seen so far.
    count: &'a mut usize,
}

/// Limit names are unique, every `replaces` names a limit of the file, and
/// no limit replaces itself through others.
fn check_names(sites: &[Site], file: &str) -> Result<(), ConfigFileError> {
    let mut named: std::collections::HashMap<&str, &Site> = std::collections::HashMap::new();
    for site in sites {
        let Some(name) = site.name.as_deref() else {
            continue;
        };
        if let Some(first) = named.insert(name, site) {
            return Err(ConfigFileError::at(
                file,
                site.line,
                format!("{}.rate_limit.name", site.field),
                format!(
                    "the name {name:?} is given to {} already{}; limit names must be unique, since \
                     `replaces` refers to them",
                    first.field,
                    first.line.map(|l| format!(" (line {l})")).unwrap_or_default()
                ),
            ));
        }
    }
    for site in sites {
        for (j, replaced) in site.replaces.iter().enumerate() {
            if !named.contains_key(replaced.as_str()) {
                return Err(ConfigFileError::at(
                    file,
                    site.line,
                    format!("{}.rate_limit.replaces[{j}].name", site.field),
                    format!("no limit of the file is named {replaced:?}"),
                ));
            }
        }
    }
    // A cycle: following `replaces` from a limit leads back to it.
    for start in sites {
        let Some(start_name) = start.name.as_deref() else {
            continue;
        };
        let mut seen = std::collections::HashSet::new();
        let mut next: Vec<&str> = start.replaces.iter().map(String::as_str).collect();
        while let Some(name) = next.pop() {
            if name == start_name {
                return Err(ConfigFileError::at(
                    file,
                    start.line,
                    format!("{}.rate_limit.replaces", start.field),
                    format!(
                        "the limit {start_name:?} replaces itself through the limits it replaces; \
                         `replaces` must not form a cycle"
                    ),
                ));
            }
            if seen.insert(name) {
                if let Some(site) = named.get(name) {
                    next.extend(site.replaces.iter().map(String::as_str));
                }
            }
        }
    }
    Ok(())
}

/// `requests_per_unit`: a whole number from 0 to `u32::MAX`, or an error
/// naming that range.
#[derive(Clone, Copy)]
struct RequestsPerUnit(u32);

impl<'de> Deserialize<'de> for RequestsPerUnit {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = RequestsPerUnit;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "a whole number from 0 to {}", u32::MAX)
            }

            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<RequestsPerUnit, E> {
                u32::try_from(n).map(RequestsPerUnit).map_err(|_| {
                    E::custom(format!(
                        "{n} is above {}, the most requests per unit a limit may allow",
                        u32::MAX
                    ))
                })
            }

            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<RequestsPerUnit, E> {
                match u64::try_from(n) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::custom(format!(
                        "{n} is negative; requests_per_unit is a whole number from 0 to {}",
                        u32::MAX
                    ))),
                }
            }

            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<RequestsPerUnit, E> {
                Err(E::custom(format!(
                    "{n} is not a whole number from 0 to {}",
                    u32::MAX
                )))
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<RequestsPerUnit, E> {
                // YAML reads a number too large for 64 bits as text.
                if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(E::custom(format!(
                        "{text} is above {}, the most requests per unit a limit may allow",
                        u32::MAX
                    )));
                }
                Err(E::custom(format!(
                    "{text:?} is not a whole number from 0 to {}",
                    u32::MAX
                )))
            }

            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<RequestsPerUnit, E> {
                Err(E::custom(format!(
                    "{b} is not a whole number from 0 to {}",
                    u32::MAX
                )))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// serde's "missing field `x`" as "x is required".
fn explain(message: String) -> String {
    match message
        .strip_prefix("missing field `")
        .and_then(|m| m.strip_suffix('`'))
    {
        Some(name) => format!("`{name}` is required"),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn parse(text: &str) -> Result<EnvoyFile, ConfigFileError> {
        EnvoyFile::parse(text, "rl.yaml")
    }

    /// The rule that applies to a descriptor of `entries`.
    fn find<'f>(file: &'f EnvoyFile, entries: &[(&str, &str)]) -> Option<&'f Rule> {
        let index = file.root.find(entries.iter().copied())?;
        Some(&file.rules[*index as usize])
    }

    #[test]
    fn a_nested_configuration_becomes_rules_with_resources() {
        let file = parse(
            "domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: { unit: DAY, requests_per_unit: 5 }
  - key: to_number
    rate_limit: { unit: day, requests_per_unit: 100, name: all }
    shadow_mode: true
    charge: always
  - key: ldap
    rate_limit: { unlimited: true }
",
        )
        .unwrap();
        assert_eq!(file.domain, "messaging");
        let found = find(&file, &[("message_type", "marketing"), ("to_number", "1")]).unwrap();
        assert_eq!(found.resource, "messaging.message_type=marketing.to_number");
        assert_eq!(
            found.limit,
            RateLimit::PerUnit {
                unit: Unit::Day,
                requests: 5,
                calendar: None,
            }
        );
        let all = find(&file, &[("to_number", "1")]).unwrap();
        assert!(all.shadow);
        assert_eq!(all.charge, tollgate::Charge::Always);
        assert_eq!(found.charge, tollgate::Charge::Admitted);
        assert_eq!(all.name.as_deref(), Some("all"));
        assert_eq!(find(&file, &[("ldap", "x")]).unwrap().limit, RateLimit::Unlimited);
        // In file order.
        let resources: Vec<&str> = file.rules.iter().map(|r| r.resource.as_str()).collect();
        assert_eq!(
            resources,
            [
                "messaging.message_type=marketing.to_number",
                "messaging.to_number",
                "messaging.ldap"
            ]
        );
    }

    #[test]
    fn units_follow_the_calendar_where_the_domain_or_the_limit_opts_in() {
        let file = parse(
            "domain: billing\ncalendar: { time_zone: Europe/Berlin }\ndescriptors:\n  \
             - key: monthly\n    rate_limit: { unit: month, requests_per_unit: 10000 }\n  \
             - key: per_second\n    rate_limit: { unit: second, requests_per_unit: 5 }\n  \
             - key: from_the_15th\n    rate_limit:\n      unit: month\n      requests_per_unit: 100\n      \
             calendar: { time_zone: UTC, anchor: \"2026-01-15T00:00:00\" }\n",
        )
        .unwrap();
        let berlin = Calendar::new(Period::Month, "Europe/Berlin", None).unwrap();
        let the_15th = Calendar::new(Period::Month, "UTC", Some("2026-01-15T00:00:00")).unwrap();
        let limits: Vec<RateLimit> = file.rules.iter().map(|r| r.limit).collect();
        assert_eq!(
            limits,
            [
                RateLimit::PerUnit {
                    unit: Unit::Month,
                    requests: 10_000,
                    calendar: Some(berlin),
                },
                // Seconds, minutes and hours are the same in any calendar.
                RateLimit::PerUnit {
                    unit: Unit::Second,
                    requests: 5,
                    calendar: None,
                },
                RateLimit::PerUnit {
                    unit: Unit::Month,
                    requests: 100,
                    calendar: Some(the_15th),
                },
            ]
        );
        // Without `calendar`, Envoy's own units: a month of 30 days.
        let plain = parse(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: month, requests_per_unit: 1 }\n",
        )
        .unwrap();
        assert!(matches!(
            plain.rules[0].limit,
            RateLimit::PerUnit { calendar: None, .. }
        ));
    }

    #[test]
    fn calendar_mistakes_name_the_line_and_field() {
        let cases = [
            (
                "domain: d\ncalendar: { time_zone: Mars/Olympus }\n",
                "rl.yaml: calendar.time_zone: \"Mars/Olympus\" is not a time zone",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: hour, requests_per_unit: 1, calendar: {} }\n",
                "rl.yaml:3: descriptors[0].rate_limit.calendar: is given for unit hour: a calendar applies to a \
                 unit of a day, week, month or year",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: day, requests_per_unit: 1, calendar: { anchor: noon } }\n",
                "rl.yaml:3: descriptors[0].rate_limit.calendar.anchor: \"noon\" is not a local date and time",
            ),
        ];
        for (text, expected) in cases {
            let shown = parse(text).unwrap_err().to_string();
            assert!(shown.starts_with(expected), "{text}\n{shown}");
        }
    }

    #[test]
    fn mistakes_name_the_line_and_field() {
        let cases = [
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n",
                "rl.yaml:3: descriptors[0].rate_limit.unit: \"fortnight\" is not a unit: second, minute, \
                 hour, day, week, month or year",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n  - key: b\n    descriptors:\n      - key: c\n        \
                 rate_limit: { unit: second }\n",
                "rl.yaml:6: descriptors[1].descriptors[0].rate_limit.requests_per_unit: is required: a whole \
                 number from 0 to 4294967295",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: second, requests_per_unit: 1 }\n    \
                 charge: sometimes\n",
                "rl.yaml:3: descriptors[0].charge: \"sometimes\" is not `admitted` or `always`: `always` \
                 counts every hit, admitted or not (usage reported after the fact)",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    charge: always\n",
                "rl.yaml:3: descriptors[0].charge: is given on a descriptor without a `rate_limit`: it says \
                 how that limit counts hits",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n  - key: a\n",
                "rl.yaml:4: descriptors[1]: key \"a\" without a value is configured twice at this level",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unlimited: true, unit: second }\n",
                "rl.yaml:3: descriptors[0].rate_limit: an unlimited rate limit takes no unit or \
                 requests_per_unit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: x\n      unit: second\n      \
                 requests_per_unit: 1\n      replaces: [{ name: x }]\n",
                "rl.yaml:3: descriptors[0].rate_limit.replaces[0].name: a limit cannot replace itself",
            ),
            ("domain: \"\"\n", "rl.yaml: domain: must not be empty"),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text).unwrap_err().to_string(), expected, "{text}");
        }
    }

    #[test]
    fn type_errors_and_unknown_fields_are_located_by_the_parser() {
        let err = parse(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: second, requests_per_unit: -1 }\n",
        )
        .unwrap_err();
        assert_eq!(err.line(), Some(4));
        assert_eq!(err.field(), "descriptors[0].rate_limit.requests_per_unit");
        let err = parse("domain: d\ndescriptors:\n  - key: a\n    rate_limt: {}\n").unwrap_err();
        assert_eq!(err.line(), Some(4));
        assert!(err.message().contains("rate_limt"), "{err}");
        let err = parse("descriptors: []\n").unwrap_err();
        assert!(err.message().contains("`domain` is required"), "{err}");
    }

    #[test]
    fn requests_per_unit_errors_name_the_range() {
        let rate = |requests: &str| {
            parse(&format!(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{ unit: second, requests_per_unit: {requests} }}\n"
            ))
        };
        for bad in ["-1", "4294967296", "1.5", "many", "18446744073709551616"] {
            let err = rate(bad).unwrap_err();
            assert_eq!(
                err.field(),
                "descriptors[0].rate_limit.requests_per_unit",
                "{bad}: {err}"
            );
            assert_eq!(err.line(), Some(4), "{bad}: {err}");
            assert!(err.message().contains("4294967295"), "{bad}: {err}");
        }
        assert!(rate("4294967295").is_ok());
        assert!(rate("0").is_ok());
        let err =
            parse("domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: second }\n").unwrap_err();
        assert!(err.message().contains("from 0 to 4294967295"), "{err}");
    }

    #[test]
    fn names_and_replaces_are_checked_at_load() {
        let cases = [
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: second, requests_per_unit: 1, \
                 replaces: [{ name: nowhere }] }\n",
                "rl.yaml:3: descriptors[0].rate_limit.replaces[0].name: no limit of the file is named \"nowhere\"",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: second, requests_per_unit: 1, name: x }\n  \
                 - key: b\n    rate_limit: { unit: second, requests_per_unit: 1, name: x }\n",
                "rl.yaml:5: descriptors[1].rate_limit.name: the name \"x\" is given to descriptors[0] already \
                 (line 3); limit names must be unique, since `replaces` refers to them",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: second, requests_per_unit: 1, name: x, \
                 replaces: [{ name: y }] }\n  - key: b\n    rate_limit: { unit: second, requests_per_unit: 1, \
                 name: y, replaces: [{ name: x }] }\n",
                "rl.yaml:3: descriptors[0].rate_limit.replaces: the limit \"x\" replaces itself through the limits \
                 it replaces; `replaces` must not form a cycle",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text).unwrap_err().to_string(), expected, "{text}");
        }
        // A chain without a cycle is fine.
        parse(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: second, requests_per_unit: 1, name: x, \
             replaces: [{ name: y }] }\n  - key: b\n    rate_limit: { unit: second, requests_per_unit: 1, name: y, \
             replaces: [{ name: z }] }\n  - key: c\n    rate_limit: { unit: second, requests_per_unit: 1, name: z }\n",
        )
        .unwrap();
    }

    #[test]
    fn a_file_is_refused_past_the_descriptor_cap_and_the_parsers_limits() {
        let mut text = String::from("domain: d\ndescriptors:\n");
        for i in 0..=MAX_DESCRIPTORS {
            text.push_str(&format!("  - {{ key: k{i} }}\n"));
        }
        let err = parse(&text).unwrap_err();
        assert!(err.message().contains("more than 100000 descriptors"), "{err}");
        assert_eq!(err.field(), format!("descriptors[{MAX_DESCRIPTORS}]"));
        let duplicate = parse("domain: d\ndomain: e\ndescriptors: []\n").unwrap_err();
        assert!(duplicate.message().contains("duplicate"), "{duplicate}");
        let deep = format!("domain: d\ndescriptors: {}{}\n", "[".repeat(200), "]".repeat(200));
        assert!(parse(&deep).is_err());
        let mut bomb = String::from("domain: d\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let prev = i - 1;
            bomb.push_str(&format!("a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"));
        }
        assert!(parse(&bomb).is_err());
    }

    #[test]
    fn units_are_envoys_fixed_lengths() {
        assert_eq!(Unit::parse("Hour").unwrap().window(), Duration::from_secs(3600));
        assert_eq!(Unit::Month.window(), Duration::from_secs(30 * 86_400));
        assert_eq!(Unit::Year.window(), Duration::from_secs(365 * 86_400));
        assert_eq!(Unit::parse("fortnight"), None);
    }
}
