//! Reading request traces.
//!
//! A trace is CSV with a header row. The `time` and `key` columns are
//! required, `cost` and `resource` are optional, any other column is
//! ignored and the columns
//! may come in any order (header names are matched ignoring case and
//! surrounding whitespace). Every data row must have as many fields as the
//! header; a row that cannot be read stops the whole read with an error
//! naming its 1-based file line (the header is line 1).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use ahash::AHashMap;
use csv::{ReaderBuilder, StringRecord};

/// One request of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The 1-based file line the request starts on.
    pub line: u64,
    /// The `time` field exactly as written in the trace.
    pub time: String,
    /// The time in nanoseconds since the Unix epoch.
    pub nanos: u64,
    /// The index of the request's key in [`Trace::keys`].
    pub key: usize,
    /// The index of the request's resource in [`Trace::resources`], if it
    /// names one (`None`: the default policy applies).
    pub resource: Option<usize>,
    /// The units the request costs (1 when the trace has no `cost` column or
    /// the field is empty).
    pub cost: u64,
}

/// A whole trace, validated and held in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// The distinct keys, in order of first appearance.
    pub keys: Vec<String>,
    /// The distinct resources, in order of first appearance.
    pub resources: Vec<String>,
    /// The requests, in input order.
    pub requests: Vec<Request>,
}

/// Why a time field was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// The field is empty.
    #[error("empty time")]
    Empty,
    /// The time is before the Unix epoch.
    #[error("bad time {0:?}: before the Unix epoch")]
    Negative(String),
    /// The time does not fit in 64-bit nanoseconds since the epoch.
    #[error("bad time {0:?}: too late, nanoseconds since the Unix epoch overflow 64 bits")]
    Overflow(String),
    /// The field is neither integer milliseconds nor an RFC 3339 timestamp.
    #[error(
        "bad time {value:?}: expected integer milliseconds since the Unix epoch \
         or an RFC 3339 timestamp such as 2024-05-01T12:00:00.250+02:00 ({detail})"
    )]
    Syntax {
        /// The field as written.
        value: String,
        /// Why it is not an RFC 3339 timestamp.
        detail: String,
    },
}

/// What is wrong with one line of a trace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The file has no header row.
    #[error("empty trace: expected a header row naming the `time` and `key` columns")]
    Empty,
    /// A required column is not in the header row.
    #[error("missing column `{0}` in the header row")]
    MissingColumn(&'static str),
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
    #[error("bad cost {value:?}: {reason}")]
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
    #[error("bad resource {value:?}: {reason}")]
    Resource {
        /// The field as written.
        value: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A line of an access log (`--format nginx`) is malformed.
    #[error(transparent)]
    AccessLog(#[from] crate::access_log::LogProblem),
    /// The line is not valid UTF-8.
    #[error("invalid UTF-8")]
    InvalidUtf8,
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
    /// Reads and validates the trace at `path`.
    ///
    /// # Errors
    ///
    /// [`TraceError`] when the file cannot be read or any line is invalid.
    pub fn read_path(path: &Path) -> Result<Trace, TraceError> {
        let data = fs::read(path).map_err(|source| TraceError::Open {
            path: path.to_owned(),
            source,
        })?;
        Trace::parse(&data).map_err(|error| TraceError::Parse {
            path: path.to_owned(),
            error,
        })
    }

    /// Validates a whole trace held in memory.
    ///
    /// # Errors
    ///
    /// [`ParseError`] for the first line that is invalid.
    pub fn parse(data: &[u8]) -> Result<Trace, ParseError> {
        let mut lines = LineCounter::new(data);
        let mut reader = ReaderBuilder::new()
            .has_headers(true)
            .flexible(true)
            .from_reader(data);
        let header = reader.headers().map_err(|e| csv_error(e, &mut lines))?.clone();
        let header_line = lines.line_at(header.position().map_or(0, csv::Position::byte));
        let columns = Columns::find(&header).map_err(|problem| ParseError {
            line: Some(header_line),
            problem,
        })?;
        let mut trace = TraceBuilder::default();
        let mut record = StringRecord::new();
        while reader
            .read_record(&mut record)
            .map_err(|e| csv_error(e, &mut lines))?
        {
            let line = lines.line_at(record.position().map_or(0, csv::Position::byte));
            let row = columns.parse(&header, &record).map_err(|problem| ParseError {
                line: Some(line),
                problem,
            })?;
            trace.push(line, row.time, row.nanos, row.key, row.resource, row.cost);
        }
        Ok(trace.finish())
    }
}

/// Builds a [`Trace`] one request at a time, numbering keys and resources
/// in order of first appearance.
#[derive(Debug, Default)]
pub struct TraceBuilder {
    /// The trace so far.
    trace: Trace,
    /// The index of every key in `trace.keys`.
    keys: AHashMap<String, usize>,
    /// The index of every resource in `trace.resources`.
    resources: AHashMap<String, usize>,
}

impl TraceBuilder {
    /// Appends one valid request.
    pub fn push(&mut self, line: u64, time: &str, nanos: u64, key: &str, resource: Option<&str>, cost: u64) {
        let key = intern(&mut self.keys, &mut self.trace.keys, key);
        let resource = resource.map(|r| intern(&mut self.resources, &mut self.trace.resources, r));
        self.trace.requests.push(Request {
            line,
            time: time.to_owned(),
            nanos,
            key,
            resource,
            cost,
        });
    }

    /// The trace built.
    pub fn finish(self) -> Trace {
        self.trace
    }
}

/// The index of `name` in `names`, appending it when new.
fn intern(index: &mut AHashMap<String, usize>, names: &mut Vec<String>, name: &str) -> usize {
    if let Some(&i) = index.get(name) {
        return i;
    }
    let i = names.len();
    names.push(name.to_owned());
    index.insert(name.to_owned(), i);
    i
}

/// Turns the byte offsets the CSV reader reports into 1-based file lines.
///
/// The reader's own line numbers skip blank lines and miscount CRLF, and its
/// offset for a record that follows blank lines points at the first of them,
/// so lines are counted here: `\n`, `\r\n` and a lone `\r` each end a line.
struct LineCounter<'a> {
    /// The whole trace.
    data: &'a [u8],
    /// Every line ending before `pos` has been counted.
    pos: usize,
    /// The line `pos` is on.
    line: u64,
}

impl<'a> LineCounter<'a> {
    /// A counter at the start of `data`, on line 1.
    fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            pos: 0,
            line: 1,
        }
    }

    /// The line of the record the reader places at byte offset `byte`
    /// (offsets never decrease from one call to the next).
    fn line_at(&mut self, byte: u64) -> u64 {
        let mut start = usize::try_from(byte).unwrap_or(usize::MAX).min(self.data.len());
        while matches!(self.data.get(start), Some(b'\n' | b'\r')) {
            start += 1;
        }
        for i in self.pos..start {
            match self.data[i] {
                b'\n' => self.line += 1,
                b'\r' if self.data.get(i + 1) != Some(&b'\n') => self.line += 1,
                _ => {}
            }
        }
        self.pos = self.pos.max(start);
        self.line
    }
}

/// Where the columns the simulator reads are in each row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Columns {
    /// The index of `time`.
    time: usize,
    /// The index of `key`.
    key: usize,
    /// The index of `cost`, if the trace has it.
    cost: Option<usize>,
    /// The index of `resource`, if the trace has it.
    resource: Option<usize>,
    /// The number of columns in the header.
    count: usize,
}

/// The fields of one valid row.
struct Row<'a> {
    /// The `time` field as written.
    time: &'a str,
    /// The time in nanoseconds since the epoch.
    nanos: u64,
    /// The `key` field.
    key: &'a str,
    /// The cost (1 by default).
    cost: u64,
    /// The resource, if the row names one.
    resource: Option<&'a str>,
}

impl Columns {
    /// Locates the columns in the header row.
    fn find(header: &StringRecord) -> Result<Columns, Problem> {
        if header.is_empty() {
            return Err(Problem::Empty);
        }
        let find = |name: &'static str| -> Result<Option<usize>, Problem> {
            let mut found = header
                .iter()
                .enumerate()
                .filter(|(_, h)| h.trim().eq_ignore_ascii_case(name))
                .map(|(i, _)| i);
            let first = found.next();
            match found.next() {
                Some(_) => Err(Problem::DuplicateColumn(name)),
                None => Ok(first),
            }
        };
        Ok(Columns {
            time: find("time")?.ok_or(Problem::MissingColumn("time"))?,
            key: find("key")?.ok_or(Problem::MissingColumn("key"))?,
            cost: find("cost")?,
            resource: find("resource")?,
            count: header.len(),
        })
    }

    /// Validates one data row.
    fn parse<'a>(&self, header: &StringRecord, record: &'a StringRecord) -> Result<Row<'a>, Problem> {
        let found = record.len();
        if found != self.count {
            let needed = [Some(self.time), Some(self.key), self.cost, self.resource];
            return Err(match needed.into_iter().flatten().filter(|&i| i >= found).min() {
                Some(missing) if found < self.count => Problem::MissingField {
                    column: header.get(missing).unwrap_or_default().trim().to_owned(),
                    expected: self.count,
                    found,
                },
                _ => Problem::FieldCount {
                    expected: self.count,
                    found,
                },
            });
        }
        let field = |i: usize| record.get(i).unwrap_or_default();
        let time = field(self.time);
        let nanos = parse_time(time)?;
        let key = field(self.key);
        if key.trim().is_empty() {
            return Err(Problem::EmptyKey);
        }
        let cost = match self.cost {
            Some(i) => parse_cost(field(i))?,
            None => 1,
        };
        let resource = match self.resource {
            Some(i) => parse_resource(field(i))?,
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

/// Converts a reader error into a [`ParseError`] with its line when known.
fn csv_error(err: csv::Error, lines: &mut LineCounter<'_>) -> ParseError {
    let line = err.position().map(|p| lines.line_at(p.byte()));
    let problem = match err.kind() {
        csv::ErrorKind::Utf8 { .. } => Problem::InvalidUtf8,
        csv::ErrorKind::Io(e) => Problem::Read(format!("cannot read: {e}")),
        _ => Problem::Read(err.to_string()),
    };
    ParseError { line, problem }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(t.keys, ["k1", "k2"]);
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
        assert_eq!(t.resources, ["login", "search"]);
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
        assert_eq!(t.requests[0].time, "5");
    }

    #[test]
    fn time_is_kept_as_written() {
        let t = read("time,key\n\" 2024-05-01T12:00:00+02:00\",a\n").unwrap();
        assert_eq!(t.requests[0].time, " 2024-05-01T12:00:00+02:00");
    }

    #[test]
    fn header_only_is_an_empty_trace() {
        assert_eq!(read("time,key\n").unwrap(), Trace::default());
    }

    #[test]
    fn header_errors_are_on_line_one() {
        assert_eq!(err(""), (Some(1), Problem::Empty));
        assert_eq!(err("key,cost\na,1\n"), (Some(1), Problem::MissingColumn("time")));
        assert_eq!(err("time,path\n1,/\n"), (Some(1), Problem::MissingColumn("key")));
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
    fn invalid_utf8_names_the_line() {
        let bytes = b"time,key\n1,a\n2,\xff\n";
        let e = Trace::parse(bytes).unwrap_err();
        assert_eq!((e.line, e.problem), (Some(3), Problem::InvalidUtf8));
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
