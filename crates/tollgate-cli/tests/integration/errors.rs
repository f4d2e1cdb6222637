//! Invalid input makes `tollgate simulate` fail with a message naming the
//! problem (and the line), a non-zero exit code and no output file.

use std::path::Path;
use std::process::Output;

use proptest::prelude::*;

use crate::support::*;

/// Runs `simulate --strategy all` on `trace` (bytes) with `limit` and
/// `window` and `--decisions` into a fresh directory; returns the output
/// and the names of the files left beside the trace.
fn simulate_bytes(trace: &[u8], limit: &str, window: &str) -> (Output, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.csv");
    std::fs::write(&path, trace).unwrap();
    let output = Tollgate::simulate()
        .trace(&path)
        .decisions(dir.path().join("out.csv"))
        .strategy("all")
        .limit(limit)
        .window(window)
        .run();
    (output, file_names(dir.path()))
}

/// [`simulate_bytes`] with a limit of 3 per second.
fn simulate_trace(trace: &[u8]) -> (Output, Vec<String>) {
    simulate_bytes(trace, "3", "1s")
}

/// Asserts a clean failure: exit code 1, nothing on stdout, one `error:`
/// line on stderr containing every fragment, and no file but the trace.
fn assert_fails(trace: &[u8], fragments: &[&str]) {
    let (out, files) = simulate_trace(trace);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for fragment in fragments {
        assert!(stderr.contains(fragment), "expected {fragment:?} in {stderr}");
    }
    assert_eq!(files, ["trace.csv"], "no decisions file may be left behind");
}

const GOOD: &str = "time,key,cost,path\n1714564800000,a,1,/x\n1714564800001,b,2,/y\n";

#[test]
fn a_valid_trace_passes_the_same_harness() {
    let (out, files) = simulate_trace(GOOD.as_bytes());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(files.len(), 5);
}

#[test]
fn malformed_lines_name_the_line_and_the_problem() {
    let cases: &[(&str, &[&str])] = &[
        (
            "1714564800002,c,1,/z\nsoon,d,1,/z\n",
            &["line 5:", "bad time \"soon\""],
        ),
        (
            "1714564800002,c,1,/z\n1.5,d,1,/z\n",
            &["line 5:", "bad time \"1.5\""],
        ),
        (",d,1,/z\n", &["line 4:", "empty time"]),
        ("-5,d,1,/z\n", &["line 4:", "before the Unix epoch"]),
        (
            "1969-12-31T23:59:59Z,d,1,/z\n",
            &["line 4:", "before the Unix epoch"],
        ),
        ("18446744073710,d,1,/z\n", &["line 4:", "overflow 64 bits"]),
        (
            "2600-01-01T00:00:00+01:00,d,1,/z\n",
            &["line 4:", "overflow 64 bits"],
        ),
        (
            "1714564800002,d,x,/z\n",
            &["line 4:", "bad cost \"x\"", "non-negative integer"],
        ),
        (
            "1714564800002,d,-2,/z\n",
            &["line 4:", "bad cost \"-2\"", "must not be negative"],
        ),
        (
            "1714564800002,d,99999999999999999999,/z\n",
            &["line 4:", "bad cost", "too large"],
        ),
        ("1714564800002,,1,/z\n", &["line 4:", "empty key"]),
        ("1714564800002,  ,1,/z\n", &["line 4:", "empty key"]),
        (
            "1714564800002\n",
            &["line 4:", "missing `key` field", "expected 4 fields, found 1"],
        ),
        ("1714564800002,d\n", &["line 4:", "missing `cost` field"]),
        (
            "1714564800002,d,1\n",
            &["line 4:", "wrong number of fields: expected 4, found 3"],
        ),
        (
            "1714564800002,d,1,/z,extra\n",
            &["line 4:", "wrong number of fields: expected 4, found 5"],
        ),
        ("\n\n1714564800002,d,1\n", &["line 6:", "wrong number of fields"]),
        (
            "1714564800002,\"c\"x,1,/z\n",
            &["line 4:", "text after the closing quote of a quoted field"],
        ),
    ];
    for (tail, fragments) in cases {
        let trace = format!("{GOOD}{tail}");
        assert_fails(trace.as_bytes(), fragments);
    }
}

#[test]
fn invalid_utf8_names_the_line_and_the_column() {
    let mut trace = GOOD.as_bytes().to_vec();
    trace.extend_from_slice(b"1714564800002,\xff\xfe,1,/z\n");
    assert_fails(&trace, &["line 4: invalid UTF-8 in the `key` field"]);
}

#[test]
fn invalid_utf8_in_an_ignored_column_is_accepted() {
    let mut trace = GOOD.as_bytes().to_vec();
    trace.extend_from_slice(b"1714564800002,c,1,/\xff\xfe\n");
    let (out, files) = simulate_trace(&trace);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.starts_with("limit 3 per 1s: 3 requests from 3 keys"),
        "{stdout}"
    );
    assert_eq!(files.len(), 5);
}

#[test]
fn an_unclosed_quote_names_the_line_it_opened_on() {
    assert_fails(
        format!("{GOOD}1714564800002,\"c,1,/z\n1714564800003,d,1,/z\n1714564800004,e,1,/z\n").as_bytes(),
        &["line 4: the quoted field opened on this line has no closing quote before the end of the file"],
    );
}

#[test]
fn a_tab_or_semicolon_separated_trace_is_named_as_such() {
    assert_fails(
        b"time\tkey\tcost\n1\ta\t1\n",
        &["line 1: missing column `time`", "has tabs", "comma-separated"],
    );
    assert_fails(
        b"time;key;cost\n1;a;1\n",
        &[
            "line 1: missing column `time`",
            "has semicolons",
            "comma-separated",
        ],
    );
}

#[test]
fn an_endless_line_stops_at_once_with_the_line_length_error() {
    // A line longer than 64 KiB, then valid rows: nothing of it is replayed.
    let mut trace = GOOD.as_bytes().to_vec();
    trace.extend(std::iter::repeat_n(b'9', 65_537));
    trace.extend_from_slice(b",a,1,/\n1714564800002,c,1,/z\n");
    assert_fails(&trace, &["line 4: the line is longer than 65536 bytes"]);
    // /dev/zero has no line ending at all.
    let out = Tollgate::simulate()
        .trace("/dev/zero")
        .strategy("all")
        .limit(1)
        .window("1s")
        .run_within(std::time::Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: trace /dev/zero: line 1: the line is longer than 65536 bytes, the most a trace line may hold\n"
    );
}

#[test]
fn a_bad_resource_names_the_line() {
    assert_fails(
        b"time,key,resource\n1,a,login\n2,b,\n3,c,\"log\x07in\"\n",
        &["line 4:", "bad resource", "control characters"],
    );
    assert_fails(
        b"time,key,resource\n1,a,login\n2,b\n",
        &["line 3:", "missing `resource` field"],
    );
}

#[test]
fn missing_columns_are_named() {
    assert_fails(b"key,cost\na,1\n", &["line 1:", "missing column `time`"]);
    assert_fails(b"time,cost,path\n1,1,/\n", &["line 1:", "missing column `key`"]);
    assert_fails(b"time,key,Key\n1,a,b\n", &["line 1:", "duplicate column `key`"]);
    assert_fails(b"", &["line 1:", "empty trace"]);
}

#[test]
fn an_error_keeps_an_existing_decisions_file_intact() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.csv");
    std::fs::write(&trace, format!("{GOOD}oops,c,1,/z\n")).unwrap();
    let out = dir.path().join("out.csv");
    std::fs::write(&out, "previous run\n").unwrap();
    let output = Tollgate::simulate()
        .trace(&trace)
        .strategy("token_bucket")
        .limit(1)
        .window("1s")
        .decisions(&out)
        .run();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "previous run\n");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn bad_flags_name_the_flag() {
    let cases = [
        ("0", "1s", "--limit"),
        ("-1", "1s", "--limit"),
        ("ten", "1s", "--limit"),
        ("3", "1 mnute", "--window"),
        ("3", "1", "--window"),
        ("3", "0s", "--window"),
        ("3", "500ns", "--window"),
        ("3", "200years", "--window"),
    ];
    for (limit, window, flag) in cases {
        let extra = [limit, window];
        let (out, files) = simulate_bytes(GOOD.as_bytes(), limit, window);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?}");
        assert_ne!(out.status.code(), Some(101), "{extra:?} panicked: {stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(stderr.contains(flag), "{extra:?}: expected {flag} in {stderr}");
        assert_eq!(files, ["trace.csv"]);
    }
    let (out, _) = simulate_bytes(GOOD.as_bytes(), "0", "1s");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: invalid --limit 0: must be at least 1\n"
    );
}

#[test]
fn unknown_strategy_is_rejected() {
    let out = Tollgate::simulate()
        .trace(example("sample.csv"))
        .strategy("leaky")
        .limit(1)
        .window("1s")
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--strategy") && stderr.contains("leaky_bucket"),
        "{stderr}"
    );
}

#[test]
fn unreadable_trace_and_unwritable_decisions_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.csv");
    let out = Tollgate::simulate()
        .trace(&missing)
        .strategy("all")
        .limit(1)
        .window("1s")
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.starts_with("error: cannot open trace") && stderr.contains("missing.csv"),
        "{stderr}"
    );

    let nowhere = dir.path().join("no/such/dir/out.csv");
    let out = Tollgate::simulate()
        .trace(example("rfc3339.csv"))
        .strategy("fixed_window")
        .limit(1)
        .window("1s")
        .decisions(&nowhere)
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.starts_with("error: cannot write decisions file"),
        "{stderr}"
    );
    assert!(!Path::new(&nowhere).exists());
}

#[test]
fn extreme_values_do_not_panic() {
    let trace = "time,key,cost\n\
        18446744073709,a,18446744073709551615\n\
        18446744073709,a,1\n\
        0,a,0\n\
        0,a,18446744073709551615\n\
        18446744073709,b,0\n\
        2554-07-21T23:34:33.709551615Z,b,1\n\
        2554-07-21T23:34:33.709551615Z,b,1\n";
    for (limit, window) in [("1", "1us"), ("4611686018427387904", "36500days"), ("7", "1h")] {
        let (out, _) = simulate_bytes(trace.as_bytes(), limit, window);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "L={limit} W={window}: {stderr}");
    }
    // Above 2^62 a limit is refused, naming the flag.
    let (out, _) = simulate_bytes(trace.as_bytes(), "4611686018427387905", "1s");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: invalid --limit 4611686018427387905: "),
        "{stderr}"
    );
}

proptest! {
    #![proptest_config(binary_cases(40))]

    #[test]
    fn garbage_input_never_panics(
        body in proptest::collection::vec(
            proptest::sample::select(b"0123456789,,,\n\n\r\"-:TZ+.abc \xff".to_vec()),
            0..120,
        )
    ) {
        let mut trace = b"time,key,cost\n".to_vec();
        trace.extend(body);
        let (out, _) = simulate_trace(&trace);
        let stderr = String::from_utf8_lossy(&out.stderr);
        prop_assert!(matches!(out.status.code(), Some(0 | 1)), "{:?}: {}", trace, stderr);
        if !out.status.success() {
            prop_assert!(stderr.starts_with("error: "), "{}", stderr);
        }
    }
}
