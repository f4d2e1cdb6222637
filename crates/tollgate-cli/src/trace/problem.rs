//! What can be wrong with a trace: the problem of one line, with its line
//! number, and the errors of reading a trace file.

use std::io;
use std::path::PathBuf;

use super::lines::{LineError, MAX_LINE};
use crate::shown::quoted;

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
        reason: String,
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
