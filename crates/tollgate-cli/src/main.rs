//! The `tollgate` command.
//!
//! `tollgate simulate` replays a CSV trace of requests through one or all of
//! the rate-limiting strategies, on the trace's own clock, and reports what
//! each strategy admitted.
#![warn(missing_docs)]

mod access_log;
mod error;
mod plot;
mod redis_replay;
mod replay;
mod report;
mod trace;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tollgate::{ConfigError, Policy, Strategy};

use crate::error::CliError;
use crate::redis_replay::RedisReplay;
use crate::report::{DecisionsFile, Finished};
use crate::trace::{Trace, TraceError};

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about = "Rate limiting with exact semantics: tools"
)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a trace of requests through rate-limiting strategies.
    #[command(long_about = SIMULATE_ABOUT)]
    Simulate(SimulateArgs),
}

/// The long help of `simulate`.
const SIMULATE_ABOUT: &str = "\
Replay a trace of requests through rate-limiting strategies.

The trace is CSV with a header row. Columns (any order, names matched ignoring case):
  time  integer milliseconds since the Unix epoch, or an RFC 3339 timestamp with any
        offset (2024-05-01T12:00:00.250+02:00); times need not be sorted
  key   the key being limited (not empty)
  cost  optional: units the request costs, a non-negative integer (default 1, also when
        the field is empty; 0 asks whether a unit request would be admitted, charging nothing)
  resource  optional: the name of the policy that applies to the request in a policy file
        (--config); surrounding whitespace is ignored, empty means the default policy, and
        control characters are rejected. Without --config every request gets the one policy
        of --strategy, --limit and --window.
Other columns are ignored. Every row must have as many fields as the header; the first
invalid line stops the command with an error naming its line number (the header is line 1).

With --format nginx the trace is an nginx or Apache access log in the combined format,
  $remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"
or the common format, which ends after the size. Each line is one request of cost 1: the key
is the client address, the resource the request's path without the query string (none when
the request is \"-\"), and the time $time_local, such as [10/Oct/2000:13:55:36 -0700]. Blank
lines are skipped; any other line that does not match stops the command with an error
naming its line number and the problem.

Each strategy runs an in-memory limiter whose clock is set to each request's time before
the request is decided. The summary's title line names the policy and counts the trace's
requests and distinct keys; then the table has one row per strategy: requests admitted and
denied, the denied share of all requests (denied%), max_in_window: the most units admitted
for one key within any interval [t, t + window) of the trace's time, with the key it
happened for (max_key), and most_denied: the three keys with the most denied requests, each
with its count.

With --backend redis --redis-url URL, every decision is made by the Redis backend's Lua
scripts on that server instead, with the trace's time passed as the caller's clock
(microsecond ticks), so the decisions file shows what a production limiter on Redis would
have decided. The decisions equal the in-memory ones whenever the policy's emission
interval (window / limit) is a whole number of microseconds; otherwise the in-memory
backend's nanosecond arithmetic can round differently. Only a standalone server is
supported (not a Cluster). Each run writes its keys under its own prefix,
tollgate-simulate:<pid>-<start time in ns>:, so concurrent runs and applications using
the same server never interfere, and deletes them all (SCAN and DEL on that prefix) when
it ends, also after an error or Ctrl-C. Key expiry runs on the server's clock while the
trace has its own, so the keys get an expiry grace of 24 hours instead of the library's
1 second: no key can expire during a replay and change a decision, and the keys of a run
killed before it could clean up still disappear by themselves a day later.";

/// Which strategies `simulate` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum StrategyArg {
    /// A counter per clock-aligned window.
    #[value(name = "fixed_window", alias = "fixed-window")]
    FixedWindow,
    /// Two counters weighted by the position in the window.
    #[value(name = "sliding_window", alias = "sliding-window")]
    SlidingWindow,
    /// Tokens refilled continuously.
    #[value(name = "token_bucket", alias = "token-bucket")]
    TokenBucket,
    /// A meter draining continuously.
    #[value(name = "leaky_bucket", alias = "leaky-bucket")]
    LeakyBucket,
    /// All four, one after the other.
    All,
}

impl StrategyArg {
    /// The strategies selected.
    fn strategies(self) -> Vec<Strategy> {
        match self {
            StrategyArg::FixedWindow => vec![Strategy::FixedWindow],
            StrategyArg::SlidingWindow => vec![Strategy::SlidingWindow],
            StrategyArg::TokenBucket => vec![Strategy::TokenBucket],
            StrategyArg::LeakyBucket => vec![Strategy::LeakyBucket],
            StrategyArg::All => Strategy::ALL.to_vec(),
        }
    }
}

/// How the trace file is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
enum FormatArg {
    /// CSV with a header row: time, key and optionally cost and resource (see --help).
    #[default]
    Csv,
    /// An nginx or Apache access log in the combined (or common) log format (see --help).
    Nginx,
}

/// Where `simulate` keeps the limiters' state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    /// In this process (the library's in-memory backend).
    #[default]
    Memory,
    /// On a Redis server, decided by the Redis backend's Lua scripts (needs --redis-url).
    Redis,
}

/// Arguments of `simulate`.
#[derive(Debug, Args)]
struct SimulateArgs {
    /// The trace to replay: CSV with columns time, key and optionally cost and resource, or an
    /// access log with --format nginx (see --help).
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    /// How the trace is written: csv, or nginx for an nginx/Apache access log.
    #[arg(long, value_name = "FORMAT", default_value = "csv")]
    format: FormatArg,
    /// The strategy to run, or all four.
    #[arg(long, value_name = "STRATEGY")]
    strategy: StrategyArg,
    /// Units admitted per window and key (at least 1).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    limit: u64,
    /// The window, e.g. 250ms, 1s, 1m, 1h or 1m 30s.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    window: Duration,
    /// Write one CSV row per request, in input order, to this file. With --strategy all, write one
    /// file per strategy, the strategy name inserted before the extension: out.csv becomes
    /// out.fixed_window.csv, out.sliding_window.csv, out.token_bucket.csv and out.leaky_bucket.csv.
    ///
    /// The header is time,key,cost,allowed,remaining,reset_ms,retry_after_ms: time as written in
    /// the trace; allowed is true or false; reset_ms and retry_after_ms are whole milliseconds
    /// rounded up; retry_after_ms is empty when the request was allowed or can never be admitted.
    /// Files are written only when the whole trace was replayed without error.
    #[arg(long, value_name = "OUT.csv")]
    decisions: Option<PathBuf>,
    /// Where the state lives: in memory, or on the Redis server at --redis-url (see --help).
    #[arg(long, value_name = "BACKEND", default_value = "memory")]
    backend: BackendArg,
    /// The Redis server for --backend redis: redis://[user:password@]host[:port][/db],
    /// rediss://... for TLS, or redis+unix:///path/to/socket. Its keys under
    /// tollgate-simulate:<run>: are deleted when the run ends.
    #[arg(long, value_name = "URL", required_if_eq("backend", "redis"))]
    redis_url: Option<String>,
    /// Draw a chart of one key's admitted and denied requests over time, one panel per strategy,
    /// to this file: SVG or PNG, chosen by the extension (.svg or .png).
    ///
    /// Each panel shows the units admitted for the key within the trailing window (a step line
    /// whose highest point is the key's max_in_window), the limit as a dashed line, and every
    /// denied request as a red cross on the time axis. The key is the busiest of the trace (the
    /// most requests; ties to the key seen first) unless --key names another. Written only when
    /// the whole trace was replayed without error.
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    plot: Option<PathBuf>,
    /// The key to plot with --plot (default: the key with the most requests).
    #[arg(long, value_name = "KEY", requires = "plot")]
    key: Option<String>,
    /// The chart's size in pixels, WIDTHxHEIGHT (default: 1000 wide, 260 high per strategy plus
    /// 44 for the title).
    #[arg(long, value_name = "WIDTHxHEIGHT", requires = "plot", value_parser = plot::parse_size)]
    plot_size: Option<(u32, u32)>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Interrupted) => {
            eprintln!("error: interrupted");
            ExitCode::from(130)
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `simulate`: validates the flags, reads the whole trace, replays it
/// per strategy, then moves the decisions files into place and prints the
/// summary.
fn simulate(args: &SimulateArgs) -> Result<(), CliError> {
    let policies = args
        .strategy
        .strategies()
        .into_iter()
        .map(|strategy| Policy::new(strategy, args.limit, args.window).map_err(|e| flag_error(args, &e)))
        .collect::<Result<Vec<_>, _>>()?;
    let outputs = match &args.decisions {
        None => vec![None; policies.len()],
        Some(path) if args.strategy != StrategyArg::All => vec![Some(path.clone())],
        Some(path) => policies
            .iter()
            .map(|p| {
                report::path_for_strategy(path, p.strategy())
                    .map(Some)
                    .ok_or_else(|| CliError::DecisionsPath { path: path.clone() })
            })
            .collect::<Result<_, _>>()?,
    };
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
    let trace = match args.format {
        FormatArg::Csv => Trace::read_path(&args.trace).map_err(csv_error_hint)?,
        FormatArg::Nginx => access_log::read_path(&args.trace)?,
    };
    let plot_key = match &args.plot {
        Some(_) => Some(plot_key(args, &trace)?),
        None => None,
    };
    let mut redis = match (&args.backend, &args.redis_url) {
        (BackendArg::Redis, Some(url)) => Some(RedisReplay::connect(url)?),
        _ => None,
    };
    let replayed = replay_all(args, &trace, policies, outputs, plot_key, redis.as_mut());
    // The run's keys go whatever happened to the replay.
    if let Some(redis) = redis.as_mut() {
        match (redis.cleanup(), &replayed) {
            (Err(err), Ok(_)) => return Err(err),
            (Err(err), Err(_)) => eprintln!("error: {err}"),
            (Ok(_), _) => {}
        }
    }
    let (stats, panels) = replayed?;
    if let (Some(path), Some(format), Some(key)) = (&args.plot, plot_format, plot_key) {
        let chart = plot::Chart {
            key: &trace.keys[key],
            requests: trace.requests.iter().filter(|r| r.key == key).count(),
            busiest: args.key.is_none(),
            limit: args.limit,
            window: args.window,
            start: trace.requests.iter().map(|r| r.nanos).min().unwrap_or(0),
            end: trace.requests.iter().map(|r| r.nanos).max().unwrap_or(0),
            panels,
        };
        let size = args
            .plot_size
            .unwrap_or_else(|| plot::default_size(chart.panels.len()));
        plot::write(&chart, path, format, size).map_err(|source| CliError::Plot {
            path: path.clone(),
            source,
        })?;
    }
    let title = report::title(args.limit, args.window, trace.requests.len(), trace.keys.len());
    let text = report::summary(&title, &stats, &trace.keys);
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(CliError::Stdout)
}

/// Adds a hint to a CSV trace error whose first line is an access log line:
/// the user probably forgot `--format nginx`.
fn csv_error_hint(err: TraceError) -> CliError {
    if let TraceError::Parse { path, error } = &err {
        if error.line == Some(1) && matches!(error.problem, trace::Problem::MissingColumn(_)) {
            let mut first = String::new();
            if let Ok(file) = std::fs::File::open(path) {
                // Only the first line; a read error just means no hint.
                let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(file), &mut first);
            }
            if access_log::parse_line(first.trim_end()).is_ok() {
                return CliError::AccessLogAsCsv(err);
            }
        }
    }
    CliError::Trace(err)
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
        return trace
            .keys
            .iter()
            .position(|k| k == key)
            .ok_or_else(|| CliError::Flag {
                flag: "key".to_owned(),
                value: key.escape_debug().to_string(),
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

/// Replays `trace` under every policy, on Redis when `redis` is given,
/// writing each policy's decisions file; the files are moved into place only
/// once every replay succeeded. With `plot_key`, also collects that key's
/// decisions per policy, for the chart.
fn replay_all(
    args: &SimulateArgs,
    trace: &Trace,
    policies: Vec<Policy>,
    outputs: Vec<Option<PathBuf>>,
    plot_key: Option<usize>,
    mut redis: Option<&mut RedisReplay>,
) -> Result<(Vec<replay::Stats>, Vec<plot::Panel>), CliError> {
    let mut stats = Vec::new();
    let mut panels = Vec::new();
    let mut finished: Vec<Finished> = Vec::new();
    for (policy, output) in policies.into_iter().zip(outputs) {
        let mut events = Vec::new();
        let mut file = output
            .map(|path| DecisionsFile::create(&path).map_err(|source| CliError::Decisions { path, source }))
            .transpose()?;
        let mut sink = |request: &trace::Request, decision: &tollgate::Decision| {
            if Some(request.key) == plot_key {
                events.push(plot::Event {
                    nanos: request.nanos,
                    cost: request.cost,
                    allowed: decision.allowed,
                });
            }
            match file.as_mut() {
                Some(f) => f
                    .write(request, &trace.keys[request.key], decision)
                    .map_err(|source| CliError::Decisions {
                        path: f.path().to_owned(),
                        source,
                    }),
                None => Ok(()),
            }
        };
        stats.push(match redis.as_deref_mut() {
            None => replay::replay(trace, policy, &mut sink)?,
            Some(redis) => {
                let limiter = redis.limiter(policy).map_err(|err| match err {
                    tollgate::Error::Config(err) => flag_error(args, &err),
                    err => CliError::Limiter(err),
                })?;
                replay::replay_with(
                    trace,
                    policy,
                    |request, key| redis.decide(&limiter, request.line, request.nanos, key, request.cost),
                    &mut sink,
                )?
            }
        });
        panels.push(plot::Panel {
            strategy: policy.strategy(),
            events,
        });
        if let Some(f) = file {
            let path = f.path().to_owned();
            finished.push(
                f.finish()
                    .map_err(|source| CliError::Decisions { path, source })?,
            );
        }
    }
    for f in finished {
        let path = f.path().to_owned();
        f.persist()
            .map_err(|source| CliError::Decisions { path, source })?;
    }
    Ok((stats, panels))
}

/// Names the flag behind a policy error, with the value given.
fn flag_error(args: &SimulateArgs, err: &ConfigError) -> CliError {
    let value = match err.field() {
        "limit" => args.limit.to_string(),
        "window" => humantime::format_duration(args.window).to_string(),
        _ => String::new(),
    };
    CliError::Flag {
        flag: err.field().to_owned(),
        value,
        reason: err.reason().to_owned(),
    }
}
