//! Splitting a CSV trace into records as it is read, one line at a time.
//!
//! Fields are separated by commas. A field that starts with `"` is quoted:
//! it may hold commas and line endings, `""` stands for one `"`, and its
//! closing quote must end the field (text after it, as in `"a"b`, is an
//! error rather than silently merged). A `"` anywhere else is an ordinary
//! character. Empty lines hold
//! no record. Fields are bytes: whether they must be UTF-8 is up to the
//! caller, who knows which columns it reads.
//!
//! A quote that is never closed is an error naming the line it was opened
//! on (instead of swallowing the rest of the file into one field), and so
//! is a record longer than [`MAX_LINE`] bytes: memory stays bounded whatever
//! the input.

use std::io::BufRead;

use super::lines::{Ending, Line, LineError, Lines, MAX_LINE};
use super::problem::{ParseError, Problem};

/// One record: its fields' bytes and the line it starts on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The 1-based line the record starts on.
    pub line: u64,
    /// The fields' bytes, one after the other.
    data: Vec<u8>,
    /// Where each field ends in `data`.
    ends: Vec<usize>,
}

impl Record {
    /// The number of fields.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// The bytes of field `i`, if the record has it.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.data[start..end])
    }

    /// The fields in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Ends the current field.
    fn end_field(&mut self) {
        self.ends.push(self.data.len());
    }
}

/// Why the next record could not be read.
#[derive(Debug)]
pub enum CsvError {
    /// A line is longer than [`MAX_LINE`], or the reader failed.
    Line(LineError),
    /// A quoted field's closing quote is followed by something other than a
    /// comma or the end of the line.
    AfterQuote {
        /// The line of the closing quote.
        line: u64,
    },
    /// A quoted field is not closed before the end of the file, or within
    /// [`MAX_LINE`] bytes.
    Unclosed {
        /// The line the field's opening quote is on.
        line: u64,
        /// Whether the file ended (otherwise the record grew too long).
        at_end: bool,
    },
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

/// Where the parser is within a record.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a field.
    Start,
    /// In a field that did not start with a quote.
    Unquoted,
    /// Inside quotes.
    Quoted,
    /// A `"` inside quotes: the closing quote, or the first of `""`.
    QuoteInQuoted,
}

/// Reads the records of a CSV input.
pub struct CsvReader<R> {
    /// The input's lines.
    lines: Lines<R>,
}

impl<R: BufRead> CsvReader<R> {
    /// A reader at the start of `input`.
    pub fn new(input: R) -> Self {
        Self {
            lines: Lines::new(input),
        }
    }

    /// The last physical line read, as written (for a one-line record: the
    /// record's line).
    pub fn last_line(&self) -> &[u8] {
        self.lines.current()
    }

    /// Reads the next record into `record`; `false` at the end of the input.
    ///
    /// # Errors
    ///
    /// [`CsvError`] for a line that is too long, an unclosed quote or a read
    /// error.
    pub fn next_record(&mut self, record: &mut Record) -> Result<bool, CsvError> {
        record.data.clear();
        record.ends.clear();
        let mut state = State::Start;
        let mut quote_line = 0;
        loop {
            let Some(Line {
                number: line,
                bytes,
                ending,
            }) = self.lines.next_line().map_err(CsvError::Line)?
            else {
                if state == State::Quoted {
                    return Err(CsvError::Unclosed {
                        line: quote_line,
                        at_end: true,
                    });
                }
                return Ok(false);
            };
            if state == State::Start && record.ends.is_empty() {
                if bytes.is_empty() {
                    continue;
                }
                record.line = line;
            }
            for &b in bytes {
                state = match (state, b) {
                    (State::Start, b'"') => {
                        quote_line = line;
                        State::Quoted
                    }
                    (State::Start | State::Unquoted | State::QuoteInQuoted, b',') => {
                        record.end_field();
                        State::Start
                    }
                    (State::Quoted, b'"') => State::QuoteInQuoted,
                    (State::Quoted, b) => {
                        record.data.push(b);
                        State::Quoted
                    }
                    (State::QuoteInQuoted, b'"') => {
                        record.data.push(b'"');
                        State::Quoted
                    }
                    (State::QuoteInQuoted, _) => return Err(CsvError::AfterQuote { line }),
                    (_, b) => {
                        record.data.push(b);
                        State::Unquoted
                    }
                };
            }
            if state != State::Quoted {
                record.end_field();
                return Ok(true);
            }
            if ending == Ending::Eof {
                return Err(CsvError::Unclosed {
                    line: quote_line,
                    at_end: true,
                });
            }
            record.data.extend_from_slice(ending.bytes());
            if record.data.len() > MAX_LINE {
                return Err(CsvError::Unclosed {
                    line: quote_line,
                    at_end: false,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    fn records(data: &[u8]) -> Result<Vec<(u64, Vec<String>)>, CsvError> {
        let mut reader = CsvReader::new(io::BufReader::with_capacity(4, data));
        let mut record = Record::default();
        let mut out = Vec::new();
        while reader.next_record(&mut record)? {
            let fields = record
                .iter()
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect();
            out.push((record.line, fields));
        }
        Ok(out)
    }

    fn fields(data: &str) -> Vec<Vec<String>> {
        records(data.as_bytes())
            .unwrap()
            .into_iter()
            .map(|(_, f)| f)
            .collect()
    }

    #[test]
    fn fields_quotes_and_blank_lines() {
        assert_eq!(
            fields("a,b\n\nc,\n,\n"),
            [vec!["a", "b"], vec!["c", ""], vec!["", ""]]
        );
        assert_eq!(
            fields("\"a,b\",\"say \"\"hi\"\"\"\n"),
            [vec!["a,b", "say \"hi\""]]
        );
        assert_eq!(fields("a\"b,c\"\n"), [vec!["a\"b", "c\""]]);
        assert!(matches!(
            records(b"a,b\n\"c\"d,e\n"),
            Err(CsvError::AfterQuote { line: 2 })
        ));
        assert!(matches!(
            records(b"\"c\" ,e\n"),
            Err(CsvError::AfterQuote { line: 1 })
        ));
        assert_eq!(fields("  \n"), [vec!["  "]]);
        assert_eq!(fields(""), Vec::<Vec<String>>::new());
        assert_eq!(fields("\"\""), [vec![""]]);
    }

    #[test]
    fn quoted_line_endings_are_kept_and_lines_counted() {
        let got = records(b"h\r\n1,\"a\r\nb\rc\"\r\n\r\n2,d").unwrap();
        assert_eq!(
            got,
            [
                (1, vec!["h".to_owned()]),
                (2, vec!["1".to_owned(), "a\r\nb\rc".to_owned()]),
                (6, vec!["2".to_owned(), "d".to_owned()]),
            ]
        );
    }

    #[test]
    fn an_unclosed_quote_names_the_line_it_opened_on() {
        let err = records(b"time,key\n1,a\n2,\"b\n3,c\n4,d\n").unwrap_err();
        assert!(
            matches!(
                err,
                CsvError::Unclosed {
                    line: 3,
                    at_end: true
                }
            ),
            "{err:?}"
        );
        let err = records(b"time,key\n1,\"a").unwrap_err();
        assert!(
            matches!(
                err,
                CsvError::Unclosed {
                    line: 2,
                    at_end: true
                }
            ),
            "{err:?}"
        );
        let mut long = b"time,key\n1,\"a\n".to_vec();
        long.extend(b"x,y\n".repeat(MAX_LINE / 4 + 1));
        let err = records(&long).unwrap_err();
        assert!(
            matches!(
                err,
                CsvError::Unclosed {
                    line: 2,
                    at_end: false
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn invalid_utf8_is_kept_as_bytes() {
        let mut reader = CsvReader::new(&b"a,\xff\xfe\n"[..]);
        let mut record = Record::default();
        assert!(reader.next_record(&mut record).unwrap());
        assert_eq!(record.get(1), Some(&b"\xff\xfe"[..]));
        assert_eq!(record.get(2), None);
    }
}
