//! `tollgate simulate`: reads the trace, replays it under the policies of
//! the flags (one replay per strategy) or of a policy file (one replay,
//! each request under its resource's policy), writes the decisions files
//! and the chart, and prints the summary.

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};

use tollgate::Decision;

use crate::args::{BackendArg, FormatArg, SimulateArgs};
use crate::checks::{check_output, check_plot_is_not_a_decisions_file};
use crate::error::CliError;
use crate::output::Finished;
use crate::plot;
use crate::policies::Policies;
use crate::postgres_replay::PostgresStore;
use crate::progress::Progress;
use crate::recorder::{persist, Events, Recorder};
use crate::redis_replay::RedisStore;
use crate::replay::{self, Stats};
use crate::shown::shown;
use crate::store_replay::{StoreReplay, StoreRun};
use crate::targets::Targets;
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
    check_backend_flags(args)?;
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
    let (text, skipped) = replay_trace(args, plot_format)?;
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

/// Checks the flags of `--backend`: `--max-delay` in memory only, each
/// store's URL only with its backend.
fn check_backend_flags(args: &SimulateArgs) -> Result<(), CliError> {
    if let (Some(delay), BackendArg::Redis | BackendArg::Postgres) = (args.max_delay, &args.backend) {
        let backend = if args.backend == BackendArg::Redis {
            "redis"
        } else {
            "postgres"
        };
        return Err(CliError::Flag {
            flag: "max-delay".to_owned(),
            value: humantime::format_duration(delay).to_string(),
            reason: format!("waiting is replayed in memory only; leave out --backend {backend}"),
        });
    }
    for (flag, url, backend) in [
        ("redis-url", &args.redis_url, BackendArg::Redis),
        ("postgres-url", &args.postgres_url, BackendArg::Postgres),
    ] {
        if url.is_some() && args.backend != backend {
            return Err(CliError::Flag {
                flag: flag.to_owned(),
                value: tollgate::__private::redact_url(url.as_deref().unwrap_or_default()),
                reason: format!("only used with --backend {}", flag.trim_end_matches("-url")),
            });
        }
    }
    Ok(())
}

/// Replays the trace under the policies of the flags or of the policy file,
/// writes the decisions files and the chart, and returns the summary and
/// the lines skipped.
fn replay_trace(
    args: &SimulateArgs,
    plot_format: Option<plot::Format>,
) -> Result<(String, Skipped), CliError> {
    let policies = Policies::of(args)?;
    let outputs = policies.outputs(args)?;
    check_plot_is_not_a_decisions_file(args.plot.as_deref(), &outputs)?;
    let trace = read_trace(args)?;
    let plot_key = args.plot.as_ref().map(|_| plot_key(args, &trace)).transpose()?;
    let replays = policies.replays(&trace);
    let mut store = connect(args)?;
    let progress = Progress::new((trace.requests.len() as u64).saturating_mul(replays.len() as u64));
    let replayed = replay_all(
        &policies,
        &trace,
        &replays,
        outputs,
        plot_key,
        match store.as_deref_mut() {
            Some(store) => Replaying::Store(store),
            None => Replaying::Memory(args.max_delay),
        },
        &progress,
    );
    drop(progress);
    // The run's keys (or schema) go whatever happened to the replay.
    let cleaned = store.as_mut().map_or(Ok(()), |store| store.cleanup());
    match (cleaned, &replayed) {
        (Err(err), Ok(_)) => return Err(err),
        (Err(err), Err(_)) => eprintln!("error: {err}"),
        (Ok(()), _) => {}
    }
    let (stats, events) = replayed?;
    if let (Some(path), Some(format), Some(key)) = (&args.plot, plot_format, plot_key) {
        let panels = panels(&policies, &replays, &stats, &events);
        draw(args, &trace, key, policies.chart_title(), panels, path, format)?;
    }
    let summary = policies.summary(&trace, &replays, &stats);
    Ok((summary, trace.skipped))
}

/// One chart panel per policy the plotted key's requests fell under, in
/// summary order, given each replay's `events` and every policy's `stats`
/// (in the same order). A compound policy is drawn with the limit its
/// summary row measures ([`crate::replay::Stats::measured`]).
fn panels(policies: &Policies, replays: &[Targets], stats: &[Stats], events: &[Events]) -> Vec<plot::Panel> {
    let mut stats = stats.iter();
    let mut panels = Vec::new();
    for (targets, events) in replays.iter().zip(events) {
        for ((i, (name, policy)), stats) in targets.policies.iter().enumerate().zip(stats.by_ref()) {
            let events: Vec<plot::Event> = events
                .iter()
                .filter(|(target, _)| *target == i)
                .map(|(_, e)| *e)
                .collect();
            if events.is_empty() {
                continue;
            }
            let drawn = policy.limits()[stats.measured];
            panels.push(plot::Panel {
                name: policies.panel_name(name, policy, stats.measured),
                limit: drawn.limit(),
                window: drawn.window(),
                calendar: drawn.calendar(),
                events,
            });
        }
    }
    panels
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

/// The run on the store `--backend` names, at its URL; none in memory
/// (or without the URL).
///
/// # Errors
///
/// The store's connection error naming the URL's problem.
fn connect(args: &SimulateArgs) -> Result<Option<Box<dyn StoreRun>>, CliError> {
    Ok(match (&args.backend, &args.redis_url, &args.postgres_url) {
        (BackendArg::Redis, Some(url), _) => Some(Box::new(StoreReplay::<RedisStore>::connect(url)?)),
        (BackendArg::Postgres, _, Some(url)) => Some(Box::new(StoreReplay::<PostgresStore>::connect(url)?)),
        _ => None,
    })
}

/// Where a replay decides: in memory (waiting up to the duration, when
/// given, instead of refusing), or on a store (Redis or PostgreSQL).
enum Replaying<'a> {
    Memory(Option<std::time::Duration>),
    Store(&'a mut dyn StoreRun),
}

/// Runs every replay of `trace` where `replaying` says, writing
/// each replay's decisions file; the files are moved into place only once
/// every replay succeeded. With `plot_key`, also collects that key's
/// decisions per replay, for the chart.
fn replay_all(
    policies: &Policies,
    trace: &Trace,
    replays: &[Targets],
    outputs: Vec<Option<PathBuf>>,
    plot_key: Option<usize>,
    mut replaying: Replaying<'_>,
    progress: &Progress,
) -> Result<(Vec<Stats>, Vec<Events>), CliError> {
    let mut stats = Vec::new();
    let mut events = Vec::new();
    let mut finished: Vec<(PathBuf, Finished)> = Vec::new();
    for (targets, output) in replays.iter().zip(outputs) {
        progress.stage(policies.stage(targets));
        let mut recorder = Recorder::new(trace, output, targets.any_compound(), plot_key, progress)?;
        let mut sink = |request: &Request, target: usize, decision: &Decision| {
            recorder.record(request, target, decision)
        };
        stats.extend(match &mut replaying {
            Replaying::Memory(None) => replay::replay(trace, targets, sink)?,
            Replaying::Memory(Some(max_delay)) => replay::replay_waiting(trace, targets, *max_delay, sink)?,
            Replaying::Store(store) => store.replay(policies, trace, targets, &mut sink)?,
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
