//! Helpers shared by the integration tests: running the real binary
//! ([`Tollgate`]) and its service ([`Serve`]), reading CSV output, recomputing decisions with the
//! library (the Redis servers are `tollgate_test_support::redis`'s).
#![allow(dead_code)]

mod command;
mod serve;

pub use command::Tollgate;
pub use serve::{get, post, post_request, Serve};

use std::path::{Path, PathBuf};
use std::time::Duration;

use tollgate::backend::Tick;
use tollgate::clock::ManualClock;
use tollgate::strategy::{decide_all, State};
use tollgate::{Decision, Limiter, Policy, Strategy};

/// The header row of a decisions file (one more column, `bound_by`, when a
/// policy of the replay is compound).
pub const DECISIONS_HEADER: [&str; 7] = [
    "time",
    "key",
    "cost",
    "allowed",
    "remaining",
    "reset_ms",
    "retry_after_ms",
];

/// The names of the files in `dir`, sorted.
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().expect("UTF-8 file name"))
        .collect();
    names.sort();
    names
}

/// The configuration of a property that runs the binary once per case:
/// `cases` cases, and no regression files written beside the tests.
pub fn binary_cases(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}

/// A path under the repository's `examples/traces`.
pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/traces")
        .join(name)
}

/// Writes `text` to the file `name` in `dir` and returns its path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The sample trace with its `path` column as the `resource` column, in
/// `dir`.
pub fn sample_with_resources(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(example("sample.csv")).unwrap();
    let (header, rows) = text.split_once('\n').unwrap();
    assert_eq!(header, "time,key,path,cost");
    write(dir, "resources.csv", &format!("time,key,resource,cost\n{rows}"))
}

/// A path as a `&str` argument.
pub fn arg(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// Reads a CSV file (with its header as the first row).
pub fn read_csv(path: &Path) -> Vec<Vec<String>> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_path(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    reader
        .records()
        .map(|r| r.expect("valid CSV").iter().map(str::to_owned).collect())
        .collect()
}

/// One request: time in nanoseconds since the epoch, key and cost.
#[derive(Clone, Debug)]
pub struct Req {
    pub nanos: u64,
    pub key: String,
    pub cost: u64,
}

/// The sample trace's requests: (time field, key, cost).
pub fn sample_requests() -> Vec<(String, Req)> {
    let rows = read_csv(&example("sample.csv"));
    let header = &rows[0];
    let col = |name: &str| header.iter().position(|h| h == name).expect("column");
    let (t, k, c) = (col("time"), col("key"), col("cost"));
    rows[1..]
        .iter()
        .map(|r| {
            let ms: u64 = r[t].parse().expect("integer ms");
            let cost = if r[c].is_empty() {
                1
            } else {
                r[c].parse().expect("cost")
            };
            (
                r[t].clone(),
                Req {
                    nanos: ms * 1_000_000,
                    key: r[k].clone(),
                    cost,
                },
            )
        })
        .collect()
}

/// The decision columns of a decisions row: allowed, remaining, reset_ms,
/// retry_after_ms.
pub fn columns(d: &Decision) -> [String; 4] {
    let ceil_ms = |d: Duration| d.as_nanos().div_ceil(1_000_000).to_string();
    [
        d.allowed.to_string(),
        d.remaining.to_string(),
        ceil_ms(d.reset),
        match d.retry_after {
            Some(r) if !d.allowed => ceil_ms(r),
            _ => String::new(),
        },
    ]
}

/// The request of one random `step` (time step, backwards?, key, cost
/// choice) of a trace whose clock `ms` (milliseconds since the epoch) it
/// moves: by up to four times `window_us`, backwards when told; key
/// `k{key}`; cost 1, 0, 2, `largest` or `largest + 1`.
pub fn random_request(ms: &mut u64, step: (u64, bool, u8, usize), window_us: u64, largest: u64) -> Req {
    let (step, backwards, key, cost) = step;
    let step = step % (4 * (window_us / 1000 + 1));
    *ms = if backwards {
        ms.saturating_sub(step)
    } else {
        *ms + step
    };
    Req {
        nanos: *ms * 1_000_000,
        key: format!("k{key}"),
        cost: [1, 1, 1, 0, 2, largest, largest + 1][cost],
    }
}

/// Decisions of an in-memory limiter driven by a manual clock.
pub fn limiter_decisions(policy: Policy, reqs: &[Req]) -> Vec<Decision> {
    let clock = ManualClock::default();
    let limiter = Limiter::builder()
        .policy(policy)
        .clock(clock.clone())
        .build()
        .expect("valid policy");
    reqs.iter()
        .map(|r| {
            clock.set_nanos(r.nanos);
            limiter.check_n(&r.key, r.cost)
        })
        .collect()
}

/// Decisions of the library's pure strategy functions, one state per key.
pub fn pure_decisions(policy: Policy, reqs: &[Req]) -> Vec<Decision> {
    let limits = policy.limit_rates(Tick::Nanos);
    let mut states: std::collections::HashMap<String, Vec<Option<State>>> = Default::default();
    reqs.iter()
        .map(|r| {
            let state = states
                .entry(r.key.clone())
                .or_insert_with(|| vec![None; limits.len()]);
            let mut next = vec![None; limits.len()];
            let compound = decide_all(&limits, state, &mut next, r.nanos, r.cost);
            *state = next;
            Decision::from_compound(compound, &limits, Tick::Nanos)
        })
        .collect()
}

/// Builds a policy, panicking on invalid values.
pub fn policy(strategy: Strategy, limit: u64, window: Duration) -> Policy {
    Policy::new(strategy, limit, window).expect("valid policy")
}
