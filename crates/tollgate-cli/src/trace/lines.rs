//! Reading a trace one physical line at a time, with the line's number and
//! a bound on its length, so that no input (not even `/dev/zero`) makes the
//! reader hold more than one line.
//!
//! `\n`, `\r\n` and a lone `\r` each end a line; a UTF-8 byte-order mark at
//! the start of the file is not part of the first line.

use std::io::{self, BufRead};

/// The longest line accepted, in bytes, without its line ending: 64 KiB.
pub const MAX_LINE: usize = 64 * 1024;

/// How a line ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// `\n`.
    Lf,
    /// `\r\n`.
    CrLf,
    /// A lone `\r`.
    Cr,
    /// The end of the file.
    Eof,
}

impl Ending {
    /// The bytes of the ending, as written.
    pub fn bytes(self) -> &'static [u8] {
        match self {
            Ending::Lf => b"\n",
            Ending::CrLf => b"\r\n",
            Ending::Cr => b"\r",
            Ending::Eof => b"",
        }
    }
}

/// One line read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    /// The line's 1-based number.
    pub number: u64,
    /// Its bytes, without the ending.
    pub bytes: &'a [u8],
    /// How it ended.
    pub ending: Ending,
}

/// Why a line could not be read.
#[derive(Debug)]
pub enum LineError {
    /// The line is longer than [`MAX_LINE`] bytes.
    TooLong {
        /// The line's 1-based number.
        line: u64,
    },
    /// The underlying reader failed.
    Io {
        /// The number of the line being read.
        line: u64,
        /// The error.
        source: io::Error,
    },
}

/// A reader of physical lines.
pub struct Lines<R> {
    /// The input.
    input: R,
    /// The current line's bytes, without the ending.
    buf: Vec<u8>,
    /// The number of the line in `buf` (0 before the first).
    line: u64,
    /// Whether the end of the input was reached.
    done: bool,
}

impl<R: BufRead> Lines<R> {
    /// A reader at the start of `input`.
    pub fn new(input: R) -> Self {
        Self {
            input,
            buf: Vec::new(),
            line: 0,
            done: false,
        }
    }

    /// The last line read, without its ending (empty before the first).
    pub fn current(&self) -> &[u8] {
        &self.buf
    }

    /// The next line: its number, its bytes without the ending, and how it
    /// ended; `None` at the end of the input (a file ending with a line
    /// ending has no empty line after it).
    ///
    /// # Errors
    ///
    /// [`LineError::TooLong`] as soon as a line exceeds [`MAX_LINE`] bytes
    /// (nothing more of it is read), or [`LineError::Io`].
    pub fn next_line(&mut self) -> Result<Option<Line<'_>>, LineError> {
        if self.done {
            return Ok(None);
        }
        self.buf.clear();
        self.line += 1;
        let line = self.line;
        let io = |source| LineError::Io { line, source };
        let ending = loop {
            let available = match self.input.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io(e)),
            };
            if available.is_empty() {
                self.done = true;
                if self.buf.is_empty() {
                    return Ok(None);
                }
                break Ending::Eof;
            }
            let end = available.iter().position(|&b| b == b'\n' || b == b'\r');
            let take = end.unwrap_or(available.len());
            if self.buf.len() + take > MAX_LINE {
                return Err(LineError::TooLong { line });
            }
            self.buf.extend_from_slice(&available[..take]);
            match end {
                None => self.input.consume(take),
                Some(i) => {
                    let lf = available[i] == b'\n';
                    self.input.consume(i + 1);
                    if lf {
                        break Ending::Lf;
                    }
                    // A `\r`: one ending with a `\n` right after it.
                    let next = loop {
                        match self.input.fill_buf() {
                            Ok(b) => break b.first().copied(),
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(io(e)),
                        }
                    };
                    if next == Some(b'\n') {
                        self.input.consume(1);
                        break Ending::CrLf;
                    }
                    break Ending::Cr;
                }
            }
        };
        if line == 1 && self.buf.starts_with(b"\xef\xbb\xbf") {
            self.buf.drain(..3);
        }
        Ok(Some(Line {
            number: line,
            bytes: &self.buf,
            ending,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(data: &[u8]) -> Vec<(u64, Vec<u8>, Ending)> {
        // A tiny buffer: endings and long lines straddle refills.
        let mut lines = Lines::new(io::BufReader::with_capacity(3, data));
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().unwrap() {
            out.push((line.number, line.bytes.to_vec(), line.ending));
        }
        out
    }

    #[test]
    fn every_ending_ends_one_line() {
        let got = all(b"ab\r\ncd\ref\n\n\r\rgh");
        let expected: Vec<(u64, Vec<u8>, Ending)> = vec![
            (1, b"ab".to_vec(), Ending::CrLf),
            (2, b"cd".to_vec(), Ending::Cr),
            (3, b"ef".to_vec(), Ending::Lf),
            (4, b"".to_vec(), Ending::Lf),
            (5, b"".to_vec(), Ending::Cr),
            (6, b"".to_vec(), Ending::Cr),
            (7, b"gh".to_vec(), Ending::Eof),
        ];
        assert_eq!(got, expected);
        assert_eq!(all(b""), []);
        assert_eq!(all(b"x\n"), [(1, b"x".to_vec(), Ending::Lf)]);
        assert_eq!(all(b"\xef\xbb\xbfx\r"), [(1, b"x".to_vec(), Ending::Cr)]);
    }

    #[test]
    fn a_line_at_the_limit_passes_and_one_byte_more_fails() {
        let mut data = vec![b'a'; MAX_LINE];
        data.push(b'\n');
        data.extend(vec![b'b'; MAX_LINE + 1]);
        let mut lines = Lines::new(io::BufReader::new(&data[..]));
        assert_eq!(lines.next_line().unwrap().unwrap().bytes.len(), MAX_LINE);
        assert!(matches!(lines.next_line(), Err(LineError::TooLong { line: 2 })));
    }

    #[test]
    fn an_endless_line_fails_after_the_limit() {
        let mut lines = Lines::new(io::BufReader::new(io::repeat(0)));
        assert!(matches!(lines.next_line(), Err(LineError::TooLong { line: 1 })));
    }
}
