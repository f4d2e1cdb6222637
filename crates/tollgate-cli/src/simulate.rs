//! `tollgate simulate`: reads the trace, replays it under the policies of
//! the flags (one replay per strategy) or of a policy file (one replay,
//! each request under its resource's policy), writes the decisions files
//! and the chart, and prints the summary.

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tollgate::{ConfigError, Decision, Policy};
use tollgate_config::PolicyFile;

use crate::args::{BackendArg, FormatArg, SimulateArgs, StrategyArg};
use crate::config_replay::{self, Targets};
use crate::error::CliError;
use crate::output::{self, Finished};
use crate::plot;
use crate::progress::Progress;
use crate::redis_replay::RedisReplay;
use crate::replay::{self, Stats};
use crate::report::{self, DecisionsFile};
use crate::shown::shown;
use crate::trace::{access_log, csv};
use crate::trace::{Request, Skipped, Trace, TraceError};

/// Runs `simulate`: validates the flags, reads the whole trace, replays it,
/// then moves the decisions files and the chart into place and prints the
/// summary.
///
/// # Errors
///
/// [`CliError`] for an invalid flag, trace or policy file, a failed replay
/// or an output that cannot be written.
pub fn simulate(args: &SimulateArgs) -> Result<(), CliError> {
    if args.redis_url.is_some() && args.backend != BackendArg::Redis {
        return Err(CliError::Flag {
            flag: "redis-url".to_owned(),
            value: args.redis_url.clone().unwrap_or_default(),
            reason: "only used with --backend redis".to_owned(),
        });
    }
    let plot_format = args
        .plot
        .as_deref()
        .map(|path| {
            plot::Format::from_path(path).map_err(|reason| CliError::Flag {
                flag: "plot".to_owned(),
                value: path.display().to_string(),
                reason,
            })
        })
        .transpose()?;
    if let Some(path) = &args.plot {
        check_output("plot", path, false)?;
    }
    let (text, skipped) = match &args.config {
        Some(path) => with_policy_file(args, path, plot_format)?,
        None => with_flags(args, plot_format)?,
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(CliError::Stdout)?;
    if skipped.count > 0 {
        eprintln!("{}", skipped_report(&args.trace, &skipped));
    }
    Ok(())
}

/// The warning about the invalid lines `--skip-invalid` skipped: how many,
/// the first few line numbers, and the first problem.
pub fn skipped_report(trace: &Path, skipped: &Skipped) -> String {
    let lines: Vec<String> = skipped
        .first
        .iter()
        .filter_map(|e| e.line)
        .map(|l| l.to_string())
        .collect();
    let mut text = format!(
        "warning: skipped {} invalid {} of trace {}: {} {}",
        skipped.count,
        if skipped.count == 1 { "line" } else { "lines" },
        trace.display(),
        if lines.len() == 1 { "line" } else { "lines" },
        lines.join(", "),
    );
    if skipped.count > lines.len() as u64 {
        text.push_str(", ...");
    }
    if let Some(first) = skipped.first.first() {
        text.push_str(&format!(" (the first: {first})"));
    }
    text
}

/// Refuses a `--plot` file that is also one of the `decisions` files: one
/// would silently replace the other.
fn check_plot_is_not_a_decisions_file(
    plot: Option<&Path>,
    decisions: &[Option<PathBuf>],
) -> Result<(), CliError> {
    let Some(plot) = plot else {
        return Ok(());
    };
    let real = |path: &Path| match output::kind(path) {
        Ok(output::Kind::File(real)) => Some(real),
        _ => None,
    };
    let Some(plot_real) = real(plot) else {
        return Ok(());
    };
    if decisions
        .iter()
        .flatten()
        .any(|d| real(d).as_ref() == Some(&plot_real))
    {
        return Err(CliError::Flag {
            flag: "plot".to_owned(),
            value: plot.display().to_string(),
            reason: "is also a --decisions file".to_owned(),
        });
    }
    Ok(())
}

/// Checks early that `--flag path` can be written: not a directory (unless
/// `directory` allows one), a link loop or a kind of file that is never
/// replaced. Returns what the path names.
fn check_output(flag: &str, path: &Path, directory: bool) -> Result<output::Kind, CliError> {
    let error = |reason: String| CliError::Flag {
        flag: flag.to_owned(),
        value: path.display().to_string(),
        reason,
    };
    match output::kind(path) {
        Ok(output::Kind::Directory) if !directory => Err(error("is a directory".to_owned())),
        Ok(kind) => Ok(kind),
        Err(e) => Err(error(e.to_string())),
    }
}

/// The policy of the flags: `--strategy`, `--limit`, `--window`.
struct Flags {
    /// The strategies to replay.
    strategy: StrategyArg,
    /// The limit.
    limit: u64,
    /// The window.
    window: Duration,
}

impl Flags {
    /// The flags, which the parser requires without `--config`.
    fn of(args: &SimulateArgs) -> Result<Flags, CliError> {
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

/// `simulate` with the policy of the flags: one replay per strategy.
/// Returns the summary and the lines skipped.
fn with_flags(args: &SimulateArgs, plot_format: Option<plot::Format>) -> Result<(String, Skipped), CliError> {
    let flags = Flags::of(args)?;
    let policies = flags
        .strategy
        .strategies()
        .into_iter()
        .map(|strategy| Policy::new(strategy, flags.limit, flags.window).map_err(|e| flags.error(&e)))
        .collect::<Result<Vec<_>, _>>()?;
    let outputs = match &args.decisions {
        None => vec![None; policies.len()],
        Some(path) if flags.strategy != StrategyArg::All => {
            check_output("decisions", path, false)?;
            vec![Some(path.clone())]
        }
        Some(path) => {
            let directory = check_output("decisions", path, true)? == output::Kind::Directory;
            policies
                .iter()
                .map(|p| {
                    let file = report::path_for_strategy(path, p.strategy(), directory)
                        .ok_or_else(|| CliError::DecisionsPath { path: path.clone() })?;
                    check_output("decisions", &file, false)?;
                    Ok(Some(file))
                })
                .collect::<Result<_, CliError>>()?
        }
    };
    check_plot_is_not_a_decisions_file(args.plot.as_deref(), &outputs)?;
    let trace = read_trace(args)?;
    let plot_key = args.plot.as_ref().map(|_| plot_key(args, &trace)).transpose()?;
    let mut redis = match (&args.backend, &args.redis_url) {
        (BackendArg::Redis, Some(url)) => Some(RedisReplay::connect(url)?),
        _ => None,
    };
    let progress = Progress::new((trace.requests.len() as u64).saturating_mul(policies.len() as u64));
    let replayed = replay_strategies(
        &flags,
        &trace,
        &policies,
        outputs,
        plot_key,
        redis.as_mut(),
        &progress,
    );
    drop(progress);
    // The run's keys go whatever happened to the replay.
    if let Some(redis) = redis.as_mut() {
        match (redis.cleanup(), &replayed) {
            (Err(err), Ok(_)) => return Err(err),
            (Err(err), Err(_)) => eprintln!("error: {err}"),
            (Ok(_), _) => {}
        }
    }
    let (stats, events) = replayed?;
    if let (Some(path), Some(format), Some(key)) = (&args.plot, plot_format, plot_key) {
        let panels = policies
            .iter()
            .zip(events)
            .map(|(policy, events)| plot::Panel {
                name: policy.strategy().name().to_owned(),
                limit: policy.limit(),
                window: policy.window(),
                events: events.into_iter().map(|(_, e)| e).collect(),
            })
            .collect();
        let limit = format!(
            "limit {} per {}",
            flags.limit,
            humantime::format_duration(flags.window)
        );
        draw(args, &trace, key, limit, panels, path, format)?;
    }
    let title = report::title(flags.limit, flags.window, trace.requests.len(), trace.keys.len());
    Ok((
        report::summary(&title, "strategy", &stats, &trace.keys),
        trace.skipped,
    ))
}

/// `simulate --config FILE`: one replay against the file's resource-scoped
/// limiter. Returns the summary and the lines skipped.
fn with_policy_file(
    args: &SimulateArgs,
    path: &Path,
    plot_format: Option<plot::Format>,
) -> Result<(String, Skipped), CliError> {
    let file = PolicyFile::load(path)?;
    if args.backend == BackendArg::Redis {
        return Err(CliError::Flag {
            flag: "backend".to_owned(),
            value: "redis".to_owned(),
            reason:
                "a policy file is replayed in memory; --backend redis needs --strategy, --limit and --window"
                    .to_owned(),
        });
    }
    if let Some(path) = &args.decisions {
        check_output("decisions", path, false)?;
    }
    check_plot_is_not_a_decisions_file(args.plot.as_deref(), std::slice::from_ref(&args.decisions))?;
    let trace = read_trace(args)?;
    let plot_key = args.plot.as_ref().map(|_| plot_key(args, &trace)).transpose()?;
    let targets = Targets::new(&file, &trace);
    let progress = Progress::new(trace.requests.len() as u64);
    progress.stage("policy file");
    let mut recorder = Recorder::new(&trace, args.decisions.clone(), plot_key, &progress)?;
    let stats = config_replay::replay(&trace, &targets, |request, target, decision| {
        recorder.record(request, target, decision)
    })?;
    let (finished, events) = recorder.finish()?;
    drop(progress);
    if let Some((path, f)) = finished {
        persist(path, f)?;
    }
    if let (Some(plot_path), Some(format), Some(key)) = (&args.plot, plot_format, plot_key) {
        // One panel per policy the key's requests fell under, in target order.
        let panels = targets
            .policies
            .iter()
            .enumerate()
            .filter_map(|(i, (name, policy))| {
                let events: Vec<plot::Event> = events
                    .iter()
                    .filter(|(target, _)| *target == i)
                    .map(|(_, e)| *e)
                    .collect();
                (!events.is_empty()).then(|| plot::Panel {
                    name: format!("{name} ({})", describe(policy)),
                    limit: policy.limit(),
                    window: policy.window(),
                    events,
                })
            })
            .collect();
        let title = format!("policies from {}", file.origin());
        draw(args, &trace, key, title, panels, plot_path, format)?;
    }
    let mut title = format!(
        "policies from {}: {} {} from {} {}",
        file.origin(),
        trace.requests.len(),
        if trace.requests.len() == 1 {
            "request"
        } else {
            "requests"
        },
        trace.keys.len(),
        if trace.keys.len() == 1 { "key" } else { "keys" },
    );
    let width = targets
        .policies
        .iter()
        .map(|(name, _)| name.chars().count())
        .max()
        .unwrap_or(0);
    for (name, policy) in &targets.policies {
        title.push_str(&format!("\n  {name:width$}  {}", describe(policy)));
    }
    Ok((
        report::summary(&title, "policy", &stats, &trace.keys),
        trace.skipped,
    ))
}

/// A policy as `fixed_window, 5 per 1m`.
pub fn describe(policy: &Policy) -> String {
    format!(
        "{}, {} per {}",
        policy.strategy().name(),
        policy.limit(),
        humantime::format_duration(policy.window())
    )
}

/// Reads the trace in the format `--format` names, one line at a time;
/// with `--skip-invalid`, invalid data lines are counted instead of errors.
fn read_trace(args: &SimulateArgs) -> Result<Trace, CliError> {
    let path = &args.trace;
    let file = File::open(path).map_err(|source| TraceError::Open {
        path: path.clone(),
        source,
    })?;
    let input = BufReader::with_capacity(64 * 1024, file);
    let read = match args.format {
        FormatArg::Csv => csv::read(input, args.skip_invalid),
        FormatArg::Nginx => access_log::read(input, args.skip_invalid),
    };
    Ok(read.map_err(|error| TraceError::Parse {
        path: path.clone(),
        error,
    })?)
}

/// Draws the chart of `key` with `panels` to `path`.
fn draw(
    args: &SimulateArgs,
    trace: &Trace,
    key: usize,
    policies: String,
    panels: Vec<plot::Panel>,
    path: &Path,
    format: plot::Format,
) -> Result<(), CliError> {
    let chart = plot::Chart {
        key: &trace.keys[key],
        requests: trace.requests.iter().filter(|r| r.key == key).count(),
        busiest: args.key.is_none(),
        policies,
        start: trace.requests.iter().map(|r| r.nanos).min().unwrap_or(0),
        end: trace.requests.iter().map(|r| r.nanos).max().unwrap_or(0),
        panels,
    };
    let size = args
        .plot_size
        .unwrap_or_else(|| plot::default_size(chart.panels.len()));
    plot::write(&chart, path, format, size).map_err(|source| CliError::Plot {
        path: path.to_owned(),
        source,
    })
}

/// The index of the key `--plot` draws: `--key`, or the key with the most
/// requests (ties to the key seen first).
///
/// # Errors
///
/// [`CliError::Flag`] when `--key` is not in the trace, or the trace is
/// empty.
fn plot_key(args: &SimulateArgs, trace: &Trace) -> Result<usize, CliError> {
    if let Some(key) = &args.key {
        return trace.keys.position(key).ok_or_else(|| CliError::Flag {
            flag: "key".to_owned(),
            value: shown(key),
            reason: format!(
                "no request in the trace has this key ({} distinct keys)",
                trace.keys.len()
            ),
        });
    }
    let mut counts = vec![0usize; trace.keys.len()];
    for request in &trace.requests {
        counts[request.key] += 1;
    }
    // max_by_key keeps the last maximum; reversing makes ties go to the first key.
    counts
        .iter()
        .enumerate()
        .rev()
        .max_by_key(|&(_, n)| *n)
        .map(|(key, _)| key)
        .ok_or_else(|| CliError::Flag {
            flag: "plot".to_owned(),
            value: args
                .plot
                .as_deref()
                .unwrap_or(Path::new(""))
                .display()
                .to_string(),
            reason: "the trace has no requests to plot".to_owned(),
        })
}

/// The plotted key's decisions: (target index, event).
type Events = Vec<(usize, plot::Event)>;

/// What one replay writes on the way: its decisions file, and the plotted
/// key's decisions for the chart; it also moves the progress bar.
struct Recorder<'t> {
    /// The progress bar.
    progress: &'t Progress,
    /// The trace, to name keys.
    trace: &'t Trace,
    /// The decisions file being written.
    file: Option<DecisionsFile>,
    /// The key whose decisions are kept.
    plot_key: Option<usize>,
    /// Its decisions so far.
    events: Events,
}

impl<'t> Recorder<'t> {
    /// Starts the decisions file at `output`, if any.
    fn new(
        trace: &'t Trace,
        output: Option<PathBuf>,
        plot_key: Option<usize>,
        progress: &'t Progress,
    ) -> Result<Self, CliError> {
        let file = output
            .map(|path| DecisionsFile::create(&path).map_err(|source| CliError::Decisions { path, source }))
            .transpose()?;
        Ok(Self {
            progress,
            trace,
            file,
            plot_key,
            events: Vec::new(),
        })
    }

    /// Records one decision of the policy with index `target`.
    fn record(&mut self, request: &Request, target: usize, decision: &Decision) -> Result<(), CliError> {
        self.progress.tick();
        if Some(request.key) == self.plot_key {
            self.events.push((
                target,
                plot::Event {
                    nanos: request.nanos,
                    cost: request.cost,
                    allowed: decision.allowed,
                },
            ));
        }
        match self.file.as_mut() {
            Some(f) => f
                .write(
                    request,
                    self.trace.time(request),
                    &self.trace.keys[request.key],
                    decision,
                )
                .map_err(|source| CliError::Decisions {
                    path: f.path().to_owned(),
                    source,
                }),
            None => Ok(()),
        }
    }

    /// The complete decisions file with its path, not yet in place, and the
    /// events.
    fn finish(self) -> Result<(Option<(PathBuf, Finished)>, Events), CliError> {
        let finished = match self.file {
            Some(f) => {
                let path = f.path().to_owned();
                match f.finish() {
                    Ok(finished) => Some((path, finished)),
                    Err(source) => return Err(CliError::Decisions { path, source }),
                }
            }
            None => None,
        };
        Ok((finished, self.events))
    }
}

/// Moves the complete decisions file for `path` into place.
fn persist(path: PathBuf, f: Finished) -> Result<(), CliError> {
    f.persist().map_err(|source| CliError::Decisions { path, source })
}

/// Replays `trace` under every policy, on Redis when `redis` is given,
/// writing each policy's decisions file; the files are moved into place only
/// once every replay succeeded. With `plot_key`, also collects that key's
/// decisions per policy, for the chart.
fn replay_strategies(
    flags: &Flags,
    trace: &Trace,
    policies: &[Policy],
    outputs: Vec<Option<PathBuf>>,
    plot_key: Option<usize>,
    mut redis: Option<&mut RedisReplay>,
    progress: &Progress,
) -> Result<(Vec<Stats>, Vec<Events>), CliError> {
    let mut stats = Vec::new();
    let mut events = Vec::new();
    let mut finished: Vec<(PathBuf, Finished)> = Vec::new();
    for (&policy, output) in policies.iter().zip(outputs) {
        progress.stage(policy.strategy().name());
        let mut recorder = Recorder::new(trace, output, plot_key, progress)?;
        let sink = |request: &Request, decision: &Decision| recorder.record(request, 0, decision);
        stats.push(match redis.as_deref_mut() {
            None => replay::replay(trace, policy, sink)?,
            Some(redis) => {
                let limiter = redis.limiter(policy).map_err(|err| match err {
                    tollgate::Error::Config(err) => flags.error(&err),
                    err => CliError::Limiter(err),
                })?;
                replay::replay_with(
                    trace,
                    policy,
                    |request, key| redis.decide(&limiter, request.line, request.nanos, key, request.cost),
                    sink,
                )?
            }
        });
        let (file, key_events) = recorder.finish()?;
        finished.extend(file);
        events.push(key_events);
    }
    for (path, f) in finished {
        persist(path, f)?;
    }
    Ok((stats, events))
}
