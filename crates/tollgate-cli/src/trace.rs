//! Reading request traces.
//!
//! A trace is CSV with a header row. The `time` and `key` columns are
//! required, `cost` and `resource` are optional, any other column is
//! ignored (its bytes need not even be UTF-8) and the columns may come in
//! any order (header names are matched ignoring case and surrounding
//! whitespace). Every data row must have as many fields as the header; a row
//! that cannot be read stops the whole read with an error naming its 1-based
//! file line (the header is line 1), unless invalid rows are skipped.
//!
//! The input is read one line at a time ([`crate::lines`]): no line may be
//! longer than [`MAX_LINE`] bytes, and only the parsed requests are kept,
//! compactly (keys and times stored once in shared buffers).

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use hashbrown::HashTable;

use crate::csv_records::{CsvError, CsvReader, Record};
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
    AccessLog(#[from] crate::access_log::LogProblem),
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

/// How a trace is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// CSV with a header row.
    Csv,
    /// An nginx or Apache access log ([`crate::access_log`]).
    AccessLog,
}

impl Trace {
    /// Reads and validates the trace at `path`, written in `format`, one
    /// line at a time. With `skip_invalid`, data lines that are invalid are
    /// counted in [`Trace::skipped`] instead of stopping the read (a header
    /// without the required columns, a line longer than [`MAX_LINE`], a
    /// malformed quoted field and read errors still stop it).
    ///
    /// # Errors
    ///
    /// [`TraceError`] when the file cannot be read or a line is invalid.
    pub fn read_path(path: &Path, format: Format, skip_invalid: bool) -> Result<Trace, TraceError> {
        let file = File::open(path).map_err(|source| TraceError::Open {
            path: path.to_owned(),
            source,
        })?;
        let input = BufReader::with_capacity(64 * 1024, file);
        match format {
            Format::Csv => Trace::read_csv(input, skip_invalid),
            Format::AccessLog => crate::access_log::read(input, skip_invalid),
        }
        .map_err(|error| TraceError::Parse {
            path: path.to_owned(),
            error,
        })
    }

    /// Validates a whole CSV trace held in memory, stopping at the first
    /// invalid line.
    ///
    /// # Errors
    ///
    /// [`ParseError`] for the first line that is invalid.
    #[cfg(test)]
    pub fn parse(data: &[u8]) -> Result<Trace, ParseError> {
        Trace::read_csv(data, false)
    }

    /// Reads and validates a CSV trace from `input` (see
    /// [`Trace::read_path`]).
    ///
    /// # Errors
    ///
    /// [`ParseError`] for the first line that is invalid (and not skipped).
    pub fn read_csv(input: impl BufRead, skip_invalid: bool) -> Result<Trace, ParseError> {
        let mut reader = CsvReader::new(input);
        let mut header = Record::default();
        if !reader.next_record(&mut header)? {
            return Err(ParseError {
                line: Some(1),
                problem: Problem::Empty,
            });
        }
        let columns = Columns::find(&header, reader.last_line()).map_err(|problem| ParseError {
            line: Some(header.line),
            problem,
        })?;
        let mut trace = TraceBuilder::new(skip_invalid);
        let mut record = Record::default();
        while reader.next_record(&mut record)? {
            match columns.parse(&record) {
                Ok(row) => trace.push(record.line, row.time, row.nanos, row.key, row.resource, row.cost),
                Err(problem) => trace.invalid(ParseError {
                    line: Some(record.line),
                    problem,
                })?,
            }
        }
        Ok(trace.finish())
    }

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

/// Where the columns the simulator reads are in each row.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Columns {
    /// The index of `time`.
    time: usize,
    /// The index of `key`.
    key: usize,
    /// The index of `cost`, if the trace has it.
    cost: Option<usize>,
    /// The index of `resource`, if the trace has it.
    resource: Option<usize>,
    /// The header's names (invalid UTF-8 replaced), for messages.
    names: Vec<String>,
}

/// The fields of one valid row.
struct Row<'a> {
    /// The `time` field as written.
    time: &'a str,
    /// The time in nanoseconds since the epoch.
    nanos: u64,
    /// The key.
    key: &'a str,
    /// The units.
    cost: u64,
    /// The resource, if the row names one.
    resource: Option<&'a str>,
}

impl Columns {
    /// Locates the columns in the header row; `raw` is the header line as
    /// written, to suggest what is wrong when a column is missing.
    fn find(header: &Record, raw: &[u8]) -> Result<Columns, Problem> {
        let names: Vec<String> = header
            .iter()
            .map(|h| String::from_utf8_lossy(h).trim().to_owned())
            .collect();
        let find = |name: &'static str| -> Result<Option<usize>, Problem> {
            let mut found = names
                .iter()
                .enumerate()
                .filter(|(_, h)| h.eq_ignore_ascii_case(name))
                .map(|(i, _)| i);
            let first = found.next();
            match found.next() {
                Some(_) => Err(Problem::DuplicateColumn(name)),
                None => Ok(first),
            }
        };
        let missing = |name| Problem::MissingColumn(name, hint(raw));
        Ok(Columns {
            time: find("time")?.ok_or_else(|| missing("time"))?,
            key: find("key")?.ok_or_else(|| missing("key"))?,
            cost: find("cost")?,
            resource: find("resource")?,
            names,
        })
    }

    /// Validates one data row.
    fn parse<'a>(&self, record: &'a Record) -> Result<Row<'a>, Problem> {
        let found = record.len();
        let expected = self.names.len();
        if found != expected {
            let needed = [Some(self.time), Some(self.key), self.cost, self.resource];
            return Err(match needed.into_iter().flatten().filter(|&i| i >= found).min() {
                Some(missing) if found < expected => Problem::MissingField {
                    column: self.names[missing].clone(),
                    expected,
                    found,
                },
                _ => Problem::FieldCount { expected, found },
            });
        }
        let field = |i: usize| -> Result<&'a str, Problem> {
            let bytes = record.get(i).unwrap_or_default();
            std::str::from_utf8(bytes)
                .map_err(|_| Problem::InvalidUtf8(format!("the `{}` field", self.names[i])))
        };
        let time = field(self.time)?;
        let nanos = parse_time(time)?;
        let key = field(self.key)?;
        if key.trim().is_empty() {
            return Err(Problem::EmptyKey);
        }
        let cost = match self.cost {
            Some(i) => parse_cost(field(i)?)?,
            None => 1,
        };
        let resource = match self.resource {
            Some(i) => parse_resource(field(i)?)?,
            None => None,
        };
        Ok(Row {
            time,
            nanos,
            key,
            cost,
            resource,
        })
    }
}

/// What a header line without the required columns looks like it is.
fn hint(raw: &[u8]) -> Hint {
    let text = String::from_utf8_lossy(raw);
    if crate::access_log::parse_line(text.trim_end()).is_ok() {
        Hint::AccessLog
    } else if text.contains('\t') {
        Hint::Tabs
    } else if text.contains(';') {
        Hint::Semicolons
    } else {
        Hint::None
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
    use std::io;

    use super::*;

    fn read(text: &str) -> Result<Trace, ParseError> {
        Trace::parse(text.as_bytes())
    }

    fn err(text: &str) -> (Option<u64>, Problem) {
        let e = read(text).expect_err("the trace should be rejected");
        (e.line, e.problem)
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

    #[test]
    fn columns_in_any_order_with_extras() {
        let t = read("path,Key , cost,time\n/a,k1,3,1000\n/b,k2,,2000\n/c,k1,0,1500\n").unwrap();
        assert_eq!(t.keys.iter().collect::<Vec<_>>(), ["k1", "k2"]);
        let summary: Vec<_> = t
            .requests
            .iter()
            .map(|r| (r.line, r.nanos, r.key, r.cost))
            .collect();
        assert_eq!(
            summary,
            [
                (2, 1_000_000_000, 0, 3),
                (3, 2_000_000_000, 1, 1),
                (4, 1_500_000_000, 0, 0)
            ]
        );
    }

    #[test]
    fn resources_are_optional_and_numbered_in_order_of_appearance() {
        let t = read("time,key,Resource\n1,a,login\n2,b,\n3,a, search \n4,b,login\n").unwrap();
        assert_eq!(t.resources.iter().collect::<Vec<_>>(), ["login", "search"]);
        let resources: Vec<_> = t.requests.iter().map(|r| r.resource).collect();
        assert_eq!(resources, [Some(0), None, Some(1), Some(0)]);
        let t = read("time,key\n1,a\n").unwrap();
        assert_eq!((t.requests[0].resource, t.resources.len()), (None, 0));
        assert_eq!(parse_resource(" \t "), Ok(None));
        assert_eq!(parse_resource("/api/items"), Ok(Some("/api/items")));
        assert_eq!(
            err("time,key,resource\n1,a,x\n2,a,\"lo\ngin\"\n"),
            (
                Some(3),
                Problem::Resource {
                    value: "lo\ngin".into(),
                    reason: "must not contain control characters"
                }
            )
        );
        assert_eq!(
            err("time,key,resource,resource\n"),
            (Some(1), Problem::DuplicateColumn("resource"))
        );
        assert_eq!(
            err("time,key,x,resource\n1,a,2\n").1,
            Problem::MissingField {
                column: "resource".into(),
                expected: 4,
                found: 3
            }
        );
    }

    #[test]
    fn cost_defaults_to_one_without_the_column() {
        let t = read("key,time\na,5\n").unwrap();
        assert_eq!(t.requests[0].cost, 1);
        assert_eq!(t.time(&t.requests[0]), "5");
    }

    #[test]
    fn time_is_kept_as_written() {
        let t = read("time,key\n\" 2024-05-01T12:00:00+02:00\",a\n").unwrap();
        assert_eq!(t.time(&t.requests[0]), " 2024-05-01T12:00:00+02:00");
    }

    #[test]
    fn header_only_is_an_empty_trace() {
        assert_eq!(read("time,key\n").unwrap(), Trace::default());
    }

    #[test]
    fn header_errors_are_on_line_one() {
        assert_eq!(err(""), (Some(1), Problem::Empty));
        assert_eq!(
            err("key,cost\na,1\n"),
            (Some(1), Problem::MissingColumn("time", Hint::None))
        );
        assert_eq!(
            err("time,path\n1,/\n"),
            (Some(1), Problem::MissingColumn("key", Hint::None))
        );
        assert_eq!(
            err("time,key,TIME\n"),
            (Some(1), Problem::DuplicateColumn("time"))
        );
    }

    #[test]
    fn line_numbers_count_the_header_and_skip_nothing() {
        assert_eq!(err("time,key\n1,a\n2,b\nx,c\n").0, Some(4));
        // Blank lines hold no request but still count as lines.
        assert_eq!(err("time,key\n1,a\n\n2,\n").0, Some(4));
        assert_eq!(err("time,key\n1,a\n\n\n\n2,\n").0, Some(6));
        // A quoted field over two lines: the next record starts on line 4.
        assert_eq!(err("time,key\n1,\"a\nb\"\n-2,c\n").0, Some(4));
        // CRLF and lone CR line endings.
        assert_eq!(err("time,key\r\n1,a\r\n\r\n2,\r\n").0, Some(4));
        assert_eq!(err("time,key\r1,a\r2,\r").0, Some(3));
        // A byte-order mark is not a line; blank lines before the header count.
        assert_eq!(err("\u{feff}time,key\n1,a\nx,b\n").0, Some(3));
        assert_eq!(err("\n\nkey\n").0, Some(3));
        // A line of spaces is a row with one field, not a blank line.
        assert_eq!(
            err("time,key\n1,a\n  \n"),
            (
                Some(3),
                Problem::MissingField {
                    column: "key".into(),
                    expected: 2,
                    found: 1
                }
            )
        );
    }

    #[test]
    fn row_problems() {
        assert_eq!(
            err("time,key,cost\n1,a,1\n2\n"),
            (
                Some(3),
                Problem::MissingField {
                    column: "key".into(),
                    expected: 3,
                    found: 1
                }
            )
        );
        assert_eq!(
            err("time,key,path\n1,a\n").1,
            Problem::FieldCount {
                expected: 3,
                found: 2
            }
        );
        assert_eq!(
            err("time,key\n1,a,extra\n").1,
            Problem::FieldCount {
                expected: 2,
                found: 3
            }
        );
        assert_eq!(err("time,key\n1, \n").1, Problem::EmptyKey);
        assert_eq!(err("time,key\n,a\n").1, Problem::Time(TimeError::Empty));
        assert!(matches!(err("time,key,cost\n1,a,x\n").1, Problem::Cost { .. }));
        assert!(matches!(
            err("time,key\n-5,a\n").1,
            Problem::Time(TimeError::Negative(_))
        ));
    }

    #[test]
    fn invalid_utf8_names_the_line_and_column_and_is_fine_where_ignored() {
        let bytes = b"time,Key\n1,a\n2,\xff\n";
        let e = Trace::parse(bytes).unwrap_err();
        assert_eq!(
            (e.line, &e.problem),
            (Some(3), &Problem::InvalidUtf8("the `Key` field".into()))
        );
        assert_eq!(e.to_string(), "line 3: invalid UTF-8 in the `Key` field");
        let t = Trace::parse(b"time,key,agent\n1,a,\xff\xfe\n2,b,x\n").unwrap();
        assert_eq!(t.requests.len(), 2);
    }

    #[test]
    fn an_unclosed_quote_is_an_error_naming_its_line() {
        let e = Trace::parse(b"time,key\n1,a\n2,\"b\n3,c\n4,d\n").unwrap_err();
        assert_eq!(
            (e.line, &e.problem),
            (Some(3), &Problem::UnclosedQuote { at_end: true })
        );
        assert!(e
            .to_string()
            .starts_with("line 3: the quoted field opened on this line has no closing quote"));
    }

    #[test]
    fn a_separator_other_than_a_comma_is_suggested() {
        assert_eq!(
            err("time\tkey\n1\ta\n"),
            (Some(1), Problem::MissingColumn("time", Hint::Tabs))
        );
        assert_eq!(
            err("time;key\n1;a\n"),
            (Some(1), Problem::MissingColumn("time", Hint::Semicolons))
        );
        let text = read("time\tkey\n").unwrap_err().to_string();
        assert!(
            text.contains("has tabs") && text.contains("comma-separated"),
            "{text}"
        );
    }

    #[test]
    fn a_line_longer_than_the_limit_is_an_error() {
        let mut data = b"time,key\n1,".to_vec();
        data.extend(vec![b'k'; MAX_LINE]);
        let e = Trace::parse(&data).unwrap_err();
        assert_eq!((e.line, e.problem), (Some(2), Problem::LineTooLong));
        let e = Trace::read_csv(io::BufReader::new(io::repeat(0)), false).unwrap_err();
        assert_eq!((e.line, e.problem), (Some(1), Problem::LineTooLong));
    }

    #[test]
    fn skipping_counts_invalid_rows_and_keeps_the_first_few() {
        let mut text = String::from("time,key\n");
        for i in 0..10 {
            text.push_str(&format!("{i},k\nbad,k\n"));
        }
        let t = Trace::read_csv(text.as_bytes(), true).unwrap();
        assert_eq!(t.requests.len(), 10);
        assert_eq!(t.skipped.count, 10);
        let lines: Vec<_> = t.skipped.first.iter().map(|e| e.line).collect();
        assert_eq!(lines, [Some(3), Some(5), Some(7), Some(9), Some(11)]);
        // The header and unclosed quotes still stop the read.
        assert!(Trace::read_csv(&b"when,key\n"[..], true).is_err());
        assert!(Trace::read_csv(&b"time,key\n1,\"a\n"[..], true).is_err());
    }

    #[test]
    fn messages_name_line_and_problem() {
        let e = read("time,key\n1,a\nsoon,b\n").unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("line 3: bad time \"soon\": expected integer milliseconds"),
            "{text}"
        );
    }
}
