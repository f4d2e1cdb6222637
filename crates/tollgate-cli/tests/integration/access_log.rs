//! `simulate --format nginx`: access logs replay exactly like the same
//! requests written as a CSV trace, and a malformed line stops the command
//! with its line number and the problem.

use std::path::Path;

use proptest::prelude::*;

use crate::support::*;
use tollgate::Strategy;

/// `simulate --format nginx --strategy all` on `log` with decisions
/// written to `out` (one file per strategy).
fn simulate_log(log: &Path, out: &Path) -> Tollgate {
    Tollgate::simulate()
        .trace(log)
        .format("nginx")
        .strategy("all")
        .limit(10)
        .window("10s")
        .decisions(out)
}

/// One log line split by the test's own reading of the combined format:
/// (address, time as written, milliseconds since the epoch, path).
fn split_line(line: &str) -> (String, String, u64, String) {
    let (address, rest) = line.split_once(" - - [").expect("address");
    let (time, rest) = rest.split_once("] \"").expect("time");
    let request = rest.split('"').next().unwrap();
    let at = chrono::DateTime::parse_from_str(time, "%d/%b/%Y:%H:%M:%S %z").expect("time");
    let ms = u64::try_from(at.timestamp_millis()).unwrap();
    let path = match request.split(' ').nth(1) {
        Some(target) => target.split('?').next().unwrap().to_owned(),
        None => String::new(),
    };
    (address.to_owned(), time.to_owned(), ms, path)
}

#[test]
fn the_example_log_replays_like_the_same_requests_in_csv() {
    let dir = tempfile::tempdir().unwrap();
    let log = example("access.log");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<(String, String, u64, String)> = text.lines().map(split_line).collect();
    assert!(lines.len() > 300, "a few hundred lines");
    let mut csv = String::from("time,key,resource\n");
    for (address, _, ms, path) in &lines {
        csv.push_str(&format!("{ms},{address},{path}\n"));
    }
    let csv_trace = dir.path().join("same.csv");
    std::fs::write(&csv_trace, csv).unwrap();

    let out = simulate_log(&log, &dir.path().join("log.csv")).run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty());
    let csv_summary = Tollgate::simulate()
        .trace(&csv_trace)
        .strategy("all")
        .limit(10)
        .window("10s")
        .decisions(dir.path().join("csv.csv"))
        .run_ok();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), csv_summary);
    assert!(csv_summary.starts_with(&format!(
        "limit 10 per 10s: {} requests from 8 keys\n",
        lines.len()
    )));
    for strategy in Strategy::ALL {
        let from_log = read_csv(&dir.path().join(format!("log.{strategy}.csv")));
        let from_csv = read_csv(&dir.path().join(format!("csv.{strategy}.csv")));
        assert_eq!(from_log.len(), lines.len() + 1);
        assert!(
            from_log[1..].iter().any(|r| r[3] == "false"),
            "{strategy} denies some"
        );
        for (i, ((a, b), (address, time, _, _))) in
            from_log[1..].iter().zip(&from_csv[1..]).zip(&lines).enumerate()
        {
            // The time is copied as the log wrote it; every request costs 1.
            assert_eq!(
                (&a[0], &a[1], a[2].as_str()),
                (time, address, "1"),
                "line {}",
                i + 1
            );
            assert_eq!(a[1..], b[1..], "{strategy} line {}", i + 1);
        }
    }
}

/// A valid log line at second `s` past 14:00:00 +0200 on 1 May 2024.
fn good(s: u32) -> String {
    format!(
        "192.0.2.1 - - [01/May/2024:14:00:{s:02} +0200] \"GET /api/search?q=x HTTP/1.1\" 200 512 \"-\" \"curl/8.5.0\"\n"
    )
}

#[test]
fn malformed_lines_name_the_line_and_the_problem() {
    let head = format!("{}{}\n{}", good(0), good(1), good(2)); // a blank line 3 counts
    let cases: &[(&str, &[&str])] = &[
        (
            "garbage\n",
            &[
                "line 5:",
                "expected the identity (usually -) after the client address",
            ],
        ),
        (
            "192.0.2.1 - - [01/May/2024:14:00:03] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"\n",
            &[
                "line 5:",
                "bad time \"01/May/2024:14:00:03\"",
                "10/Oct/2000:13:55:36 -0700",
            ],
        ),
        (
            "192.0.2.1 - - [01/May/2024:14:00:03 +0200] \"GET / HTTP/1.1\" 2OO 1 \"-\" \"-\"\n",
            &["line 5:", "bad status \"2OO\""],
        ),
        (
            "192.0.2.1 - - [01/May/2024:14:00:03 +0200] \"GET / HTTP/1.1\" 200 1 \"-\" \"curl\n",
            &["line 5:", "the quoted user agent has no closing quote"],
        ),
        (
            "192.0.2.1 - - [01/May/2024:14:00:03 +0200] \"BREW\" 200 1 \"-\" \"-\"\n",
            &["line 5:", "bad request \"BREW\""],
        ),
        (
            "192.0.2.1 - - [31/Dec/1969:23:59:59 +0000] \"GET / HTTP/1.1\" 200 1\n",
            &["line 5:", "before the Unix epoch"],
        ),
    ];
    for (bad, fragments) in cases {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("access.log");
        std::fs::write(&log, format!("{head}{bad}{}", good(4))).unwrap();
        let out = simulate_log(&log, &dir.path().join("d.csv")).run();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad}: {stderr}");
        assert!(out.stdout.is_empty());
        assert!(stderr.starts_with("error: trace "), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        for fragment in *fragments {
            assert!(stderr.contains(fragment), "expected {fragment:?} in {stderr}");
        }
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1, "no decisions file may be left behind");
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(b"192.0.2.\xff - - [01/May/2024:14:00:03 +0200] \"GET / HTTP/1.1\" 200 1\n");
    std::fs::write(&log, bytes).unwrap();
    let out = simulate_log(&log, &dir.path().join("d.csv")).run();
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 5: invalid UTF-8"));
}

#[test]
fn common_format_crlf_blank_lines_and_dash_requests_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let text = "192.0.2.1 - alice [01/May/2024:14:00:00 +0200] \"GET /a?x=1 HTTP/1.1\" 200 5\r\n\
                \r\n\
                192.0.2.1 - - [01/May/2024:14:00:00 +0200] \"-\" 400 0 \"-\" \"-\"\r\n\
                2001:db8::1 - - [01/May/2024:12:00:01 +0000] \"GET / HTTP/2.0\" 304 -\n";
    std::fs::write(&log, text).unwrap();
    let out = dir.path().join("d.csv");
    let output = simulate_log(&log, &out).run();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows = read_csv(&dir.path().join("d.fixed_window.csv"));
    let cells: Vec<_> = rows[1..]
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str(), r[3].as_str()))
        .collect();
    assert_eq!(
        cells,
        [
            ("01/May/2024:14:00:00 +0200", "192.0.2.1", "true"),
            ("01/May/2024:14:00:00 +0200", "192.0.2.1", "true"),
            ("01/May/2024:12:00:01 +0000", "2001:db8::1", "true"),
        ]
    );
}

#[test]
fn a_log_read_as_csv_suggests_the_format() {
    let out = Tollgate::simulate()
        .trace(example("access.log"))
        .strategy("all")
        .limit(10)
        .window("10s")
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("line 1: missing column `time`"), "{stderr}");
    assert!(stderr.contains("add --format nginx"), "{stderr}");
    // A CSV trace missing a column gets no such hint.
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(&trace, "when,key\n1,a\n").unwrap();
    let out = Tollgate::simulate()
        .trace(&trace)
        .strategy("all")
        .limit(1)
        .window("1s")
        .run();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("--format"));
}

proptest! {
    #![proptest_config(binary_cases(40))]

    /// A valid line with a few bytes replaced, cut or doubled.
    #[test]
    fn garbage_never_panics(
        edits in proptest::collection::vec(
            (any::<proptest::sample::Index>(), 0..3u8, proptest::sample::select(b"[]\" -\\/:+\xff0x".to_vec())),
            1..5,
        )
    ) {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("access.log");
        let mut bytes = good(0).into_bytes();
        for (at, edit, byte) in edits {
            let at = at.index(bytes.len());
            match edit {
                0 => bytes[at] = byte,
                1 => bytes.truncate(at),
                _ => bytes.insert(at, bytes[at]),
            }
            if bytes.is_empty() {
                break;
            }
        }
        std::fs::write(&log, &bytes).unwrap();
        let out = simulate_log(&log, &dir.path().join("d.csv")).run();
        let stderr = String::from_utf8_lossy(&out.stderr);
        prop_assert!(matches!(out.status.code(), Some(0 | 1)), "{:?}: {}", bytes, stderr);
        if !out.status.success() {
            prop_assert!(
                stderr.starts_with("error: trace ") && stderr.contains("line 1:"),
                "{}",
                stderr
            );
        }
    }
}

/// What nginx writes for a TLS handshake sent to a plain HTTP port.
const TLS: &str = "203.0.113.9 - - [01/May/2024:14:00:05 +0200] \"\\x16\\x03\\x01\\x02\\x00\\x01\\x00\\x01\\xFC\\x03\\x03\" 400 157 \"-\" \"-\"\n";

#[test]
fn connect_and_paths_with_spaces_are_requests() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let text = format!(
        "{}192.0.2.7 - - [01/May/2024:14:00:01 +0200] \"CONNECT example.com:443 HTTP/1.1\" 400 150 \"-\" \"-\"\n\
         192.0.2.8 - - [01/May/2024:14:00:02 +0200] \"GET /my docs/a b.html?x HTTP/1.1\" 404 0 \"-\" \"bot BADBYTE\"\n",
        good(0)
    );
    std::fs::write(&log, text.as_bytes()).unwrap();
    // A byte that is not UTF-8 in the user agent, which is not used.
    let mut bytes = text.into_bytes();
    let at = bytes.windows(7).position(|w| w == b"BADBYTE").unwrap();
    bytes.splice(at..at + 7, [0xff]);
    std::fs::write(&log, bytes).unwrap();
    let config = dir.path().join("p.yaml");
    std::fs::write(
        &config,
        "tollgate:\n  default: { limit: 5, window: 1s }\n  resources:\n    \"example.com:443\": { limit: 1, window: 1s }\n    \"/my docs/a b.html\": { limit: 2, window: 1s }\n",
    )
    .unwrap();
    let out = Tollgate::simulate()
        .trace(&log)
        .format("nginx")
        .config(&config)
        .run();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<(&str, Vec<&str>)> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("policy"))
        .skip(1)
        .map(|l| {
            let (name, rest) = l.split_once("  ").unwrap();
            (name, rest.split_whitespace().take(2).collect())
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("default", vec!["1", "0"]),
            ("/my docs/a b.html", vec!["1", "0"]),
            ("example.com:443", vec!["1", "0"])
        ],
        "{stdout}"
    );
}

#[test]
fn skip_invalid_leaves_out_tls_handshakes_and_reports_them_after_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let mut text = good(0);
    for i in 1..=7 {
        text.push_str(TLS);
        text.push_str(&good(i));
    }
    std::fs::write(&log, &text).unwrap();
    let out_csv = dir.path().join("d.csv");
    // Strict by default: the first handshake stops the command.
    let out = simulate_log(&log, &out_csv).run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("line 2: bad request \"\\\\x16\\\\x03"),
        "{stderr}"
    );
    let out = simulate_log(&log, &out_csv).skip_invalid().run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("limit 10 per 10s: 8 requests from 1 key\n"),
        "{stdout}"
    );
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [format!(
            "warning: skipped 7 invalid lines of trace {}: lines 2, 4, 6, 8, 10, ... \
             (the first: line 2: bad request \"\\\\x16\\\\x03\\\\x01\\\\x02\\\\x00\\\\x01\\\\x00\\\\x01\\\\xFC\\\\x03\\\\x03\": \
             expected METHOD PATH PROTOCOL, such as \"GET /index.html HTTP/1.1\", or \"-\")",
            arg(&log)
        )]
    );
    let rows = read_csv(&dir.path().join("d.fixed_window.csv"));
    assert_eq!(rows.len(), 9);
}
