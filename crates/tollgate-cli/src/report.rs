//! Output: the summary table and the per-request decisions file.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tollgate::{Decision, Limit, Strategy};

use crate::output::{Finished, Output};
use crate::replay::{LimitStats, ListStats, Stats};
use crate::shown::shown;
use crate::trace::{Names, Request};

/// The header row of a decisions file.
pub const DECISIONS_HEADER: [&str; 7] = [
    "time",
    "key",
    "cost",
    "allowed",
    "remaining",
    "reset_ms",
    "retry_after_ms",
];

/// The column a decisions file gains when a policy of the replay is
/// compound: the index of the limit that bound each decision
/// ([`Decision::bound_by`]; 0 for a policy of one limit).
pub const BOUND_BY_COLUMN: &str = "bound_by";

/// The path of the decisions file of `strategy` when several are written
/// (`--strategy all`): in a directory, the strategy's name with `.csv`
/// (`dir` becomes `dir/fixed_window.csv`); otherwise the strategy name goes
/// before the extension (`out.csv` becomes `out.fixed_window.csv`; `out`
/// becomes `out.fixed_window`).
///
/// Returns `None` when `path` names neither a directory nor a file (it ends
/// with `/` or `..`, or is empty).
pub fn path_for_strategy(path: &Path, strategy: Strategy, directory: bool) -> Option<PathBuf> {
    if directory {
        return Some(path.join(format!("{}.csv", strategy.name())));
    }
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        return None;
    }
    let stem = path.file_stem()?;
    let mut name = OsString::from(stem);
    name.push(".");
    name.push(strategy.name());
    if let Some(ext) = path.extension() {
        name.push(".");
        name.push(ext);
    }
    Some(path.with_file_name(name))
}

pub use tollgate::__private::ceil_millis;

/// A decisions file being written to an [`Output`]: a regular file is
/// replaced only on [`finish`] followed by [`Finished::persist`], so an
/// error never leaves a partial file; a FIFO or device receives the rows as
/// they are written.
///
/// [`finish`]: DecisionsFile::finish
pub struct DecisionsFile {
    /// The path given, for messages.
    path: PathBuf,
    /// Rows go to the output.
    writer: csv::Writer<Output>,
    /// Whether rows end with [`BOUND_BY_COLUMN`].
    bound_by: bool,
}

impl DecisionsFile {
    /// Starts a decisions file that will end up at `path`, writing the
    /// header, with [`BOUND_BY_COLUMN`] last when `bound_by` is set.
    ///
    /// # Errors
    ///
    /// The I/O error when `path` cannot be written (see [`Output::create`]).
    pub fn create(path: &Path, bound_by: bool) -> io::Result<DecisionsFile> {
        let output = Output::create(path, ".tollgate-decisions-", ".tmp")?;
        let mut writer = csv::Writer::from_writer(output);
        let extra = bound_by.then_some(BOUND_BY_COLUMN);
        writer
            .write_record(DECISIONS_HEADER.iter().copied().chain(extra))
            .map_err(io::Error::from)?;
        Ok(DecisionsFile {
            path: path.to_owned(),
            writer,
            bound_by,
        })
    }

    /// The path given for the file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends the row of one request, whose `time` field was written
    /// `time` and whose key is `key`.
    ///
    /// # Errors
    ///
    /// The I/O error when the row cannot be written.
    pub fn write(&mut self, request: &Request, time: &str, key: &str, decision: &Decision) -> io::Result<()> {
        let retry_after = match decision.retry_after {
            Some(d) if !decision.allowed => ceil_millis(d).to_string(),
            _ => String::new(),
        };
        let bound_by = decision.bound_by.to_string();
        let extra = self.bound_by.then_some(bound_by.as_str());
        self.writer
            .write_record(
                [
                    time,
                    key,
                    &request.cost.to_string(),
                    if decision.allowed { "true" } else { "false" },
                    &decision.remaining.to_string(),
                    &ceil_millis(decision.reset).to_string(),
                    &retry_after,
                ]
                .into_iter()
                .chain(extra),
            )
            .map_err(io::Error::from)
    }

    /// Flushes every row.
    ///
    /// # Errors
    ///
    /// The I/O error when flushing fails.
    pub fn finish(self) -> io::Result<Finished> {
        self.writer
            .into_inner()
            .map_err(|e| io::Error::new(e.error().kind(), e.to_string()))?
            .finish()
    }
}

/// The title line of a summary for one policy shape: the limit, the window,
/// and how many requests and keys the trace holds.
pub fn title(limit: u64, window: Duration, requests: usize, keys: usize) -> String {
    format!(
        "limit {limit} per {}: {requests} {} from {keys} {}",
        humantime::format_duration(window),
        if requests == 1 { "request" } else { "requests" },
        if keys == 1 { "key" } else { "keys" },
    )
}

/// The summary: `title`, then an aligned table with one row per strategy
/// (or policy).
///
/// Columns: the row's name, under the header `first` (`strategy` or
/// `policy`); requests admitted and denied; the denied share of
/// all requests in percent; `max_in_window`, the most units admitted for one
/// key within one window length, and `max_key`, that key; `most_denied`,
/// the keys with the most denied requests, each followed by its count in
/// brackets. `keys` resolves the key indices in `stats`; keys are printed
/// with Rust's debug escapes, so control characters stay visible, and cut
/// after 64 characters ([`shown`]).
pub fn summary(title: &str, first: &str, stats: &[Stats], keys: &Names) -> String {
    let header = [
        first,
        "admitted",
        "denied",
        "denied%",
        "max_in_window",
        "max_key",
        "most_denied",
    ];
    let key_name = |k: usize| {
        if k < keys.len() {
            shown(&keys[k])
        } else {
            "?".to_owned()
        }
    };
    let rows: Vec<[String; 7]> = stats
        .iter()
        .map(|s| {
            let most_denied = if s.most_denied.is_empty() {
                "-".to_owned()
            } else {
                s.most_denied
                    .iter()
                    .map(|&(k, n)| format!("{} ({n})", key_name(k)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            [
                s.name.clone(),
                s.admitted.to_string(),
                s.denied.to_string(),
                percent(s.denied, s.requests),
                s.peak.units.to_string(),
                s.peak.key.map_or_else(|| "-".to_owned(), key_name),
                most_denied,
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = format!("{title}\n");
    let header = header.map(str::to_owned);
    let under = std::iter::once(None).chain(stats.iter().map(Some));
    for (row, under) in std::iter::once(&header).chain(&rows).zip(under) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            let pad = " ".repeat(width - cell.chars().count());
            match i {
                0 => line.push_str(&format!("{cell}{pad}")),
                5 => line.push_str(&format!("  {cell}{pad}")),
                6 => line.push_str(&format!("  {cell}")),
                _ => line.push_str(&format!("  {pad}{cell}")),
            }
        }
        out.push_str(&line);
        out.push('\n');
        if let Some(stats) = under {
            let shadow = stats.lists.shadow_denied.is_some();
            out.push_str(&limit_lines(&stats.limits, shadow, key_name));
            out.push_str(&boundary_line(stats.boundaries.as_ref()));
            out.push_str(&list_lines(&stats.lists, key_name));
        }
    }
    out.push_str(&delay_table(first, stats));
    out
}

/// With `--max-delay`, a second table beside the first: per row, the
/// admitted requests that waited, and the p50, p99 and longest wait of the
/// admitted requests (milliseconds, rounded up); nothing otherwise.
fn delay_table(first: &str, stats: &[Stats]) -> String {
    if stats.iter().all(|s| s.delays.is_none()) {
        return String::new();
    }
    let ms = |d: std::time::Duration| tollgate::__private::ceil_millis(d).to_string();
    let header = [first, "delayed", "delayed%", "p50_ms", "p99_ms", "max_ms"].map(str::to_owned);
    let rows: Vec<[String; 6]> = stats
        .iter()
        .map(|s| {
            let d = s.delays.unwrap_or_default();
            [
                s.name.clone(),
                d.delayed.to_string(),
                percent(d.delayed, s.admitted),
                ms(d.p50),
                ms(d.p99),
                ms(d.max),
            ]
        })
        .collect();
    let table: Vec<Vec<String>> = std::iter::once(header).chain(rows).map(Vec::from).collect();
    let mut out = String::from("waiting instead of refusing (delays of the admitted requests):\n");
    out.push_str(&crate::table::aligned(&table, |column| column > 0));
    out
}

/// The lines under the row of a policy with exempt or deny lists or in
/// shadow mode: how many requests of exempt keys were allowed without
/// counting, how many of deny-listed keys were denied, how many only
/// shadow mode allowed (with the keys that had the most); nothing for a
/// policy without them.
fn list_lines(lists: &ListStats, key_name: impl Fn(usize) -> String) -> String {
    let requests = |n: u64| format!("{n} {}", if n == 1 { "request" } else { "requests" });
    let mut out = String::new();
    if let Some(n) = lists.exempt {
        out.push_str(&format!("  exempt: {} allowed without counting\n", requests(n)));
    }
    if let Some(n) = lists.deny_listed {
        // In shadow mode they are allowed, and counted in the shadow line.
        let denied = if lists.shadow_denied.is_some() {
            "enforcement would deny"
        } else {
            "denied"
        };
        out.push_str(&format!("  deny list: {} {denied}\n", requests(n)));
    }
    if let Some(n) = lists.shadow_denied {
        let keys: Vec<String> = lists
            .most_shadow_denied
            .iter()
            .map(|&(k, n)| format!("{} ({n})", key_name(k)))
            .collect();
        let keys = if keys.is_empty() {
            String::new()
        } else {
            format!(": {}", keys.join(", "))
        };
        out.push_str(&format!(
            "  shadow: {} allowed that enforcement would deny{keys}\n",
            requests(n)
        ));
    }
    out
}

/// The lines under a compound policy's row, one per limit: the limit, the
/// requests it denied (in `shadow` mode, would have denied) and its own
/// `max_in_window` with the key, aligned among themselves; nothing for a
/// policy of one limit.
fn limit_lines(limits: &[LimitStats], shadow: bool, key_name: impl Fn(usize) -> String) -> String {
    let labels: Vec<String> = limits
        .iter()
        .enumerate()
        .map(|(i, l)| format!("limits[{i}] {}:", describe_limit(&l.limit)))
        .collect();
    let denied: Vec<String> = limits.iter().map(|l| l.denied.to_string()).collect();
    let width = |cells: &[String]| cells.iter().map(|c| c.chars().count()).max().unwrap_or(0);
    let (label_width, denied_width) = (width(&labels), width(&denied));
    let mut out = String::new();
    for ((label, denied), limit) in labels.iter().zip(&denied).zip(limits) {
        let key = limit
            .peak
            .key
            .map_or_else(String::new, |k| format!(" ({})", key_name(k)));
        out.push_str(&format!(
            "  {label:<label_width$} {denied:>denied_width$} {}, max_in_window {}{key}\n",
            if shadow { "would deny" } else { "denied" },
            limit.peak.units
        ));
    }
    out
}

/// A limit as `fixed_window, 5 per 1m`, for a calendar window
/// `fixed_window, 10000 per month from 2001-01-01T00:00:00 UTC`, and for a
/// concurrency limit `concurrency, 4 at once, ttl 5m` (a trace has no
/// durations: its requests are replayed as holding nothing).
pub fn describe_limit(limit: &Limit) -> String {
    if limit.strategy().is_concurrency() {
        let ttl = humantime::format_duration(limit.window());
        return format!(
            "concurrency, {} at once, ttl {ttl}; replayed holding nothing",
            limit.limit()
        );
    }
    let per = match limit.calendar() {
        Some(calendar) => calendar.to_string(),
        None => humantime::format_duration(limit.window()).to_string(),
    };
    format!("{}, {} per {per}", limit.strategy().name(), limit.limit())
}

/// The line under a calendar window's row: the boundaries of its periods
/// that the trace crosses, where every key's count starts again (the
/// first few, then how many more).
fn boundary_line(boundaries: Option<&(tollgate::calendar::Calendar, Vec<u64>)>) -> String {
    const SHOWN: usize = 3;
    let Some((calendar, at)) = boundaries else {
        return String::new();
    };
    let period = calendar.period();
    if at.is_empty() {
        return format!("  periods: the trace lies within one {period} ({calendar})\n");
    }
    let shown: Vec<String> = at
        .iter()
        .take(SHOWN)
        .map(|&nanos| {
            let time = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(nanos);
            humantime::format_rfc3339_seconds(time).to_string()
        })
        .collect();
    let more = match at.len() {
        n if n >= crate::replay::MAX_BOUNDARIES => " and more".to_owned(),
        n if n > SHOWN => format!(" and {} more", n - SHOWN),
        _ => String::new(),
    };
    format!(
        "  periods: each {period} ({calendar}) counts afresh; the trace crosses {} at {}{more}\n",
        if at.len() == 1 {
            "a boundary".to_owned()
        } else {
            format!("{} boundaries", at.len())
        },
        shown.join(", ")
    )
}

/// `part` as a percentage of `whole` with one decimal, rounded half up
/// (`-` when `whole` is zero).
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".to_owned();
    }
    // Tenths of a percent, in integers: no float rounding surprises.
    let tenths = (u128::from(part) * 2000 + u128::from(whole)) / (2 * u128::from(whole));
    format!("{}.{}", tenths / 10, tenths % 10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::Peak;

    #[test]
    fn a_concurrency_limit_is_described_as_what_it_holds() {
        let limit = Limit::new(Strategy::Concurrency, 4, std::time::Duration::from_secs(300)).unwrap();
        assert_eq!(
            describe_limit(&limit),
            "concurrency, 4 at once, ttl 5m; replayed holding nothing"
        );
    }

    #[test]
    fn strategy_goes_before_the_extension() {
        let p = |s: &str| path_for_strategy(Path::new(s), Strategy::FixedWindow, false);
        assert_eq!(p("out.csv"), Some("out.fixed_window.csv".into()));
        // A path that can only name a directory is not a file name.
        assert_eq!(p("/tmp/"), None);
        assert_eq!(p("out/"), None);
        assert_eq!(
            path_for_strategy(Path::new("/tmp"), Strategy::TokenBucket, true),
            Some("/tmp/token_bucket.csv".into())
        );
        assert_eq!(p("dir/run.1.csv"), Some("dir/run.1.fixed_window.csv".into()));
        assert_eq!(p("out"), Some("out.fixed_window".into()));
        assert_eq!(p("dir/.csv"), Some("dir/.csv.fixed_window".into()));
        assert_eq!(p("/"), None);
        assert_eq!(p(".."), None);
    }

    #[test]
    fn percentages_round_half_up_in_integers() {
        assert_eq!(percent(0, 0), "-");
        assert_eq!(percent(0, 7), "0.0");
        assert_eq!(percent(7, 7), "100.0");
        assert_eq!(percent(1, 3), "33.3");
        assert_eq!(percent(2, 3), "66.7");
        assert_eq!(percent(1, 8), "12.5"); // exactly 12.5
        assert_eq!(percent(1, 16), "6.3"); // 6.25 rounds up
        assert_eq!(percent(u64::MAX, u64::MAX), "100.0");
        assert_eq!(percent(1, u64::MAX), "0.0");
    }

    #[test]
    fn title_names_the_policy_and_the_trace() {
        assert_eq!(
            title(5, Duration::from_millis(1500), 1200, 2),
            "limit 5 per 1s 500ms: 1200 requests from 2 keys"
        );
        assert_eq!(
            title(1, Duration::from_secs(60), 1, 1),
            "limit 1 per 1m: 1 request from 1 key"
        );
    }

    #[test]
    fn summary_is_aligned() {
        let stats = |strategy: Strategy, admitted, units, key, most_denied: &[(usize, u64)]| Stats {
            name: strategy.name().to_owned(),
            requests: 1200,
            admitted,
            denied: 1200 - admitted,
            keys: 3,
            peak: Peak { units, key },
            most_denied: most_denied.to_vec(),
            limits: Vec::new(),
            measured: 0,
            lists: ListStats::default(),
            delays: None,
            boundaries: None,
        };
        let mut keys = Names::default();
        for k in ["10.0.0.1", "k", "tab\there"] {
            keys.intern(k);
        }
        let text = summary(
            "limit 5 per 1s 500ms: 1200 requests from 3 keys",
            "strategy",
            &[
                stats(Strategy::FixedWindow, 1000, 10, Some(0), &[(1, 150), (0, 50)]),
                stats(
                    Strategy::LeakyBucket,
                    7,
                    5,
                    Some(1),
                    &[(2, 1000), (1, 100), (0, 93)],
                ),
                stats(Strategy::TokenBucket, 0, 0, None, &[(0, 1200)]),
                stats(Strategy::SlidingWindow, 1200, 2, Some(2), &[]),
            ],
            &keys,
        );
        let expected = "\
limit 5 per 1s 500ms: 1200 requests from 3 keys
strategy        admitted  denied  denied%  max_in_window  max_key    most_denied
fixed_window        1000     200     16.7             10  10.0.0.1   k (150), 10.0.0.1 (50)
leaky_bucket           7    1193     99.4              5  k          tab\\there (1000), k (100), 10.0.0.1 (93)
token_bucket           0    1200    100.0              0  -          10.0.0.1 (1200)
sliding_window      1200       0      0.0              2  tab\\there  -
";
        assert_eq!(text, expected);
    }

    #[test]
    fn a_compound_row_is_followed_by_a_line_per_limit() {
        let limit = |strategy, l, secs| Limit::new(strategy, l, Duration::from_secs(secs)).unwrap();
        let peak = |units, key| Peak { units, key };
        let mut keys = Names::default();
        for k in ["10.0.0.1", "k"] {
            keys.intern(k);
        }
        let single = Stats {
            name: "default".to_owned(),
            requests: 10,
            admitted: 10,
            denied: 0,
            keys: 1,
            peak: peak(10, Some(1)),
            most_denied: Vec::new(),
            limits: Vec::new(),
            measured: 0,
            lists: ListStats::default(),
            delays: None,
            boundaries: None,
        };
        let compound = Stats {
            name: "api".to_owned(),
            requests: 1200,
            admitted: 1000,
            denied: 200,
            keys: 2,
            peak: peak(1000, Some(0)),
            most_denied: vec![(0, 150), (1, 50)],
            limits: vec![
                LimitStats {
                    limit: limit(Strategy::TokenBucket, 10, 1),
                    denied: 15,
                    peak: peak(10, Some(1)),
                },
                LimitStats {
                    limit: limit(Strategy::SlidingWindow, 1000, 3600),
                    denied: 185,
                    peak: peak(1000, Some(0)),
                },
                LimitStats {
                    limit: limit(Strategy::FixedWindow, 5000, 86_400),
                    denied: 0,
                    peak: peak(0, None),
                },
            ],
            measured: 1,
            lists: ListStats::default(),
            delays: None,
            boundaries: None,
        };
        let text = summary("title", "policy", &[single, compound], &keys);
        let expected = "\
title
policy   admitted  denied  denied%  max_in_window  max_key   most_denied
default        10       0      0.0             10  k         -
api          1000     200     16.7           1000  10.0.0.1  10.0.0.1 (150), k (50)
  limits[0] token_bucket, 10 per 1s:      15 denied, max_in_window 10 (k)
  limits[1] sliding_window, 1000 per 1h: 185 denied, max_in_window 1000 (10.0.0.1)
  limits[2] fixed_window, 5000 per 1day:   0 denied, max_in_window 0
";
        assert_eq!(text, expected);
    }

    #[test]
    fn lists_and_shadow_mode_get_a_line_each_under_their_row() {
        let mut keys = Names::default();
        for k in ["10.0.0.1", "k"] {
            keys.intern(k);
        }
        let row = |name: &str, lists: ListStats| Stats {
            name: name.to_owned(),
            requests: 10,
            admitted: 10,
            denied: 0,
            keys: 2,
            peak: Peak {
                units: 3,
                key: Some(1),
            },
            most_denied: Vec::new(),
            limits: Vec::new(),
            measured: 0,
            lists,
            delays: None,
            boundaries: None,
        };
        let enforcing = ListStats {
            exempt: Some(1),
            deny_listed: Some(0),
            ..ListStats::default()
        };
        let shadow = ListStats {
            deny_listed: Some(2),
            shadow_denied: Some(6),
            most_shadow_denied: vec![(0, 4), (1, 2)],
            ..ListStats::default()
        };
        let quiet = ListStats {
            shadow_denied: Some(0),
            ..ListStats::default()
        };
        let text = summary(
            "title",
            "policy",
            &[
                row("default", ListStats::default()),
                row("login", enforcing),
                row("api", shadow),
                row("quiet", quiet),
            ],
            &keys,
        );
        let expected = "\
title
policy   admitted  denied  denied%  max_in_window  max_key  most_denied
default        10       0      0.0              3  k        -
login          10       0      0.0              3  k        -
  exempt: 1 request allowed without counting
  deny list: 0 requests denied
api            10       0      0.0              3  k        -
  deny list: 2 requests enforcement would deny
  shadow: 6 requests allowed that enforcement would deny: 10.0.0.1 (4), k (2)
quiet          10       0      0.0              3  k        -
  shadow: 0 requests allowed that enforcement would deny
";
        assert_eq!(text, expected);
    }

    #[test]
    fn decisions_file_appears_only_when_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.csv");
        let mut file = DecisionsFile::create(&path, false).unwrap();
        let trace = crate::trace::csv::parse(b"time,key,cost\n2024-05-01T12:00:00+02:00,x,2\n").unwrap();
        let request = &trace.requests[0];
        let decision = Decision::new(
            false,
            1,
            0,
            Duration::from_nanos(1_000_001),
            Some(Duration::from_nanos(1)),
        );
        file.write(request, trace.time(request), "a,b", &decision)
            .unwrap();
        let finished = file.finish().unwrap();
        assert!(!path.exists());
        finished.persist().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "time,key,cost,allowed,remaining,reset_ms,retry_after_ms\n\
             2024-05-01T12:00:00+02:00,\"a,b\",2,false,0,2,1\n"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn abandoned_decisions_file_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = DecisionsFile::create(&dir.path().join("d.csv"), false).unwrap();
        drop(file);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
