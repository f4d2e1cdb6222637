//! Request traces held in memory, and what can be wrong with a trace's
//! lines.
//!
//! A [`Trace`] is built one request at a time by the readers of its formats
//! ([`crate::csv_trace`], [`crate::access_log`]) with a [`TraceBuilder`],
//! which keeps the requests compactly: keys and resources stored once each,
//! and every `time` field as written in one shared buffer. The field parsers
//! shared by the formats (time, cost, resource) are here too.

use std::io;
use std::path::PathBuf;

use hashbrown::HashTable;

use crate::csv_records::CsvError;
use crate::lines::{LineError, MAX_LINE};
use crate::shown::quoted;

/// One request of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The 1-based file line the request starts on.
    pub line: u64,
    /// The time in nanoseconds since the Unix epoch.
    pub nanos: u64,
    /// The units the request costs (1 when the trace has no `cost` column or
    /// the field is empty).
    pub cost: u64,
    /// The index of the request's key in [`Trace::keys`].
    pub key: usize,
    /// The index of the request's resource in [`Trace::resources`], if it
    /// names one (`None`: the default policy applies).
    pub resource: Option<usize>,
    /// Where the `time` field as written is in the trace's time text
    /// ([`Trace::time`]): start and end byte offsets.
    time: (usize, usize),
}

/// Distinct names (keys or resources), numbered in order of first
/// appearance, each stored once.
#[derive(Clone, Default)]
pub struct Names {
    /// Every name, one after the other.
    text: String,
    /// Where each name ends in `text`.
    ends: Vec<usize>,
    /// The index of every name, by hash.
    index: HashTable<usize>,
    /// The hasher of `index`, randomly seeded.
    hasher: ahash::RandomState,
}

impl Names {
    /// How many names there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// The name with index `i`.
    ///
    /// # Panics
    ///
    /// When `i` is not below [`Names::len`].
    pub fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text[start..self.ends[i]]
    }

    /// The names in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The index of `name`, if present.
    pub fn position(&self, name: &str) -> Option<usize> {
        let hash = self.hasher.hash_one(name);
        self.index.find(hash, |&i| self.get(i) == name).copied()
    }

    /// The index of `name`, added at the end when new.
    pub fn intern(&mut self, name: &str) -> usize {
        let hash = self.hasher.hash_one(name);
        let Self {
            text,
            ends,
            index,
            hasher,
        } = self;
        let get = |i: usize| &text[if i == 0 { 0 } else { ends[i - 1] }..ends[i]];
        if let Some(&i) = index.find(hash, |&i| get(i) == name) {
            return i;
        }
        let i = ends.len();
        text.push_str(name);
        ends.push(text.len());
        let name_at = |&i: &usize| {
            let start = if i == 0 { 0 } else { ends[i - 1] };
            hasher.hash_one(&text[start..ends[i]])
        };
        index.insert_unique(hash, i, name_at);
        i
    }
}

impl std::ops::Index<usize> for Names {
    type Output = str;

    fn index(&self, i: usize) -> &str {
        self.get(i)
    }
}

impl PartialEq for Names {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Names {}

impl std::fmt::Debug for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A whole trace, validated and held in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// The distinct keys, in order of first appearance.
    pub keys: Names,
    /// The distinct resources, in order of first appearance.
    pub resources: Names,
    /// The requests, in input order.
    pub requests: Vec<Request>,
    /// The invalid lines skipped (only with `skip_invalid`).
    pub skipped: Skipped,
    /// Every request's `time` field as written, one after the other.
    times: String,
}

/// The invalid lines a read skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// How many lines were skipped.
    pub count: u64,
    /// The first [`Skipped::KEPT`] of them, with their problems.
    pub first: Vec<ParseError>,
}

impl Skipped {
    /// How many skipped lines are named in reports.
    pub const KEPT: usize = 5;
}

/// Why a time field was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// The field is empty.
    #[error("empty time")]
    Empty,
    /// The time is before the Unix epoch.
    #[error("bad time {}: before the Unix epoch", quoted(.0))]
    Negative(String),
    /// The time does not fit in 64-bit nanoseconds since the epoch.
    #[error("bad time {}: too late, nanoseconds since the Unix epoch overflow 64 bits", quoted(.0))]
    Overflow(String),
    /// The field is neither integer milliseconds nor an RFC 3339 timestamp.
    #[error(
        "bad time {}: expected integer milliseconds since the Unix epoch \
         or an RFC 3339 timestamp such as 2024-05-01T12:00:00.250+02:00 ({detail})",
        quoted(.value)
    )]
    Syntax {
        /// The field as written.
        value: String,
        /// Why it is not an RFC 3339 timestamp.
        detail: String,
    },
}

/// What else a header without the required columns suggests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hint {
    /// Nothing.
    None,
    /// The header line is an access log line.
    AccessLog,
    /// The header has tabs: tab-separated values.
    Tabs,
    /// The header has semicolons: semicolon-separated values.
    Semicolons,
}

impl std::fmt::Display for Hint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let separated = |name: &str| {
            format!(
                " (the header row has {name} but columns are separated by commas: \
                 the trace must be comma-separated CSV)"
            )
        };
        match self {
            Hint::None => Ok(()),
            Hint::AccessLog => f.write_str(" (the file looks like an nginx access log: add --format nginx)"),
            Hint::Tabs => f.write_str(&separated("tabs")),
            Hint::Semicolons => f.write_str(&separated("semicolons")),
        }
    }
}

/// What is wrong with one line of a trace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The file has no header row.
    #[error("empty trace: expected a header row naming the `time` and `key` columns")]
    Empty,
    /// A required column is not in the header row.
    #[error("missing column `{0}` in the header row{1}")]
    MissingColumn(&'static str, Hint),
    /// A column the simulator reads appears more than once in the header.
    #[error("duplicate column `{0}` in the header row")]
    DuplicateColumn(&'static str),
    /// The row ends before a column the simulator reads.
    #[error("missing `{column}` field: expected {expected} fields, found {found}")]
    MissingField {
        /// The header name of the first column the row lacks.
        column: String,
        /// The number of columns in the header.
        expected: usize,
        /// The number of fields in the row.
        found: usize,
    },
    /// The row has a different number of fields than the header.
    #[error("wrong number of fields: expected {expected}, found {found}")]
    FieldCount {
        /// The number of columns in the header.
        expected: usize,
        /// The number of fields in the row.
        found: usize,
    },
    /// The `time` field is invalid.
    #[error(transparent)]
    Time(#[from] TimeError),
    /// The `cost` field is invalid.
    #[error("bad cost {}: {reason}", quoted(.value))]
    Cost {
        /// The field as written.
        value: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// The `key` field is empty or only whitespace.
    #[error("empty key")]
    EmptyKey,
    /// The `resource` field is invalid.
    #[error("bad resource {}: {reason}", quoted(.value))]
    Resource {
        /// The field as written.
        value: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A line of an access log (`--format nginx`) is malformed.
    #[error(transparent)]
    AccessLog(#[from] LogProblem),
    /// A field the simulator reads is not valid UTF-8.
    #[error("invalid UTF-8 in {0}")]
    InvalidUtf8(String),
    /// The line is longer than [`MAX_LINE`] bytes.
    #[error("the line is longer than {MAX_LINE} bytes, the most a trace line may hold")]
    LineTooLong,
    /// A quoted field's closing quote is followed by more text.
    #[error("text after the closing quote of a quoted field (a quote inside one is written \"\")")]
    AfterQuote,
    /// A quoted field is never closed.
    #[error(
        "the quoted field opened on this line has no closing quote {}",
        if *.at_end { "before the end of the file".to_owned() } else { format!("within {MAX_LINE} bytes") }
    )]
    UnclosedQuote {
        /// Whether the file ended (otherwise the field grew too long).
        at_end: bool,
    },
    /// The file could not be read.
    #[error("{0}")]
    Read(String),
}

/// What is wrong with one line of an access log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LogProblem {
    /// The line does not start with a client address.
    #[error("expected the client address at the start of the line")]
    Address,
    /// The line ends, or has something else, where a field should be.
    #[error("expected {expected} {after}, found {found}")]
    Expected {
        /// The field or character expected.
        expected: &'static str,
        /// Where: after which field.
        after: &'static str,
        /// What is there instead (quoted, shortened), or `the end of the line`.
        found: String,
    },
    /// A quoted field has no closing quote.
    #[error("the quoted {0} has no closing quote")]
    Unterminated(&'static str),
    /// The time is not `day/Mon/year:hour:minute:second zone`.
    #[error(
        "bad time {}: expected day/month/year:hour:minute:second zone, \
         such as 10/Oct/2000:13:55:36 -0700 ({detail})",
        quoted(.value)
    )]
    Time {
        /// The time as written, without brackets.
        value: String,
        /// Why it does not parse.
        detail: String,
    },
    /// The request is neither `METHOD TARGET [PROTOCOL]` nor `-`.
    #[error(
        "bad request {}: expected METHOD PATH PROTOCOL, such as \"GET /index.html HTTP/1.1\", or \"-\"",
        quoted(.0)
    )]
    Request(String),
    /// The status is not three digits.
    #[error("bad status {}: expected a three-digit HTTP status", quoted(.0))]
    Status(String),
    /// The size is neither digits nor `-`.
    #[error("bad size {}: expected a number of bytes or -", quoted(.0))]
    Size(String),
}

/// A problem and the line it was found on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The 1-based file line (the header is line 1), when known.
    pub line: Option<u64>,
    /// What is wrong.
    pub problem: Problem,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.problem),
            None => write!(f, "{}", self.problem),
        }
    }
}

impl std::error::Error for ParseError {}

impl From<LineError> for ParseError {
    fn from(err: LineError) -> Self {
        match err {
            LineError::TooLong { line } => ParseError {
                line: Some(line),
                problem: Problem::LineTooLong,
            },
            LineError::Io { line, source } => ParseError {
                line: Some(line),
                problem: Problem::Read(format!("cannot read: {source}")),
            },
        }
    }
}

impl From<CsvError> for ParseError {
    fn from(err: CsvError) -> Self {
        match err {
            CsvError::Line(err) => err.into(),
            CsvError::AfterQuote { line } => ParseError {
                line: Some(line),
                problem: Problem::AfterQuote,
            },
            CsvError::Unclosed { line, at_end } => ParseError {
                line: Some(line),
                problem: Problem::UnclosedQuote { at_end },
            },
        }
    }
}

/// Why a trace file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened.
    #[error("cannot open trace {}: {source}", path.display())]
    Open {
        /// The trace's path.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file's content is invalid.
    #[error("trace {}: {error}", path.display())]
    Parse {
        /// The trace's path.
        path: PathBuf,
        /// The line and problem.
        error: ParseError,
    },
}

impl Trace {
    /// The `time` field of `request` exactly as written in the trace.
    pub fn time(&self, request: &Request) -> &str {
        &self.times[request.time.0..request.time.1]
    }
}

/// Builds a [`Trace`] one request at a time, numbering keys and resources
/// in order of first appearance.
#[derive(Debug, Default)]
pub struct TraceBuilder {
    /// The trace so far.
    trace: Trace,
    /// Whether invalid lines are skipped rather than errors.
    skip_invalid: bool,
}

impl TraceBuilder {
    /// An empty trace; `skip_invalid` makes [`TraceBuilder::invalid`] count
    /// lines instead of failing.
    pub fn new(skip_invalid: bool) -> Self {
        Self {
            trace: Trace::default(),
            skip_invalid,
        }
    }

    /// Appends one valid request.
    pub fn push(&mut self, line: u64, time: &str, nanos: u64, key: &str, resource: Option<&str>, cost: u64) {
        let key = self.trace.keys.intern(key);
        let resource = resource.map(|r| self.trace.resources.intern(r));
        let start = self.trace.times.len();
        self.trace.times.push_str(time);
        self.trace.requests.push(Request {
            line,
            nanos,
            cost,
            key,
            resource,
            time: (start, self.trace.times.len()),
        });
    }

    /// An invalid data line: counted when skipping invalid lines.
    ///
    /// # Errors
    ///
    /// `error` itself unless skipping.
    pub fn invalid(&mut self, error: ParseError) -> Result<(), ParseError> {
        if !self.skip_invalid {
            return Err(error);
        }
        let skipped = &mut self.trace.skipped;
        skipped.count += 1;
        if skipped.first.len() < Skipped::KEPT {
            skipped.first.push(error);
        }
        Ok(())
    }

    /// The trace built.
    pub fn finish(mut self) -> Trace {
        self.trace.requests.shrink_to_fit();
        self.trace
    }
}

/// Parses a `time` field into nanoseconds since the Unix epoch.
///
/// Accepts integer milliseconds since the epoch (`1714564800250`) or an RFC
/// 3339 timestamp with any offset (`2024-05-01T12:00:00.25+02:00`);
/// surrounding whitespace is ignored.
///
/// # Errors
///
/// [`TimeError`] when the field is empty, malformed, before the epoch, or
/// too late for 64-bit nanoseconds (after 2554-07-21T23:34:33Z).
pub fn parse_time(field: &str) -> Result<u64, TimeError> {
    let s = field.trim();
    if s.is_empty() {
        return Err(TimeError::Empty);
    }
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        if negative && digits.bytes().any(|b| b != b'0') {
            return Err(TimeError::Negative(field.to_owned()));
        }
        // All digits: the only possible parse failure is overflow.
        return digits
            .parse::<u64>()
            .ok()
            .and_then(|ms| ms.checked_mul(1_000_000))
            .ok_or_else(|| TimeError::Overflow(field.to_owned()));
    }
    let at = chrono::DateTime::parse_from_rfc3339(s).map_err(|e| TimeError::Syntax {
        value: field.to_owned(),
        detail: e.to_string(),
    })?;
    let secs = u64::try_from(at.timestamp()).map_err(|_| TimeError::Negative(field.to_owned()))?;
    secs.checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(u64::from(at.timestamp_subsec_nanos())))
        .ok_or_else(|| TimeError::Overflow(field.to_owned()))
}

/// Parses a `cost` field: a non-negative integer, 1 when empty; surrounding
/// whitespace is ignored.
///
/// # Errors
///
/// [`Problem::Cost`] when the field is not a non-negative integer that fits
/// in 64 bits.
pub fn parse_cost(field: &str) -> Result<u64, Problem> {
    let s = field.trim();
    if s.is_empty() {
        return Ok(1);
    }
    let bad = |reason| Problem::Cost {
        value: field.to_owned(),
        reason,
    };
    if let Some(rest) = s.strip_prefix('-') {
        if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("must not be negative"));
        }
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("expected a non-negative integer"));
    }
    s.parse::<u64>().map_err(|_| bad("too large for 64 bits"))
}

/// Parses a `resource` field: the name of the policy that applies, with
/// surrounding whitespace ignored; `None` when empty (the default policy).
///
/// # Errors
///
/// [`Problem::Resource`] when the name contains a control character.
pub fn parse_resource(field: &str) -> Result<Option<&str>, Problem> {
    let name = field.trim();
    if name.chars().any(char::is_control) {
        return Err(Problem::Resource {
            value: field.to_owned(),
            reason: "must not contain control characters",
        });
    }
    Ok(Some(name).filter(|n| !n.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_numbered_in_order_and_stored_once() {
        let mut names = Names::default();
        assert_eq!(["b", "a", "b", "", "a"].map(|n| names.intern(n)), [0, 1, 0, 2, 1]);
        assert_eq!(names.iter().collect::<Vec<_>>(), ["b", "a", ""]);
        assert_eq!((names.position("a"), names.position("c")), (Some(1), None));
        assert_eq!((names.len(), &names[0]), (3, "b"));
    }

    #[test]
    fn integer_milliseconds() {
        assert_eq!(parse_time("0"), Ok(0));
        assert_eq!(parse_time("1714564800250"), Ok(1_714_564_800_250_000_000));
        assert_eq!(parse_time(" 15 "), Ok(15_000_000));
        assert_eq!(parse_time("-0"), Ok(0));
    }

    #[test]
    fn integer_milliseconds_out_of_range() {
        // u64::MAX nanoseconds is 18_446_744_073_709.551615 ms.
        assert_eq!(parse_time("18446744073709"), Ok(18_446_744_073_709_000_000));
        assert!(matches!(
            parse_time("18446744073710"),
            Err(TimeError::Overflow(_))
        ));
        assert!(matches!(
            parse_time("99999999999999999999999"),
            Err(TimeError::Overflow(_))
        ));
        assert!(matches!(parse_time("-1"), Err(TimeError::Negative(_))));
    }

    #[test]
    fn rfc3339_with_offsets() {
        let utc = parse_time("2024-05-01T10:00:00Z").unwrap();
        assert_eq!(utc, 1_714_557_600_000_000_000);
        assert_eq!(parse_time("2024-05-01T12:00:00+02:00"), Ok(utc));
        assert_eq!(parse_time("2024-05-01T05:30:00-04:30"), Ok(utc));
        assert_eq!(parse_time("2024-05-01T10:00:00.000000001Z"), Ok(utc + 1));
        assert_eq!(parse_time("2024-05-01T12:00:00.25+02:00"), Ok(utc + 250_000_000));
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok(0));
    }

    #[test]
    fn rfc3339_out_of_range() {
        assert!(matches!(
            parse_time("1969-12-31T23:59:59.5Z"),
            Err(TimeError::Negative(_))
        ));
        assert!(matches!(
            parse_time("1970-01-01T00:30:00+01:00"),
            Err(TimeError::Negative(_))
        ));
        assert!(parse_time("2554-07-21T23:34:33Z").is_ok());
        assert!(matches!(
            parse_time("2554-07-21T23:34:34Z"),
            Err(TimeError::Overflow(_))
        ));
        assert!(matches!(
            parse_time("9999-12-31T23:59:59Z"),
            Err(TimeError::Overflow(_))
        ));
    }

    #[test]
    fn malformed_times() {
        for bad in [
            "abc",
            "1.5",
            "12ms",
            "2024-05-01",
            "2024-05-01T10:00:00",
            "--1",
            "-",
            "+5",
        ] {
            assert!(matches!(parse_time(bad), Err(TimeError::Syntax { .. })), "{bad}");
        }
        assert_eq!(parse_time("  "), Err(TimeError::Empty));
    }

    #[test]
    fn costs() {
        assert_eq!(parse_cost(""), Ok(1));
        assert_eq!(parse_cost(" "), Ok(1));
        assert_eq!(parse_cost("0"), Ok(0));
        assert_eq!(parse_cost(" 7 "), Ok(7));
        assert_eq!(parse_cost("18446744073709551615"), Ok(u64::MAX));
        let reason = |s| match parse_cost(s) {
            Err(Problem::Cost { reason, .. }) => reason,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(reason("-3"), "must not be negative");
        assert_eq!(reason("1.5"), "expected a non-negative integer");
        assert_eq!(reason("+2"), "expected a non-negative integer");
        assert_eq!(reason("two"), "expected a non-negative integer");
        assert_eq!(reason("18446744073709551616"), "too large for 64 bits");
    }
}
