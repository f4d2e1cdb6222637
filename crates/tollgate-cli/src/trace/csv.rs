//! Reading CSV traces.
//!
//! A trace is CSV with a header row. The `time` and `key` columns are
//! required, `cost` and `resource` are optional, any other column is
//! ignored (its bytes need not even be UTF-8) and the columns may come in
//! any order (header names are matched ignoring case and surrounding
//! whitespace). Every data row must have as many fields as the header; a row
//! that cannot be read stops the whole read with an error naming its 1-based
//! file line (the header is line 1), unless invalid rows are skipped.
//!
//! The input is read one record at a time ([`super::csv_records`]), so no
//! more than one line (at most 64 KiB) of it is held besides the requests.

use std::io::BufRead;

use super::csv_records::{CsvReader, Record};
use super::fields::{parse_cost, parse_resource, parse_time};
use super::model::{Trace, TraceBuilder};
use super::problem::{Hint, ParseError, Problem};

/// Validates a whole CSV trace held in memory, stopping at the first
/// invalid line.
///
/// # Errors
///
/// [`ParseError`] for the first line that is invalid.
#[cfg(test)]
pub fn parse(data: &[u8]) -> Result<Trace, ParseError> {
    read(data, false)
}

/// Reads and validates a CSV trace from `input`, one line at a time. With
/// `skip_invalid`, data rows that are invalid are counted in
/// [`Trace::skipped`] instead of stopping the read (a header without the
/// required columns, a line longer than [`super::lines::MAX_LINE`], a
/// malformed quoted field and read errors still stop it).
///
/// # Errors
///
/// [`ParseError`] for the first line that is invalid (and not skipped).
pub fn read(input: impl BufRead, skip_invalid: bool) -> Result<Trace, ParseError> {
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
    if super::access_log::parse_line(text.trim_end()).is_ok() {
        Hint::AccessLog
    } else if text.contains('\t') {
        Hint::Tabs
    } else if text.contains(';') {
        Hint::Semicolons
    } else {
        Hint::None
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;
    use crate::trace::lines::MAX_LINE;
    use crate::trace::problem::TimeError;

    fn read(text: &str) -> Result<Trace, ParseError> {
        parse(text.as_bytes())
    }

    fn err(text: &str) -> (Option<u64>, Problem) {
        let e = read(text).expect_err("the trace should be rejected");
        (e.line, e.problem)
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
                    reason: "a resource name must not contain control characters; found U+000A at byte 2"
                        .into()
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
        let e = parse(bytes).unwrap_err();
        assert_eq!(
            (e.line, &e.problem),
            (Some(3), &Problem::InvalidUtf8("the `Key` field".into()))
        );
        assert_eq!(e.to_string(), "line 3: invalid UTF-8 in the `Key` field");
        let t = parse(b"time,key,agent\n1,a,\xff\xfe\n2,b,x\n").unwrap();
        assert_eq!(t.requests.len(), 2);
    }

    #[test]
    fn an_unclosed_quote_is_an_error_naming_its_line() {
        let e = parse(b"time,key\n1,a\n2,\"b\n3,c\n4,d\n").unwrap_err();
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
        let e = parse(&data).unwrap_err();
        assert_eq!((e.line, e.problem), (Some(2), Problem::LineTooLong));
        let e = super::read(io::BufReader::new(io::repeat(0)), false).unwrap_err();
        assert_eq!((e.line, e.problem), (Some(1), Problem::LineTooLong));
    }

    #[test]
    fn skipping_counts_invalid_rows_and_keeps_the_first_few() {
        let mut text = String::from("time,key\n");
        for i in 0..10 {
            text.push_str(&format!("{i},k\nbad,k\n"));
        }
        let t = super::read(text.as_bytes(), true).unwrap();
        assert_eq!(t.requests.len(), 10);
        assert_eq!(t.skipped.count, 10);
        let lines: Vec<_> = t.skipped.first.iter().map(|e| e.line).collect();
        assert_eq!(lines, [Some(3), Some(5), Some(7), Some(9), Some(11)]);
        // The header and unclosed quotes still stop the read.
        assert!(super::read(&b"when,key\n"[..], true).is_err());
        assert!(super::read(&b"time,key\n1,\"a\n"[..], true).is_err());
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
