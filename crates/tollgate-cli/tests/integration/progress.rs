//! The progress bar is drawn only on a terminal: a replay long enough to
//! get one leaves captured standard error empty.

use crate::support::*;

#[test]
fn a_long_replay_keeps_captured_stderr_clean() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("long.csv");
    // 4 strategies x 60,000 requests = 240,000 decisions, above the
    // progress bar's threshold of 200,000.
    let mut text = String::from("time,key\n");
    for i in 0..60_000u64 {
        text.push_str(&format!("{},k{}\n", 1_714_564_800_000 + i, i % 97));
    }
    std::fs::write(&trace, text).unwrap();
    let out = Tollgate::simulate()
        .trace(&trace)
        .strategy("all")
        .limit(10)
        .window("1s")
        .run();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "nothing but errors on stderr"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.starts_with("limit 10 per 1s: 60000 requests from 97 keys\n"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), 6);
}
