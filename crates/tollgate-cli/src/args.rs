//! The command line of `tollgate`: its subcommands, their flags and their
//! long help.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tollgate::Strategy;

use crate::plot;

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about = "Rate limiting with exact semantics: tools"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay a trace of requests through rate-limiting strategies.
    #[command(long_about = SIMULATE_ABOUT)]
    Simulate(SimulateArgs),
    /// Validate a policy file and print its effective policies.
    #[command(long_about = CHECK_ABOUT)]
    Check(CheckArgs),
    /// Run the rate-limit decision service (HTTP JSON API, proxy auth, Envoy's gRPC API).
    #[command(long_about = crate::serve::SERVE_ABOUT)]
    Serve(crate::serve::ServeArgs),
    /// Print a shell completion script for tollgate.
    #[command(long_about = crate::completions::COMPLETIONS_ABOUT)]
    Completions(crate::completions::CompletionsArgs),
}

/// The long help of `check`.
const CHECK_ABOUT: &str = "\
Validate a policy file and print its effective policies.

The file is YAML, TOML or JSON, chosen by its extension (.yaml or .yml, .toml, .json), with
everything under `tollgate`: `default` (required) is the policy { limit, window, strategy }
of every resource without its own, and `resources` maps resource names to policies;
`strategy` sets the strategy of limits that name none (sliding_window when absent);
one of `redis_url`, `redis_cluster` or `redis_sentinel` ({ master, urls }), `fail_open` and
`key_prefix` configure the limiter. ${VAR} and ${VAR:-default} are replaced from the
environment. Instead of one limit, a policy may give `limits`, a list of 1 to 8
{ limit, window, strategy } decided together (a request is admitted only when every limit
admits it), no two with the same strategy and window.

A valid file prints a line naming it with its settings (and the number of limits when a
policy has several), then one line per limit, the default first, then the resources sorted
by name, with the strategy, limit and window that apply: a policy of several limits has a
line per limit, its target followed by limits[0], limits[1] and so on. The exit code is 0.
Otherwise the error is printed with the file, line and field (such as
tollgate.resources.api.limits[1].window), and the exit code is 1. A file larger than 16 MiB
is refused without reading more of it. Nothing is connected to:
a Redis URL is checked, not used.";

/// Arguments of `check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The policy file (.yaml, .yml, .toml or .json).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
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
Other columns are ignored (their bytes need not be UTF-8). Fields are separated by commas; a
field starting with \" may hold commas and line breaks, with \"\" for a quote, and ends at its
closing quote (text after it is an error); a quote that is never closed is an error naming
the line it opened on. Every row must have as many fields
as the header; the first invalid line stops the command with an error naming its line number
(the header is line 1), unless --skip-invalid is given.

The trace is read one line at a time and may be a pipe; no line may be longer than 64 KiB
(65536 bytes), so a file without line breaks stops with an error at once. The requests are
kept in memory (about 100 bytes each plus their keys) for replaying under each strategy.

With --format nginx the trace is an nginx or Apache access log in the combined format,
  $remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"
or the common format, which ends after the size. Each line is one request of cost 1: the key
is the client address, the resource the request's path without the query string (none when
the request is \"-\"; the host:port of a CONNECT request), and the time $time_local, such as
[10/Oct/2000:13:55:36 -0700]. A path may contain spaces (nginx accepts them and logs them as
received). Blank lines are skipped; any other line that does not match, such as the
\"\\x16\\x03\\x01...\" request nginx logs for a TLS handshake on a plain HTTP port, stops the
command with an error naming its line number and the problem, unless --skip-invalid is
given. Invalid UTF-8 is accepted in the referer and user agent, which are not used.

With --skip-invalid, invalid data lines are left out of the replay instead: after the summary,
a warning on standard error counts them and names the first five line numbers and the first
problem. A header without the required columns, a line longer than 64 KiB, a quoted field
that is not closed (or has text after its closing quote) and read errors still stop the
command.

Keys in the summary (and the chart) are printed with escapes for control characters and cut
after 64 characters, followed by the key's full length in bytes; the decisions file holds
them exactly.

Each strategy runs an in-memory limiter whose clock is set to each request's time before
the request is decided. The summary's title line names the policy and counts the trace's
requests and distinct keys; then the table has one row per strategy: requests admitted and
denied, the denied share of all requests (denied%), max_in_window: the most units admitted
for one key within any interval [t, t + window) of the trace's time, with the key it
happened for (max_key), and most_denied: the three keys with the most denied requests, each
with its count.

With --config FILE, the trace is replayed once, against the policy file's resource-scoped
limiter: each request is decided by the policy of its resource (the resource column, or the
access log's path) when the file names it, by the file's default policy otherwise. The
title lists the policies and the table has one row per policy, counting the requests it
decided (see `tollgate check --help` for the file). A policy of several limits (`limits` in
the file) is followed by a line per limit: how many requests that limit denied (a denied
request counts for the limit that bound it, the denying one with the longest retry) and
its own max_in_window with the key; the policy's row measures max_in_window over the window
of the limit that denied the most requests (on equal counts, the one that bound the most
decisions, then the first listed).

Replays of 200,000 decisions or more (requests times strategies) show a progress bar on
standard error when it is a terminal.

With --backend redis --redis-url URL, every decision is made by the Redis backend's Lua
scripts on that server instead, with the trace's time passed as the caller's clock
(microsecond ticks), so the decisions file shows what a production limiter on Redis would
have decided; with --config too (the file's own storage settings are not used). The
decisions equal the in-memory ones whenever the policy's emission interval (window / limit)
is a whole number of microseconds; otherwise the in-memory backend's nanosecond arithmetic
can round differently. A policy the Redis backend cannot serve stops the run with the flag,
or the file and the policy's field, that gave it. Only a standalone server is supported
(not a Cluster). Each run writes its keys under its own prefix,
tollgate-simulate/<pid>-<start time in ns>, so concurrent runs and applications using
the same server never interfere, and deletes them all (SCAN and DEL on that prefix) when
it ends, also after an error or Ctrl-C. Key expiry runs on the server's clock while the
trace has its own, so the keys get an expiry grace of 24 hours instead of the library's
1 second: no key can expire during a replay and change a decision, and the keys of a run
killed before it could clean up still disappear by themselves a day later.

With --backend postgres --postgres-url URL, every decision is made by the PostgreSQL
backend's SQL functions on that database, with the trace's time passed as the caller's
clock, as with Redis (the same expiry grace, and --config's storage settings unused). Each
run installs the backend into a schema of its own, tollgate_simulate_<pid>_<start time in
ns>, and drops it when it ends, also after an error or Ctrl-C: the role needs CREATE on the
database. A strategy: concurrency policy is refused, naming its field.";

/// Which strategies `simulate` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StrategyArg {
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
    pub fn strategies(self) -> Vec<Strategy> {
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
pub enum FormatArg {
    /// CSV with a header row: time, key and optionally cost and resource (see --help).
    #[default]
    Csv,
    /// An nginx or Apache access log in the combined (or common) log format (see --help).
    Nginx,
}

/// Where `simulate` keeps the limiters' state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// In this process (the library's in-memory backend).
    #[default]
    Memory,
    /// On a Redis server, decided by the Redis backend's Lua scripts (needs --redis-url).
    Redis,
    /// On a PostgreSQL database, decided by the PostgreSQL backend's SQL functions (needs
    /// --postgres-url).
    Postgres,
}

/// Arguments of `simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The trace to replay: CSV with columns time, key and optionally cost and resource, or an
    /// access log with --format nginx (see --help).
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,
    /// How the trace is written: csv, or nginx for an nginx/Apache access log.
    #[arg(long, value_name = "FORMAT", default_value = "csv")]
    pub format: FormatArg,
    /// Leave invalid data lines out of the replay instead of stopping at the first; a warning
    /// after the summary counts them and names the first few (see --help).
    #[arg(long)]
    pub skip_invalid: bool,
    /// The strategy to run, or all four (required unless --config is given).
    #[arg(
        long,
        value_name = "STRATEGY",
        required_unless_present = "config",
        conflicts_with = "config"
    )]
    pub strategy: Option<StrategyArg>,
    /// Units admitted per window and key, at least 1 (required unless --config is given).
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        required_unless_present = "config",
        conflicts_with = "config"
    )]
    pub limit: Option<u64>,
    /// The window, e.g. 250ms, 1s, 1m, 1h or 1m 30s (required unless --config is given).
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = humantime::parse_duration,
        required_unless_present = "config",
        conflicts_with = "config"
    )]
    pub window: Option<Duration>,
    /// Replay against this policy file's limiter instead of --strategy, --limit and --window:
    /// each request is decided by its resource's policy (the trace's resource column, or the
    /// path of an access log), or the file's default policy. See `tollgate check --help` for the
    /// file; the replay runs in memory, or on Redis or PostgreSQL with --backend redis or
    /// --backend postgres, whatever storage the file names.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Write one CSV row per request, in input order, to this file (one file with --config). With
    /// --strategy all, write one file per strategy, the strategy name inserted before the
    /// extension: out.csv becomes out.fixed_window.csv, out.sliding_window.csv,
    /// out.token_bucket.csv and out.leaky_bucket.csv; when OUT is an existing directory, the
    /// files are OUT/fixed_window.csv, OUT/sliding_window.csv, OUT/token_bucket.csv and
    /// OUT/leaky_bucket.csv (a directory is an error otherwise).
    ///
    /// The header is time,key,cost,allowed,remaining,reset_ms,retry_after_ms: time as written in
    /// the trace; allowed is true or false; reset_ms and retry_after_ms are whole milliseconds
    /// rounded up; retry_after_ms is empty when the request was allowed or can never be admitted.
    /// With --config, when a policy has several limits, a last column bound_by gives the index of
    /// the limit that bound each decision (when denied, the denying limit with the longest
    /// retry; when allowed, the one with the least remaining; 0 for a policy of one limit).
    ///
    /// A regular file is written only when the whole trace was replayed without error: rows go
    /// to a temporary file beside it, renamed over it at the end (keeping its permissions). A
    /// symbolic link is followed and its target replaced that way, the link kept. A FIFO, a
    /// character device or a file descriptor (/dev/stdout, /dev/fd/N) receives the rows as they
    /// are decided and is never replaced; after an error it has received part of them. Anything
    /// else is an error.
    #[arg(long, value_name = "OUT.csv")]
    pub decisions: Option<PathBuf>,
    /// Wait up to this long for a turn instead of being refused (e.g. 500ms): each request is
    /// reserved, as a client of `acquire` or of the service's max_delay_ms would be, and admitted
    /// when the reservation is made, counted when it proceeds; the summary then adds each
    /// policy's delays (requests delayed, p50, p99, max). The token and leaky bucket reserve the
    /// next slots their rate allows, a sliding window the next slots within its current window; a
    /// policy with a fixed window admits only what it admits now.
    /// Replayed in memory.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub max_delay: Option<Duration>,
    /// Where the state lives: in memory, on the Redis server at --redis-url or on the
    /// PostgreSQL database at --postgres-url (see --help).
    #[arg(long, value_name = "BACKEND", default_value = "memory")]
    pub backend: BackendArg,
    /// The Redis server for --backend redis: redis://[user:password@]host[:port][/db],
    /// rediss://... for TLS, or redis+unix:///path/to/socket. Its keys under
    /// tollgate-simulate/<run> are deleted when the run ends.
    #[arg(long, value_name = "URL", required_if_eq("backend", "redis"))]
    pub redis_url: Option<String>,
    /// The database for --backend postgres: postgres://[user[:password]@]host[:port]/database
    /// (TLS as its parameters, such as ?sslmode=require). The run installs the backend into a
    /// schema of its own, tollgate_simulate_<run>, dropped when the run ends: the role needs
    /// CREATE on the database.
    #[arg(long, value_name = "URL", required_if_eq("backend", "postgres"))]
    pub postgres_url: Option<String>,
    /// Draw a chart of one key's admitted and denied requests over time, one panel per strategy
    /// (with --config, per policy the key's requests fell under; a policy of several limits is
    /// drawn with the limit its summary row measures, named in the panel's caption), to this
    /// file: SVG or PNG, chosen by the extension (.svg or .png).
    ///
    /// Each panel shows the units admitted for the key within the trailing window (a step line
    /// whose highest point is the key's max_in_window), the limit as a dashed line, and every
    /// denied request as a red cross on the time axis. The key is the busiest of the trace (the
    /// most requests; ties to the key seen first) unless --key names another. Written only when
    /// the whole trace was replayed without error; symbolic links, FIFOs and devices are handled
    /// as for --decisions, and a directory is an error.
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    pub plot: Option<PathBuf>,
    /// The key to plot with --plot (default: the key with the most requests).
    #[arg(long, value_name = "KEY", requires = "plot")]
    pub key: Option<String>,
    /// The chart's size in pixels, WIDTHxHEIGHT (default: 1000 wide, 260 high per panel plus 70
    /// for the title).
    #[arg(long, value_name = "WIDTHxHEIGHT", requires = "plot", value_parser = plot::parse_size)]
    pub plot_size: Option<(u32, u32)>,
}
