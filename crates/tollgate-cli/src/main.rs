//! The `tollgate` command.
//!
//! `tollgate simulate` replays a CSV trace of requests through one or all of
//! the rate-limiting strategies, on the trace's own clock, and reports what
//! each strategy admitted.
#![warn(missing_docs)]

mod error;
mod replay;
mod report;
mod trace;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tollgate::{ConfigError, Policy, Strategy};

use crate::error::CliError;
use crate::report::{DecisionsFile, Finished};
use crate::trace::Trace;

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
Other columns are ignored. Every row must have as many fields as the header; the first
invalid line stops the command with an error naming its line number (the header is line 1).

Each strategy runs an in-memory limiter whose clock is set to each request's time before
the request is decided. The summary has one row per strategy: requests, admitted, denied,
distinct keys, and max_in_window: the most units admitted for one key within any interval
[t, t + window) of the trace's time, with the key it happened for (max_key).";

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

/// Arguments of `simulate`.
#[derive(Debug, Args)]
struct SimulateArgs {
    /// The CSV trace to replay: columns time, key and optionally cost (see --help).
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
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
    let trace = Trace::read_path(&args.trace)?;
    let mut stats = Vec::new();
    let mut finished: Vec<Finished> = Vec::new();
    for (policy, output) in policies.into_iter().zip(outputs) {
        let mut file = output
            .map(|path| DecisionsFile::create(&path).map_err(|source| CliError::Decisions { path, source }))
            .transpose()?;
        stats.push(replay::replay(&trace, policy, |request, decision| {
            match file.as_mut() {
                Some(f) => f
                    .write(request, &trace.keys[request.key], decision)
                    .map_err(|source| CliError::Decisions {
                        path: f.path().to_owned(),
                        source,
                    }),
                None => Ok(()),
            }
        })?);
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
    let text = report::summary(args.limit, args.window, &stats, &trace.keys);
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(CliError::Stdout)
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
