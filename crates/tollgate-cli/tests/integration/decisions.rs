//! The decisions file and the summary of `tollgate simulate`, checked
//! against the library making the same decisions.

use std::time::Duration;

use proptest::prelude::*;

use crate::support::*;
use tollgate::Strategy;

#[test]
fn decisions_file_has_the_header_and_one_row_per_request_in_input_order() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.csv");
    Tollgate::simulate()
        .trace(example("sample.csv"))
        .strategy("fixed_window")
        .limit(20)
        .window("1s")
        .decisions(&out)
        .run_ok();
    let rows = read_csv(&out);
    assert_eq!(rows[0], DECISIONS_HEADER);
    let input = sample_requests();
    assert!(input.len() > 2500, "the sample should hold about 3,000 requests");
    assert_eq!(rows.len() - 1, input.len());
    for (row, (time, req)) in rows[1..].iter().zip(&input) {
        assert_eq!(row.len(), 7);
        assert_eq!(
            (&row[0], &row[1], &row[2]),
            (time, &req.key, &req.cost.to_string())
        );
    }
    // Only the decisions file is left in the directory (no temporary file).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn every_row_equals_the_library_decision_on_the_sample() {
    let dir = tempfile::tempdir().unwrap();
    let reqs: Vec<Req> = sample_requests().into_iter().map(|(_, r)| r).collect();
    for (limit, window, text) in [
        (20, Duration::from_secs(1), "1s"),
        (60, Duration::from_secs(5), "5s"),
    ] {
        let out = dir.path().join(format!("w{text}.csv"));
        let limit_arg = limit.to_string();
        Tollgate::simulate()
            .trace(example("sample.csv"))
            .strategy("all")
            .limit(&limit_arg)
            .window(text)
            .decisions(&out)
            .run_ok();
        for strategy in Strategy::ALL {
            let file = dir.path().join(format!("w{text}.{}.csv", strategy.name()));
            let rows = read_csv(&file);
            let expected = limiter_decisions(policy(strategy, limit, window), &reqs);
            assert_eq!(rows.len() - 1, expected.len());
            let denied = expected.iter().filter(|d| !d.allowed).count();
            assert!(
                denied > 0,
                "{strategy} {text}: the sample should make the limiter deny"
            );
            for (i, (row, d)) in rows[1..].iter().zip(&expected).enumerate() {
                assert_eq!(row[3..], columns(d), "{strategy} {text}: row {} ({row:?})", i + 2);
            }
        }
    }
}

/// One generated request: (step, whether it goes backwards, key, cost
/// choice).
type Step = (u64, bool, u8, usize);

proptest! {
    #![proptest_config(binary_cases(6))]

    #[test]
    fn rows_equal_the_pure_strategy_functions_when_time_goes_backwards(
        limit in 1..=6u64,
        // Windows that are not whole milliseconds exercise the rounding.
        window_us in proptest::sample::select(vec![1_000u64, 1_500, 250_000, 1_000_000, 333, 7_777]),
        // Mostly forwards, sometimes backwards, sometimes the same instant.
        steps in proptest::collection::vec(
            (0..u64::MAX, proptest::bool::weighted(0.2), 0..3u8, 0..7usize),
            300,
        ),
    ) {
        check_against_pure_functions(limit, window_us, &steps);
    }
}

/// Replays the requests of `steps` under every strategy with `limit` per
/// `window_us` microseconds and compares each decisions row with the pure
/// strategy functions.
fn check_against_pure_functions(limit: u64, window_us: u64, steps: &[Step]) {
    let dir = tempfile::tempdir().unwrap();
    let window = Duration::from_micros(window_us);
    let mut t: u64 = 1_714_564_800_000;
    let mut text = String::from("key,time,cost\n");
    let mut reqs = Vec::new();
    for &step in steps {
        let req = random_request(&mut t, step, window_us, limit);
        text.push_str(&format!("{},{t},{}\n", req.key, req.cost));
        reqs.push(req);
    }
    let trace = dir.path().join("trace.csv");
    std::fs::write(&trace, text).unwrap();
    for strategy in Strategy::ALL {
        let out = dir.path().join(format!("{}.out.csv", strategy.name()));
        Tollgate::simulate()
            .trace(&trace)
            .strategy(strategy.name())
            .limit(limit)
            .window(&format!("{window_us}us"))
            .decisions(&out)
            .run_ok();
        let rows = read_csv(&out);
        let expected = pure_decisions(policy(strategy, limit, window), &reqs);
        assert_eq!(rows.len() - 1, expected.len());
        for (i, (row, d)) in rows[1..].iter().zip(&expected).enumerate() {
            assert_eq!(
                row[3..],
                columns(d),
                "{strategy} L={limit} W={window_us}us: row {}",
                i + 2
            );
        }
    }
}

#[test]
fn reset_and_retry_after_round_up_to_whole_milliseconds() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    // Half a microsecond past a whole second, then the same instant again.
    std::fs::write(
        &trace,
        "time,key\n2024-05-01T10:00:00.0000005Z,a\n2024-05-01T10:00:00.0000005Z,a\n",
    )
    .unwrap();
    let out = dir.path().join("d.csv");
    let run = |strategy: &str, limit: &str| {
        Tollgate::simulate()
            .trace(&trace)
            .strategy(strategy)
            .limit(limit)
            .window("1s")
            .decisions(&out)
            .run_ok();
        read_csv(&out)
    };
    // Fixed window: 999.9995 ms to the end of the bucket.
    let rows = run("fixed_window", "1");
    assert_eq!(rows[1][3..], ["true", "0", "1000", ""]);
    assert_eq!(rows[2][3..], ["false", "0", "1000", "1000"]);
    // Token bucket with L = 3: T = 333,333,333 ns, i.e. 333.33 ms.
    let rows = run("token_bucket", "3");
    assert_eq!(rows[1][3..], ["true", "2", "334", ""]);
    assert_eq!(rows[2][3..], ["true", "1", "667", ""]);
}

#[test]
fn all_writes_four_files_equal_to_single_strategy_runs() {
    let dir = tempfile::tempdir().unwrap();
    let base = |name: &str| {
        Tollgate::simulate()
            .trace(example("sample.csv"))
            .limit(30)
            .window("2s")
            .decisions(dir.path().join(name))
    };
    let stdout = base("all.csv").strategy("all").run_ok();
    let names = file_names(dir.path());
    assert_eq!(
        names,
        [
            "all.fixed_window.csv",
            "all.leaky_bucket.csv",
            "all.sliding_window.csv",
            "all.token_bucket.csv"
        ]
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{stdout}");
    for (strategy, line) in Strategy::ALL.iter().zip(&lines[2..]) {
        assert!(line.starts_with(strategy.name()), "{stdout}");
        let single = base("one.csv").strategy(strategy.name()).run_ok();
        let all_file = std::fs::read(dir.path().join(format!("all.{strategy}.csv"))).unwrap();
        assert_eq!(
            all_file,
            std::fs::read(dir.path().join("one.csv")).unwrap(),
            "{strategy}"
        );
        assert_eq!(
            single
                .lines()
                .nth(2)
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>(),
            { line.split_whitespace().collect::<Vec<_>>() }
        );
    }
}

#[test]
fn rfc3339_times_with_offsets_match_integer_milliseconds() {
    let dir = tempfile::tempdir().unwrap();
    let source = example("rfc3339.csv");
    let rows = read_csv(&source);
    assert_eq!(rows[0], ["key", "cost", "time"]);
    // The same instants as integer milliseconds, worked out by hand.
    let base = 1_714_557_600_000u64; // 2024-05-01T10:00:00Z
    let offsets_ms = [100, 200, 300, 400, 1050, 900, 1000, 2500];
    assert_eq!(rows.len() - 1, offsets_ms.len());
    let mut ms_text = String::from("key,cost,time\n");
    for (row, off) in rows[1..].iter().zip(offsets_ms) {
        ms_text.push_str(&format!("{},{},{}\n", row[0], row[1], base + off));
    }
    let ms_trace = dir.path().join("ms.csv");
    std::fs::write(&ms_trace, ms_text).unwrap();
    let run = |trace: &std::path::Path, out: &str| {
        let out = dir.path().join(out);
        let stdout = Tollgate::simulate()
            .trace(trace)
            .strategy("all")
            .limit(2)
            .window("1s")
            .decisions(&out)
            .run_ok();
        (stdout, out)
    };
    let (rfc_stdout, _) = run(&source, "rfc.csv");
    let (ms_stdout, _) = run(&ms_trace, "ms.csv");
    assert_eq!(rfc_stdout, ms_stdout);
    for strategy in Strategy::ALL {
        let rfc = read_csv(&dir.path().join(format!("rfc.{strategy}.csv")));
        let ms = read_csv(&dir.path().join(format!("ms.{strategy}.csv")));
        for (i, (a, b)) in rfc[1..].iter().zip(&ms[1..]).enumerate() {
            assert_eq!(a[0], rows[i + 1][2], "time is copied exactly as given");
            assert_eq!(a[1..], b[1..], "{strategy} row {}", i + 2);
        }
    }
    // The third request for 10.0.0.1 is the third within one second.
    let fixed = read_csv(&dir.path().join("rfc.fixed_window.csv"));
    assert_eq!(
        fixed[3],
        [
            "2024-05-01T06:00:00.300-04:00",
            "10.0.0.1",
            "1",
            "false",
            "0",
            "700",
            "700"
        ]
    );
}

#[test]
fn summary_table_for_all_strategies() {
    let stdout = Tollgate::simulate()
        .trace(example("rfc3339.csv"))
        .strategy("all")
        .limit(2)
        .window("1s")
        .run_ok();
    // Worked out by hand from SEMANTICS.md; ties in max_in_window go to the
    // key seen first. 10.0.0.1's request of cost 3 exceeds the limit and is
    // denied by every strategy. The sliding window anchors each key's window
    // at its first request, so 10.0.0.1's window [0.100 s, 1.100 s) already
    // holds 2 when its request at 1.050 s arrives, and 10.0.0.2's window
    // [0.400 s, 1.400 s) holds 2 at its peek at 1.000 s: both are denied.
    let expected = "\
limit 2 per 1s: 8 requests from 2 keys
strategy        admitted  denied  denied%  max_in_window  max_key   most_denied
fixed_window           5       3     37.5              3  10.0.0.1  10.0.0.1 (2), 10.0.0.2 (1)
sliding_window         3       5     62.5              2  10.0.0.1  10.0.0.1 (3), 10.0.0.2 (2)
token_bucket           5       3     37.5              3  10.0.0.1  10.0.0.1 (2), 10.0.0.2 (1)
leaky_bucket           5       3     37.5              3  10.0.0.1  10.0.0.1 (2), 10.0.0.2 (1)
";
    assert_eq!(stdout, expected);
}

#[test]
fn summary_counts_match_the_decisions_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d.csv");
    let stdout = Tollgate::simulate()
        .trace(example("sample.csv"))
        .strategy("sliding_window")
        .limit(25)
        .window("1s")
        .decisions(&out)
        .run_ok();
    let rows = read_csv(&out);
    let admitted = rows[1..].iter().filter(|r| r[3] == "true").count();
    let denied = rows.len() - 1 - admitted;
    // Brute force: the most units admitted for one key within [t, t + 1s).
    let reqs = sample_requests();
    let mut best = (0u64, String::new());
    let mut keys: Vec<&str> = Vec::new();
    for (_, r) in &reqs {
        if !keys.contains(&r.key.as_str()) {
            keys.push(&r.key);
        }
    }
    for key in &keys {
        let events: Vec<(u64, u64)> = reqs
            .iter()
            .zip(&rows[1..])
            .filter(|((_, r), row)| r.key == *key && row[3] == "true")
            .map(|((_, r), _)| (r.nanos, r.cost))
            .collect();
        for &(t, _) in &events {
            let units = events
                .iter()
                .filter(|&&(u, _)| u >= t && u < t + 1_000_000_000)
                .map(|&(_, c)| c)
                .sum::<u64>();
            if units > best.0 {
                best = (units, key.to_string());
            }
        }
    }
    // The keys with the most denied requests, ties to the key seen first.
    let mut denied_by_key: Vec<(usize, &str)> = keys
        .iter()
        .map(|key| {
            let n = reqs
                .iter()
                .zip(&rows[1..])
                .filter(|((_, r), row)| r.key == *key && row[3] == "false")
                .count();
            (n, *key)
        })
        .collect();
    denied_by_key.sort_by_key(|&(n, _)| std::cmp::Reverse(n));
    let most_denied: Vec<String> = denied_by_key[..3]
        .iter()
        .map(|(n, key)| format!("{key} ({n})"))
        .collect();
    assert!(
        denied_by_key[0].0 > denied_by_key[3].0,
        "the sample should have clear leaders"
    );
    let share = format!("{:.1}", 100.0 * denied as f64 / (rows.len() - 1) as f64);
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next().unwrap(),
        format!("limit 25 per 1s: {} requests from 20 keys", rows.len() - 1)
    );
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        [
            "strategy",
            "admitted",
            "denied",
            "denied%",
            "max_in_window",
            "max_key",
            "most_denied"
        ]
    );
    let line = lines.next().unwrap();
    let (cells, rest) = line.split_at(line.find(&best.1).unwrap() + best.1.len());
    let cells: Vec<&str> = cells.split_whitespace().collect();
    let expected = [
        "sliding_window".to_owned(),
        admitted.to_string(),
        denied.to_string(),
        share,
        best.0.to_string(),
        best.1.clone(),
    ];
    assert_eq!(cells, expected);
    assert_eq!(rest.trim_start(), most_denied.join(", "));
    assert_eq!(lines.next(), None);
    assert_eq!(keys.len(), 20);
}

#[test]
fn an_unsorted_trace_with_many_keys_never_admits_deleted_budget_again() {
    // Enough keys that shards sweep themselves while the clock is far ahead;
    // then the clock goes back to the first keys' window.
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("time,key\n");
    let mut reqs = Vec::new();
    for (ms, prefix) in [(500u64, "a"), (100_000, "b"), (600, "a")] {
        for i in 0..5_000 {
            let key = format!("{prefix}{i}");
            text.push_str(&format!("{ms},{key}\n"));
            reqs.push(Req {
                nanos: ms * 1_000_000,
                key,
                cost: 1,
            });
        }
    }
    let trace = dir.path().join("unsorted.csv");
    std::fs::write(&trace, text).unwrap();
    let out = dir.path().join("unsorted.out.csv");
    Tollgate::simulate()
        .trace(&trace)
        .strategy("fixed_window")
        .limit(1)
        .window("1s")
        .decisions(&out)
        .run_ok();
    let rows = read_csv(&out);
    let expected = pure_decisions(policy(Strategy::FixedWindow, 1, Duration::from_secs(1)), &reqs);
    let denied = rows[1..].iter().filter(|r| r[3] == "false").count();
    assert_eq!(
        denied, 5_000,
        "the second request of each `a` key in its window must be denied"
    );
    for (i, (row, d)) in rows[1..].iter().zip(&expected).enumerate() {
        assert_eq!(row[3..], columns(d), "row {}", i + 2);
    }
}

#[test]
fn a_resource_column_changes_nothing_without_a_policy_file() {
    let dir = tempfile::tempdir().unwrap();
    // The sample with its `path` column renamed `resource`.
    let text = std::fs::read_to_string(example("sample.csv")).unwrap();
    let (header, rows) = text.split_once('\n').unwrap();
    assert_eq!(header, "time,key,path,cost");
    let trace = dir.path().join("resources.csv");
    std::fs::write(&trace, format!("time,key,resource,cost\n{rows}")).unwrap();
    let summary = |trace: &std::path::Path, out: &str| {
        let out = dir.path().join(out);
        let stdout = Tollgate::simulate()
            .trace(trace)
            .strategy("all")
            .limit(10)
            .window("10s")
            .decisions(&out)
            .run_ok();
        let files: Vec<Vec<u8>> = Strategy::ALL
            .iter()
            .map(|s| std::fs::read(out.with_extension(format!("{}.csv", s.name()))).unwrap())
            .collect();
        (stdout, files)
    };
    assert_eq!(
        summary(&trace, "with.csv"),
        summary(&example("sample.csv"), "without.csv")
    );
}

/// `simulate` of the sample with one strategy, decisions to `out`.
fn sample_to(out: &std::path::Path, strategy: &str) -> std::process::Output {
    Tollgate::simulate()
        .trace(example("sample.csv"))
        .strategy(strategy)
        .limit(10)
        .window("10s")
        .decisions(out)
        .run()
}

#[test]
fn a_regular_decisions_file_is_replaced_through_a_temporary_file_keeping_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.csv");
    std::fs::write(&out, "previous run\n").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o640)).unwrap();
    let before = std::fs::metadata(&out).unwrap();
    let output = sample_to(&out, "token_bucket");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let after = std::fs::metadata(&out).unwrap();
    // A new file (renamed over the old one), not the old one rewritten.
    use std::os::unix::fs::MetadataExt;
    assert_ne!(before.ino(), after.ino());
    assert_eq!(after.permissions().mode() & 0o777, 0o640);
    assert_eq!(read_csv(&out)[0], DECISIONS_HEADER);
    assert_eq!(file_names(dir.path()), ["out.csv"]);
}

#[test]
fn a_symlinked_decisions_file_is_written_through_and_the_link_kept() {
    let dir = tempfile::tempdir().unwrap();
    let real_dir = dir.path().join("real");
    std::fs::create_dir(&real_dir).unwrap();
    std::fs::write(real_dir.join("target.csv"), "old\n").unwrap();
    let link = dir.path().join("link.csv");
    std::os::unix::fs::symlink("real/target.csv", &link).unwrap();
    let output = sample_to(&link, "fixed_window");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        std::path::Path::new("real/target.csv")
    );
    let rows = read_csv(&real_dir.join("target.csv"));
    assert_eq!(rows[0], DECISIONS_HEADER);
    assert_eq!(rows.len() - 1, sample_requests().len());
    assert_eq!(file_names(dir.path()), ["link.csv", "real"]);
    assert_eq!(file_names(&real_dir), ["target.csv"]);
    // A dangling link gets its target created.
    std::fs::remove_file(real_dir.join("target.csv")).unwrap();
    let output = sample_to(&link, "fixed_window");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(read_csv(&real_dir.join("target.csv"))[0], DECISIONS_HEADER);
}

#[test]
fn a_fifo_receives_the_decisions_and_stays_a_fifo() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("decisions.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let output = sample_to(&fifo, "sliding_window");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = reader.join().unwrap();
    let file = dir.path().join("regular.csv");
    let output = sample_to(&file, "sliding_window");
    assert!(output.status.success());
    assert_eq!(text, std::fs::read_to_string(&file).unwrap());
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    assert_eq!(file_names(dir.path()), ["decisions.fifo", "regular.csv"]);
}

#[test]
fn a_full_device_is_an_error_naming_it_and_is_not_replaced() {
    use std::os::unix::fs::FileTypeExt;
    let full = std::path::Path::new("/dev/full");
    assert!(std::fs::metadata(full).unwrap().file_type().is_char_device());
    let output = sample_to(full, "fixed_window");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: cannot write decisions file /dev/full: No space left on device"),
        "{stderr}"
    );
    assert!(std::fs::metadata(full).unwrap().file_type().is_char_device());
}

#[test]
fn a_directory_holds_one_file_per_strategy_and_is_an_error_for_one_file() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("decisions");
    std::fs::create_dir(&dir).unwrap();
    let output = sample_to(&dir, "all");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        file_names(&dir),
        [
            "fixed_window.csv",
            "leaky_bucket.csv",
            "sliding_window.csv",
            "token_bucket.csv"
        ]
    );
    // Nothing beside the directory (such as decisions.fixed_window).
    assert_eq!(file_names(root.path()), ["decisions"]);
    for strategy in Strategy::ALL {
        let single = root.path().join("single.csv");
        assert!(sample_to(&single, strategy.name()).status.success());
        assert_eq!(
            std::fs::read(dir.join(format!("{}.csv", strategy.name()))).unwrap(),
            std::fs::read(&single).unwrap(),
            "{strategy}"
        );
    }
    // With a trailing slash too.
    let slash = format!("{}/", arg(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir(&dir).unwrap();
    assert!(sample_to(std::path::Path::new(&slash), "all").status.success());
    assert_eq!(file_names(&dir).len(), 4);
    // One strategy cannot write a directory; a missing directory is no file name.
    let output = sample_to(&dir, "token_bucket");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("is a directory"), "{stderr}");
    assert!(dir.is_dir());
    let missing = format!("{}/", arg(&root.path().join("missing")));
    let output = sample_to(std::path::Path::new(&missing), "all");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr.contains("neither an existing directory nor a file name"),
        "{stderr}"
    );
    assert_eq!(file_names(root.path()), ["decisions", "single.csv"]);
}

#[test]
fn long_keys_are_cut_in_the_summary_but_exact_in_the_decisions_file() {
    let dir = tempfile::tempdir().unwrap();
    let key = "k".repeat(60_000);
    let trace = dir.path().join("long.csv");
    std::fs::write(&trace, format!("time,key\n0,{key}\n1,{key}\n2,short\n")).unwrap();
    let out = dir.path().join("d.csv");
    let stdout = Tollgate::simulate()
        .trace(&trace)
        .strategy("fixed_window")
        .limit(1)
        .window("1s")
        .decisions(&out)
        .run_ok();
    assert!(stdout.len() < 1000, "{} bytes of summary", stdout.len());
    let cut = format!("{}… (60000 bytes)", "k".repeat(64));
    let row = stdout.lines().nth(2).unwrap();
    assert!(row.contains(&format!("  {cut}  {cut} (1)")), "{row}");
    let rows = read_csv(&out);
    assert_eq!(rows[1][1], key);
    assert_eq!(rows[2][1], key);
}

#[test]
fn decisions_to_dev_stdout_go_down_the_pipe_before_the_summary() {
    let piped = sample_to(std::path::Path::new("/dev/stdout"), "token_bucket");
    assert!(
        piped.status.success(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("d.csv");
    let to_file = sample_to(&file, "token_bucket");
    let expected = [std::fs::read(&file).unwrap(), to_file.stdout].concat();
    assert_eq!(
        String::from_utf8(piped.stdout).unwrap(),
        String::from_utf8(expected).unwrap()
    );
}
