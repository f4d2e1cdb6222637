//! Reading nginx and Apache access logs as traces (`--format nginx`).
//!
//! Each line is in the combined log format,
//!
//! ```text
//! $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"
//! ```
//!
//! or the common log format, which ends after the size. Each line is one
//! request of cost 1: the key is the client address, the resource is the
//! request's path without the query string, and the time is `$time_local`
//! (`10/Oct/2000:13:55:36 -0700`). Blank lines are skipped; any other line
//! that does not match stops the read with an error naming its line number
//! and the problem.

use std::borrow::Cow;
use std::io::BufRead;

use super::fields::parse_resource;
use super::lines::{Line, Lines};
use super::model::{Trace, TraceBuilder};
use super::problem::{LogProblem, ParseError, Problem, TimeError};

/// Reads and validates an access log from `input`, one line at a time.
/// With `skip_invalid`, lines that do not parse are counted in
/// [`Trace::skipped`] instead of stopping the read (a line longer than
/// [`super::lines::MAX_LINE`] and read errors still stop it).
///
/// Invalid UTF-8 is accepted in the fields the simulator ignores (the
/// referer and the user agent); in the client address or the request it is
/// an error naming the field.
///
/// # Errors
///
/// [`ParseError`] for the first line that is invalid (and not skipped).
pub fn read(input: impl BufRead, skip_invalid: bool) -> Result<Trace, ParseError> {
    let mut trace = TraceBuilder::new(skip_invalid);
    let mut lines = Lines::new(input);
    while let Some(Line {
        number: line, bytes, ..
    }) = lines.next_line()?
    {
        let text = String::from_utf8_lossy(bytes);
        if text.trim().is_empty() {
            continue;
        }
        let valid = matches!(text, Cow::Borrowed(_));
        match parse_line(&text).and_then(|entry| check_utf8(entry, valid)) {
            Ok(entry) => trace.push(line, entry.time, entry.nanos, entry.address, entry.path, 1),
            Err(problem) => trace.invalid(ParseError {
                line: Some(line),
                problem,
            })?,
        }
    }
    Ok(trace.finish())
}

/// `entry` of a line that was valid UTF-8, or of one whose invalid bytes
/// were replaced by U+FFFD, as long as none of them is in a field the
/// simulator uses.
fn check_utf8(entry: Entry<'_>, valid: bool) -> Result<Entry<'_>, Problem> {
    if !valid {
        let bad = |s: &str| s.contains(char::REPLACEMENT_CHARACTER);
        if bad(entry.address) {
            return Err(Problem::InvalidUtf8("the client address".to_owned()));
        }
        if entry.path.is_some_and(bad) {
            return Err(Problem::InvalidUtf8("the request".to_owned()));
        }
    }
    Ok(entry)
}

/// Validates a whole access log held in memory, stopping at the first
/// invalid line.
///
/// # Errors
///
/// [`ParseError`] for the first line that is invalid.
#[cfg(test)]
pub fn parse(data: &[u8]) -> Result<Trace, ParseError> {
    read(data, false)
}

/// The fields of one log line the simulator uses.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// `$remote_addr`.
    pub address: &'a str,
    /// `$time_local` as written, without the brackets.
    pub time: &'a str,
    /// The time in nanoseconds since the Unix epoch.
    pub nanos: u64,
    /// The request's path without the query string; `None` when the
    /// request is `-` (nginx logs that when no request line was read).
    pub path: Option<&'a str>,
}

/// A cursor over one line.
struct Cursor<'a> {
    /// The rest of the line.
    rest: &'a str,
}

impl<'a> Cursor<'a> {
    /// What is at the cursor, for messages: the next few characters, quoted,
    /// or `the end of the line`.
    fn found(&self) -> String {
        if self.rest.is_empty() {
            return "the end of the line".to_owned();
        }
        let shown: String = self.rest.chars().take(20).collect();
        if shown.len() < self.rest.len() {
            format!("{shown:?}...")
        } else {
            format!("{shown:?}")
        }
    }

    /// Consumes `prefix` or fails naming what was expected.
    fn expect(
        &mut self,
        prefix: char,
        expected: &'static str,
        after: &'static str,
    ) -> Result<(), LogProblem> {
        match self.rest.strip_prefix(prefix) {
            Some(rest) => {
                self.rest = rest;
                Ok(())
            }
            None => Err(LogProblem::Expected {
                expected,
                after,
                found: self.found(),
            }),
        }
    }

    /// Consumes the characters up to the next space (or the end of the line).
    fn token(&mut self) -> &'a str {
        let end = self.rest.find(' ').unwrap_or(self.rest.len());
        let (token, rest) = self.rest.split_at(end);
        self.rest = rest;
        token
    }

    /// Consumes a space, then a non-empty token.
    fn field(&mut self, expected: &'static str, after: &'static str) -> Result<&'a str, LogProblem> {
        self.expect(' ', expected, after)?;
        let token = self.token();
        if token.is_empty() {
            return Err(LogProblem::Expected {
                expected,
                after,
                found: self.found(),
            });
        }
        Ok(token)
    }

    /// Consumes a double-quoted field (a backslash escapes the next
    /// character) and returns its content as written.
    fn quoted(&mut self, name: &'static str) -> Result<&'a str, LogProblem> {
        let body = self.rest;
        let mut escaped = false;
        for (i, c) in body.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    self.rest = &body[i + 1..];
                    return Ok(&body[..i]);
                }
                _ => {}
            }
        }
        Err(LogProblem::Unterminated(name))
    }
}

/// Parses one non-blank line of a combined (or common) log.
///
/// # Errors
///
/// [`Problem::AccessLog`] naming the field that is missing or malformed, or
/// [`Problem::Time`] when the time is before the epoch or too late.
pub fn parse_line(line: &str) -> Result<Entry<'_>, Problem> {
    let mut c = Cursor { rest: line };
    let address = c.token();
    if address.is_empty() {
        return Err(LogProblem::Address.into());
    }
    c.field("the identity (usually -)", "after the client address")?;
    c.field("the user (or -)", "after the identity")?;
    c.expect(' ', "\" [\" and the time", "after the user")?;
    c.expect('[', "\"[\" and the time", "after the user")?;
    let close = c.rest.find(']').ok_or(LogProblem::Expected {
        expected: "\"]\"",
        after: "after the time",
        found: "the end of the line".to_owned(),
    })?;
    let time = &c.rest[..close];
    c.rest = &c.rest[close + 1..];
    let nanos = parse_time(time)?;
    c.expect(' ', "a space and the quoted request", "after the time")?;
    c.expect('"', "the quoted request", "after the time")?;
    let request = c.quoted("request")?;
    // The same rule as a CSV trace's resource column: no control characters.
    let path = match request_path(request)? {
        Some(path) => parse_resource(path)?.map(|_| path),
        None => None,
    };
    let status = c.field("the status", "after the request")?;
    if !(status.len() == 3 && status.bytes().all(|b| b.is_ascii_digit())) {
        return Err(LogProblem::Status(status.to_owned()).into());
    }
    let size = c.field("the size", "after the status")?;
    if !(size == "-" || size.bytes().all(|b| b.is_ascii_digit())) {
        return Err(LogProblem::Size(size.to_owned()).into());
    }
    // The common log format ends here; the combined one goes on.
    if !c.rest.trim_end().is_empty() {
        c.expect(' ', "a space and the quoted referer", "after the size")?;
        c.expect('"', "the quoted referer", "after the size")?;
        c.quoted("referer")?;
        c.expect(' ', "a space and the quoted user agent", "after the referer")?;
        c.expect('"', "the quoted user agent", "after the referer")?;
        c.quoted("user agent")?;
        if !c.rest.trim_end().is_empty() {
            c.rest = c.rest.trim_start();
            return Err(LogProblem::Expected {
                expected: "the end of the line",
                after: "after the user agent",
                found: c.found(),
            }
            .into());
        }
    }
    Ok(Entry {
        address,
        time,
        nanos,
        path,
    })
}

/// Parses `$time_local` (`10/Oct/2000:13:55:36 -0700`) into nanoseconds
/// since the Unix epoch.
///
/// # Errors
///
/// [`LogProblem::Time`] when malformed; [`TimeError`] when before the epoch
/// or too late for 64-bit nanoseconds.
pub fn parse_time(text: &str) -> Result<u64, Problem> {
    let at =
        chrono::DateTime::parse_from_str(text, "%d/%b/%Y:%H:%M:%S %z").map_err(|e| LogProblem::Time {
            value: text.to_owned(),
            detail: e.to_string(),
        })?;
    let secs = u64::try_from(at.timestamp()).map_err(|_| TimeError::Negative(text.to_owned()))?;
    secs.checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(u64::from(at.timestamp_subsec_nanos())))
        .ok_or_else(|| TimeError::Overflow(text.to_owned()).into())
}

/// The path of a request line, without the query string: `GET /a?b
/// HTTP/1.1` gives `/a`; an absolute target (`http://host/a?b`) gives `/a`
/// (`/` when it has no path); `OPTIONS * HTTP/1.1` gives `*`; `CONNECT
/// host:443 HTTP/1.1` gives the authority `host:443`; `-` gives `None`.
///
/// The target may contain spaces when the line ends with the protocol
/// (`GET /a b HTTP/1.1` gives `/a b`): nginx accepts such requests and logs
/// them as received.
///
/// # Errors
///
/// [`LogProblem::Request`] when the line is not `METHOD TARGET [PROTOCOL]`.
pub fn request_path(request: &str) -> Result<Option<&str>, LogProblem> {
    if request == "-" {
        return Ok(None);
    }
    let bad = || LogProblem::Request(request.to_owned());
    let (method, rest) = request.split_once(' ').ok_or_else(bad)?;
    let target = match rest.rsplit_once(' ') {
        Some((target, protocol)) if is_protocol(protocol) => target,
        // Without a protocol (HTTP/0.9), the target is one word.
        _ if !rest.contains(' ') => rest,
        _ => return Err(bad()),
    };
    if method.is_empty()
        || !method
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || b == b'-' || b == b'_')
        || target.is_empty()
        || target.starts_with(' ')
    {
        return Err(bad());
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        // The authority form: host:port, nothing else.
        let valid = target.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
        }) && !target.contains(['/', ' ', '?', '#']);
        return if valid { Ok(Some(target)) } else { Err(bad()) };
    }
    let target = target.split(['?', '#']).next().unwrap_or_default();
    if target == "*" || target.starts_with('/') {
        return Ok(Some(target));
    }
    let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
    let authority = if lower.starts_with("http://") {
        &target[7..]
    } else if lower.starts_with("https://") {
        &target[8..]
    } else {
        return Err(bad());
    };
    Ok(Some(authority.find('/').map_or("/", |i| &authority[i..])))
}

/// Whether `word` is an HTTP protocol version such as `HTTP/1.1`.
fn is_protocol(word: &str) -> bool {
    word.strip_prefix("HTTP/").is_some_and(|version| {
        !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif?x=1 HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)""#;

    #[test]
    fn the_combined_format() {
        let e = parse_line(LINE).unwrap();
        assert_eq!(
            e,
            Entry {
                address: "127.0.0.1",
                time: "10/Oct/2000:13:55:36 -0700",
                // 2000-10-10T20:55:36Z
                nanos: 971_211_336_000_000_000,
                path: Some("/apache_pb.gif"),
            }
        );
    }

    #[test]
    fn the_common_format_and_escapes() {
        let e = parse_line(r#"::1 - - [01/May/2024:12:00:00 +0000] "GET /a HTTP/1.1" 304 -"#).unwrap();
        assert_eq!((e.address, e.path), ("::1", Some("/a")));
        let e = parse_line(
            r#"10.0.0.1 - - [01/may/2024:12:00:00 +0200] "POST /q HTTP/2.0" 201 5 "-" "say \"hi\" \\" "#,
        )
        .unwrap();
        assert_eq!(e.nanos, 1_714_557_600_000_000_000);
        let e = parse_line(r#"h - - [01/May/2024:12:00:00 +0000] "-" 400 0 "-" "-""#).unwrap();
        assert_eq!(e.path, None);
    }

    #[test]
    fn request_paths() {
        let p = |r| request_path(r);
        assert_eq!(p("GET / HTTP/1.1"), Ok(Some("/")));
        assert_eq!(p("GET /a/b?c=d&e HTTP/1.1"), Ok(Some("/a/b")));
        assert_eq!(p("GET /a#frag HTTP/1.1"), Ok(Some("/a")));
        assert_eq!(p("GET /old"), Ok(Some("/old")));
        assert_eq!(p("OPTIONS * HTTP/1.1"), Ok(Some("*")));
        assert_eq!(p("GET http://h.example/x?y HTTP/1.1"), Ok(Some("/x")));
        assert_eq!(p("GET HTTPS://h.example HTTP/1.1"), Ok(Some("/")));
        assert_eq!(p("-"), Ok(None));
        for bad in [
            "",
            "GET",
            "GET  HTTP/1.1",
            "GET relative HTTP/1.1",
            "GET / HTTP/1.1 extra",
            "GET / SPDY",
            "\\x16\\x03\\x01",
            "G3T / HTTP/1.1",
            "GET ftp://h/ HTTP/1.1",
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
    }

    fn problem(line: &str) -> String {
        parse_line(line).expect_err(line).to_string()
    }

    #[test]
    fn malformed_lines_say_what_is_wrong() {
        let cases = [
            (" - - [x]", "expected the client address"),
            (
                "1.2.3.4",
                "expected the identity (usually -) after the client address, found the end of the line",
            ),
            (
                "1.2.3.4 - - 10/Oct/2000:13:55:36 -0700",
                "expected \"[\" and the time after the user, found \"10/Oct/2000:13:55:36\"...",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700",
                "expected \"]\" after the time",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36] \"GET / HTTP/1.1\" 200 1",
                "bad time \"10/Oct/2000:13:55:36\"",
            ),
            (
                "1.2.3.4 - - [32/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1",
                "bad time",
            ),
            (
                "1.2.3.4 - - [10/Okt/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1",
                "bad time",
            ),
            (
                "1.2.3.4 - - [31/Dec/1969:23:59:59 +0000] \"GET / HTTP/1.1\" 200 1",
                "before the Unix epoch",
            ),
            (
                "1.2.3.4 - - [01/Jan/2600:00:00:00 +0000] \"GET / HTTP/1.1\" 200 1",
                "overflow 64 bits",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] GET / HTTP/1.1 200 1",
                "expected the quoted request after the time",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1 200 1",
                "the quoted request has no closing quote",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET\" 200 1",
                "bad request \"GET\"",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\"",
                "expected the status after the request, found the end of the line",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" OK 1",
                "bad status \"OK\"",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 2000 1",
                "bad status \"2000\"",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200",
                "expected the size after the status",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1k",
                "bad size \"1k\"",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1 -",
                "expected the quoted referer after the size, found \"-\"",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1 \"-\"",
                "expected a space and the quoted user agent after the referer",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1 \"-\" \"curl",
                "the quoted user agent has no closing quote",
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1 \"-\" \"curl\" 0.003",
                "expected the end of the line after the user agent, found \"0.003\"",
            ),
        ];
        for (line, message) in cases {
            let text = problem(line);
            assert!(text.contains(message), "{line}: expected {message:?} in {text:?}");
        }
    }

    #[test]
    fn parse_numbers_lines_and_skips_blank_ones() {
        let log = format!("{LINE}\r\n\n  \n{LINE}\n");
        let trace = parse(log.as_bytes()).unwrap();
        assert_eq!(trace.keys.iter().collect::<Vec<_>>(), ["127.0.0.1"]);
        assert_eq!(trace.resources.iter().collect::<Vec<_>>(), ["/apache_pb.gif"]);
        let lines: Vec<_> = trace
            .requests
            .iter()
            .map(|r| (r.line, r.cost, r.resource))
            .collect();
        assert_eq!(lines, [(1, 1, Some(0)), (4, 1, Some(0))]);
        let err = parse(format!("{LINE}\n\n{LINE} x\n").as_bytes()).unwrap_err();
        assert_eq!(err.line, Some(3));
        let err =
            parse(b"\n1.2.3.\xff - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1").unwrap_err();
        assert_eq!(
            (err.line, err.problem),
            (Some(2), Problem::InvalidUtf8("the client address".into()))
        );
        assert_eq!(parse(b"").unwrap(), Trace::default());
    }

    #[test]
    fn invalid_utf8_is_an_error_only_in_the_fields_used() {
        let line = |request: &[u8], agent: &[u8]| {
            let mut l = b"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"".to_vec();
            l.extend_from_slice(request);
            l.extend_from_slice(b"\" 200 1 \"-\" \"");
            l.extend_from_slice(agent);
            l.extend_from_slice(b"\"\n");
            l
        };
        let trace = parse(&line(b"GET /a HTTP/1.1", b"bot\xff\xfe")).unwrap();
        assert_eq!(trace.resources.iter().collect::<Vec<_>>(), ["/a"]);
        let err = parse(&line(b"GET /\xff HTTP/1.1", b"bot")).unwrap_err();
        assert_eq!(err.problem, Problem::InvalidUtf8("the request".into()));
    }

    #[test]
    fn what_nginx_writes_for_connect_spaces_and_tls() {
        let p = |r| request_path(r);
        assert_eq!(p("CONNECT example.com:443 HTTP/1.1"), Ok(Some("example.com:443")));
        assert_eq!(
            p("CONNECT [2001:db8::1]:443 HTTP/1.1"),
            Ok(Some("[2001:db8::1]:443"))
        );
        assert!(p("CONNECT example.com HTTP/1.1").is_err());
        assert!(p("CONNECT /a HTTP/1.1").is_err());
        assert_eq!(p("GET /a b/c d?q HTTP/1.1"), Ok(Some("/a b/c d")));
        assert_eq!(p("GET /a b HTTP/1.0"), Ok(Some("/a b")));
        // Without the protocol, spaces are not part of a path.
        assert!(p("GET /a b").is_err());
        assert!(p("\\x16\\x03\\x01\\x02\\x00\\x01\\x00\\x01\\xFC\\x03\\x03").is_err());
        let tab = "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET /a\tb HTTP/1.1\" 200 1";
        assert!(matches!(parse_line(tab), Err(Problem::Resource { .. })));
        let tls = r#"203.0.113.9 - - [10/Oct/2000:13:55:36 -0700] "\x16\x03\x01\x02\x00\x01\x00\x01\xFC\x03\x03" 400 157 "-" "-""#;
        assert!(matches!(
            parse_line(tls),
            Err(Problem::AccessLog(LogProblem::Request(_)))
        ));
    }
}
