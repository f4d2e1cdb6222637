//! `tollgate simulate --max-delay`: each request waits up to that long for
//! its turn instead of being refused, and the summary adds the delays.

use crate::support::*;

/// Five requests of one key at the same instant, then one 2 s later
/// (times in milliseconds).
const BURST: &str = "time,key\n0,k\n0,k\n0,k\n0,k\n0,k\n2000,k\n";

#[test]
fn a_burst_waits_its_turn_and_the_summary_gives_the_delays() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "burst.csv", BURST);
    let out = Tollgate::simulate()
        .trace(&trace)
        .strategy("all")
        .limit(2)
        .window("1s")
        .arg("--max-delay")
        .arg("1200ms")
        .run_ok();
    assert!(out.contains("waiting instead of refusing"), "{out}");
    let row = |name: &str| -> Vec<String> {
        let table = &out[out.find("waiting instead of refusing").unwrap()..];
        let line = table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{out}"));
        line.split_whitespace().map(str::to_owned).collect()
    };
    // Buckets of 2 per second: a burst of 2, then one slot every 500 ms;
    // the fifth would wait 1,500 ms, beyond 1,200: refused. The request at
    // 2 s finds its slot at 2 s (the third waited to 500, the fourth to
    // 1,000 ms): admitted at once. Delays of the five admitted: 0, 0, 500,
    // 1,000, 0.
    for bucket in ["token_bucket", "leaky_bucket"] {
        assert_eq!(row(bucket), [bucket, "2", "40.0", "0", "1000", "1000"], "{out}");
    }
    // The windows admit what they admit now, and nothing waits.
    for window in ["fixed_window", "sliding_window"] {
        assert_eq!(row(window), [window, "0", "0.0", "0", "0", "0"], "{out}");
    }
}

#[test]
fn waiting_is_replayed_in_memory_only() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "burst.csv", BURST);
    let err = Tollgate::simulate()
        .trace(&trace)
        .strategy("token_bucket")
        .limit(2)
        .window("1s")
        .args([
            "--max-delay",
            "1s",
            "--backend",
            "redis",
            "--redis-url",
            "redis://127.0.0.1:1",
        ])
        .run();
    assert!(!err.status.success());
    let err = String::from_utf8_lossy(&err.stderr);
    assert!(
        err.contains("--max-delay") && err.contains("in memory only"),
        "{err}"
    );
}
