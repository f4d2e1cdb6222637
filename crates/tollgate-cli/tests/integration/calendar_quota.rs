//! `simulate` under a calendar quota: a month-long trace under a monthly
//! quota shows where the month turned, in the summary and in the chart.

use std::fmt::Write as _;

use crate::support::*;

/// 2026-01-10T00:00:00Z in milliseconds.
const JANUARY_10: u64 = 1_768_003_200_000;
const HOUR: u64 = 3_600_000;

/// One request an hour for `tenant` from 10 January to 10 February 2026.
fn hourly_trace(dir: &std::path::Path) -> std::path::PathBuf {
    let mut csv = String::from("time,key,path,cost\n");
    for hour in 0..=31 * 24 {
        writeln!(csv, "{},tenant,/api,1", JANUARY_10 + hour * HOUR).unwrap();
    }
    let path = dir.join("month.csv");
    std::fs::write(&path, csv).unwrap();
    path
}

#[test]
fn a_monthly_quota_counts_afresh_from_the_first_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let trace = hourly_trace(dir.path());
    let config = dir.path().join("quota.yaml");
    std::fs::write(
        &config,
        "tollgate:\n  default:\n    limit: 500\n    calendar: { period: month, time_zone: UTC }\n",
    )
    .unwrap();
    let svg = dir.path().join("quota.svg");
    let summary = Tollgate::simulate()
        .trace(&trace)
        .config(&config)
        .plot(&svg)
        .run_ok();
    // January from the 10th: 22 days of hours, 528 requests, 28 over the
    // quota; February to the 10th: 217, all admitted.
    let row = summary
        .lines()
        .find(|l| l.starts_with("default"))
        .unwrap_or_else(|| panic!("{summary}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[1..5], ["717", "28", "3.8", "500"], "{summary}");
    assert!(
        summary.contains("fixed_window, 500 per month from 2001-01-01T00:00:00 UTC"),
        "{summary}"
    );
    assert!(
        summary.contains(
            "  periods: each month (month from 2001-01-01T00:00:00 UTC) counts afresh; the trace crosses a \
             boundary at 2026-02-01T00:00:00Z\n"
        ),
        "{summary}"
    );
    // The chart's panel counts the current month, peaks at the quota and
    // names the boundary in its legend.
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("peak 500 in a month"), "no caption in the chart");
    assert!(
        text.contains("admitted, this month"),
        "no axis label in the chart"
    );
    assert!(
        text.contains("the current month of UTC"),
        "no legend in the chart"
    );
}
