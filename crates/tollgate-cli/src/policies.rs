//! The policies `simulate` replays a trace under: those of `--strategy`,
//! `--limit` and `--window` (one replay per strategy), or those of a policy
//! file (one replay, each request under its resource's policy).

use std::path::PathBuf;
use std::time::Duration;

use tollgate::{ConfigError, Limit, Policy};
use tollgate_config::{PolicyFile, Target};

use crate::args::{SimulateArgs, StrategyArg};
use crate::checks::check_output;
use crate::described::{describe_settings, protects_the_store, Replay};
use crate::error::CliError;
use crate::output;
use crate::replay::Stats;
use crate::report;
use crate::targets::Targets;
use crate::trace::Trace;

/// The policy of the flags: `--strategy`, `--limit`, `--window`.
pub struct Flags {
    /// The strategies to replay.
    strategy: StrategyArg,
    /// The limit.
    limit: u64,
    /// The window.
    window: Duration,
}

impl Flags {
    /// The flags, which the parser requires without `--config`.
    pub fn of(args: &SimulateArgs) -> Result<Flags, CliError> {
        let missing = |flag: &str| CliError::Flag {
            flag: flag.to_owned(),
            value: String::new(),
            reason: "required without --config".to_owned(),
        };
        Ok(Flags {
            strategy: args.strategy.ok_or_else(|| missing("strategy"))?,
            limit: args.limit.ok_or_else(|| missing("limit"))?,
            window: args.window.ok_or_else(|| missing("window"))?,
        })
    }

    /// Names the flag behind a policy error, with the value given.
    fn error(&self, err: &ConfigError) -> CliError {
        let value = match err.field() {
            "limit" => self.limit.to_string(),
            "window" => humantime::format_duration(self.window).to_string(),
            _ => String::new(),
        };
        CliError::Flag {
            flag: err.field().to_owned(),
            value,
            reason: err.reason().to_owned(),
        }
    }
}

/// Where the policies come from, which is all that tells `simulate` with
/// flags from `simulate --config`: how each request's policy is chosen,
/// and how the policies are named in the summary and the chart.
pub enum Policies {
    /// `--strategy`, `--limit` and `--window`: one replay per strategy, each
    /// deciding every request by its one limit.
    Flags {
        /// The flags.
        flags: Flags,
        /// One limit per strategy.
        limits: Vec<Limit>,
    },
    /// `--config FILE`: one replay, each request decided by its resource's
    /// policy.
    File(Box<PolicyFile>),
}

impl Policies {
    /// The policies `args` name, validated.
    pub fn of(args: &SimulateArgs) -> Result<Self, CliError> {
        let Some(path) = &args.config else {
            let flags = Flags::of(args)?;
            let limits = flags
                .strategy
                .strategies()
                .into_iter()
                .map(|strategy| Limit::new(strategy, flags.limit, flags.window).map_err(|e| flags.error(&e)))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Policies::Flags { flags, limits });
        };
        Ok(Policies::File(Box::new(PolicyFile::load(path)?)))
    }

    /// The decisions file of each replay, checked early: with `--strategy
    /// all`, one per strategy beside or in `--decisions`.
    pub fn outputs(&self, args: &SimulateArgs) -> Result<Vec<Option<PathBuf>>, CliError> {
        let limits = match self {
            Policies::Flags { flags, limits } if flags.strategy == StrategyArg::All => limits,
            _ => {
                if let Some(path) = &args.decisions {
                    check_output("decisions", path, false)?;
                }
                return Ok(vec![args.decisions.clone()]);
            }
        };
        let Some(path) = &args.decisions else {
            return Ok(vec![None; limits.len()]);
        };
        let directory = check_output("decisions", path, true)? == output::Kind::Directory;
        limits
            .iter()
            .map(|l| {
                let file = report::path_for_strategy(path, l.strategy(), directory)
                    .ok_or_else(|| CliError::DecisionsPath { path: path.clone() })?;
                check_output("decisions", &file, false)?;
                Ok(Some(file))
            })
            .collect()
    }

    /// The replays, each with its policies and the policy of each request
    /// of `trace`.
    pub fn replays(&self, trace: &Trace) -> Vec<Targets> {
        match self {
            Policies::Flags { limits, .. } => limits.iter().map(|&l| Targets::one(l)).collect(),
            Policies::File(file) => vec![Targets::of_file(file, trace)],
        }
    }

    /// What the progress bar calls a replay.
    pub fn stage<'a>(&self, targets: &'a Targets) -> &'a str {
        match self {
            Policies::Flags { .. } => targets.policies.first().map_or("", |(name, _)| name),
            Policies::File(_) => "policy file",
        }
    }

    /// The error of the policy of target `target` of `targets` that a
    /// backend rejects, naming the flag, or the file and the policy's field
    /// (such as `tollgate.resources.api.limits`).
    pub fn limiter_error(&self, targets: &Targets, target: usize, err: tollgate::Error) -> CliError {
        match (self, err) {
            (Policies::Flags { flags, .. }, tollgate::Error::Config(err)) => flags.error(&err),
            (Policies::File(file), tollgate::Error::Config(err)) => {
                let path = match target {
                    0 => "tollgate.default".to_owned(),
                    _ => format!(
                        "tollgate.{}",
                        tollgate::Limiters::resource_path(&targets.policies[target].0)
                    ),
                };
                CliError::Policy {
                    file: file.origin().to_owned(),
                    error: err.within(path),
                }
            }
            (_, err) => CliError::Limiter(err),
        }
    }

    /// The title of the chart.
    pub fn chart_title(&self) -> String {
        match self {
            Policies::Flags { flags, .. } => format!(
                "limit {} per {}",
                flags.limit,
                humantime::format_duration(flags.window)
            ),
            Policies::File(file) => format!("policies from {}", file.origin()),
        }
    }

    /// The chart panel of the policy called `name`, drawn with its limit
    /// `drawn`: for a compound policy, the panel names that limit.
    pub fn panel_name(&self, name: &str, policy: &Policy, drawn: usize) -> String {
        match self {
            Policies::Flags { .. } => name.to_owned(),
            Policies::File(_) if policy.is_compound() => format!(
                "{name} (limits[{drawn}] of {}: {})",
                policy.limits().len(),
                report::describe_limit(&policy.limits()[drawn])
            ),
            Policies::File(_) => format!("{name} ({})", describe(policy)),
        }
    }

    /// The summary of the replays of `trace`.
    pub fn summary(&self, trace: &Trace, replays: &[Targets], stats: &[Stats]) -> String {
        let (requests, keys) = (trace.requests.len(), trace.keys.len());
        let file = match self {
            Policies::Flags { flags, .. } => {
                let title = report::title(flags.limit, flags.window, requests, keys);
                return report::summary(&title, "strategy", stats, &trace.keys);
            }
            Policies::File(file) => file,
        };
        let mut title = format!(
            "policies from {}: {} {} from {} {}",
            file.origin(),
            requests,
            if requests == 1 { "request" } else { "requests" },
            keys,
            if keys == 1 { "key" } else { "keys" },
        );
        let policies: Vec<&(String, Policy)> = replays.iter().flat_map(|t| &t.policies).collect();
        let width = policies
            .iter()
            .map(|(name, _)| name.chars().count())
            .max()
            .unwrap_or(0);
        let mut protected = false;
        for (i, (name, policy)) in policies.into_iter().enumerate() {
            let target = if i == 0 {
                Target::Default
            } else {
                Target::Resource(name)
            };
            let settings = file.settings(target);
            protected |= protects_the_store(&settings);
            let settings = match describe_settings(&settings, Replay::Yes) {
                words if words == "-" => String::new(),
                words => format!("; {words}"),
            };
            title.push_str(&format!("\n  {name:width$}  {}{settings}", describe(policy)));
        }
        if protected {
            title.push_str(
                "\n  (deny_cache and fallback are not replayed: the replay's store never fails, and a \
                 deny cache changes no decision)",
            );
        }
        report::summary(&title, "policy", stats, &trace.keys)
    }
}

/// A policy as `fixed_window, 5 per 1m`; the limits of a compound policy
/// joined by ` and `.
pub fn describe(policy: &Policy) -> String {
    let limits: Vec<String> = policy.limits().iter().map(report::describe_limit).collect();
    limits.join(" and ")
}
