//! The in-memory backend's state saved and restored: a restart in the
//! middle of a trace decides as a backend that never stopped; time that
//! passed while down counts; a damaged, cut short or foreign file is
//! refused with what was found.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::backend::{StateFileError, StateSnapshot};
use tollgate::calendar::{Calendar, Period};
use tollgate::clock::ManualClock;
use tollgate::{Limit, Limiter, MemoryBackend, Policy, Strategy};

/// 2026-01-01T00:00:00Z.
const START: u64 = 1_767_225_600_000_000_000;

fn policies() -> Vec<Policy> {
    let mut policies: Vec<Policy> = Strategy::ALL
        .iter()
        .map(|&s| Policy::new(s, 5, Duration::from_secs(60)).unwrap())
        .collect();
    policies.push(
        Policy::compound([
            Limit::new(Strategy::TokenBucket, 3, Duration::from_secs(10)).unwrap(),
            Limit::new(Strategy::SlidingWindow, 8, Duration::from_secs(120)).unwrap(),
        ])
        .unwrap(),
    );
    let day = Calendar::new(Period::Day, "Europe/Berlin", None).unwrap();
    policies.push(Limit::per_calendar(6, day).unwrap().into());
    policies
}

fn limiter(backend: &MemoryBackend, policy: Policy, resource: &str) -> Limiter {
    Limiter::builder()
        .backend(backend.clone())
        .policy(policy)
        .resource(resource)
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// A backend restored from a snapshot (through the file's bytes) at
    /// request `restart` decides every later request as one that ran on.
    #[test]
    fn a_restart_continues_exactly(
        which in 0usize..6,
        trace in prop::collection::vec((0u64..20_000, 0usize..4, 0u64..4), 1..120),
        restart in 0usize..120,
        down_ms in prop_oneof![Just(0u64), 0u64..5_000, 0u64..200_000],
    ) {
        let policy = policies()[which];
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let reference_backend = MemoryBackend::new().clock(clock.clone());
        let reference = limiter(&reference_backend, policy, "api");
        let mut backend = MemoryBackend::new().clock(clock.clone()).snapshots();
        let mut serving = limiter(&backend, policy, "api");
        for (i, &(step_ms, key, cost)) in trace.iter().enumerate() {
            if i == restart {
                // The service stops, is down a while, and starts again.
                let bytes = backend.snapshot().to_bytes();
                drop(serving);
                clock.advance(Duration::from_millis(down_ms));
                let snapshot = StateSnapshot::from_bytes(&bytes).unwrap();
                backend = MemoryBackend::new().clock(clock.clone()).restore(snapshot);
                serving = limiter(&backend, policy, "api");
            }
            clock.advance(Duration::from_millis(step_ms));
            let key = format!("k{key}");
            let expected = reference.check_n(&key, cost);
            let got = serving.check_n(&key, cost);
            prop_assert_eq!(got, expected, "request {} of {}", i, policy);
        }
    }
}

#[test]
fn what_ended_while_down_is_over_and_a_bucket_refills() {
    let clock = ManualClock::new(Duration::from_nanos(START));
    let before = MemoryBackend::new().clock(clock.clone()).snapshots();
    let window = limiter(
        &before,
        Policy::new(Strategy::FixedWindow, 3, Duration::from_secs(60)).unwrap(),
        "window",
    );
    let bucket = limiter(
        &before,
        Policy::new(Strategy::TokenBucket, 10, Duration::from_secs(10)).unwrap(),
        "bucket",
    );
    assert!(window.check_n("k", 3).allowed);
    assert!(bucket.check_n("k", 10).allowed);
    let saved = before.snapshot();
    assert_eq!((saved.tables(), saved.keys()), (2, 2));
    // Down for 4 s: the minute goes on, the bucket refilled 4 tokens.
    clock.advance(Duration::from_secs(4));
    let after = MemoryBackend::new().clock(clock.clone()).restore(saved.clone());
    let window = limiter(
        &after,
        Policy::new(Strategy::FixedWindow, 3, Duration::from_secs(60)).unwrap(),
        "window",
    );
    let bucket = limiter(
        &after,
        Policy::new(Strategy::TokenBucket, 10, Duration::from_secs(10)).unwrap(),
        "bucket",
    );
    assert!(!window.check("k").allowed);
    assert_eq!(bucket.check("k").remaining, 3);
    // Down past the minute: the window is over, nothing restored for it.
    clock.advance(Duration::from_secs(60));
    let later = MemoryBackend::new().clock(clock.clone()).restore(saved);
    let window = limiter(
        &later,
        Policy::new(Strategy::FixedWindow, 3, Duration::from_secs(60)).unwrap(),
        "window",
    );
    assert_eq!(window.check("k").remaining, 2);
    assert_eq!(later.snapshot().keys(), 1);
}

#[test]
fn state_goes_back_to_its_own_resource_and_window_only() {
    let clock = ManualClock::new(Duration::from_nanos(START));
    let before = MemoryBackend::new().clock(clock.clone()).snapshots();
    let minute = Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(60)).unwrap();
    // A table is saved while its limiter lives.
    let login = limiter(&before, minute, "login");
    login.check_n("k", 5);
    let saved = before.snapshot();
    let after = MemoryBackend::new().clock(clock.clone()).restore(saved);
    // Another resource, another window: fresh.
    assert_eq!(limiter(&after, minute, "search").check("k").remaining, 4);
    let hour = Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(3_600)).unwrap();
    assert_eq!(limiter(&after, hour, "login").check("k").remaining, 4);
    // A backend not asked to record keeps no record: nothing to save.
    let unrecorded = MemoryBackend::new().clock(clock.clone());
    let counted = limiter(&unrecorded, minute, "login");
    counted.check("k");
    assert_eq!(unrecorded.snapshot().keys(), 0);
    // Its own: the count goes on, under a changed limit too.
    let raised = Policy::new(Strategy::FixedWindow, 8, Duration::from_secs(60)).unwrap();
    assert_eq!(limiter(&after, raised, "login").check("k").remaining, 2);
}

#[test]
fn damaged_cut_short_and_foreign_files_are_refused_saying_what_was_found() {
    let clock = ManualClock::new(Duration::from_nanos(START));
    let backend = MemoryBackend::new().clock(clock.clone()).snapshots();
    let l = limiter(
        &backend,
        Policy::new(Strategy::SlidingWindow, 5, Duration::from_secs(60)).unwrap(),
        "api",
    );
    for key in ["a", "b", "c"] {
        l.check(key);
    }
    let good = backend.snapshot().to_bytes();
    assert_eq!(StateSnapshot::from_bytes(&good).unwrap().keys(), 3);

    let refused = |bytes: &[u8]| StateSnapshot::from_bytes(bytes).unwrap_err();
    assert!(refused(b"{\"not\": \"state\"}").starts_with("not a tollgate state file: it begins with"));
    assert!(refused(&good[..good.len() - 9]).contains("cut short"));
    assert!(refused(&good[..40]).contains("cut short at byte"));
    let mut flipped = good.clone();
    flipped[30] ^= 0x40;
    let why = refused(&flipped);
    assert!(
        why.contains("checksum does not match") || why.contains("byte"),
        "{why}"
    );
    let mut newer = good.clone();
    newer[15..19].copy_from_slice(&2u32.to_le_bytes());
    let why = refused(&newer);
    assert!(
        why.contains("format version 2") && why.contains("newer tollgate"),
        "{why}"
    );
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(refused(&trailing).contains("1 more bytes after its end"));
}

/// A backend that records its tables, with `keys` keys (`key-0`, …)
/// decided once by a limiter of `strategy` (5 per minute), the limiter kept.
fn backend_with_keys(strategy: Strategy, keys: usize) -> (MemoryBackend, Limiter) {
    let clock = ManualClock::new(Duration::from_nanos(START));
    let backend = MemoryBackend::new().clock(clock).snapshots();
    let l = limiter(
        &backend,
        Policy::new(strategy, 5, Duration::from_secs(60)).unwrap(),
        "api",
    );
    for i in 0..keys {
        l.check(format!("key-{i}"));
    }
    (backend, l)
}

/// The names of the files in `dir`.
fn file_names(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_file_is_written_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state");
    assert!(StateSnapshot::load(&path).unwrap().is_none(), "no file yet");
    let (backend, _limiter) = backend_with_keys(Strategy::LeakyBucket, 100);
    backend.snapshot().save(&path).unwrap();
    // Saved again over it: the file is replaced, no temporary file stays.
    backend.snapshot().save(&path).unwrap();
    assert_eq!(file_names(dir.path()), ["state"]);
    let loaded = StateSnapshot::load(&path).unwrap().unwrap();
    assert_eq!((loaded.tables(), loaded.keys()), (1, 100));
    std::fs::write(&path, b"garbage").unwrap();
    match StateSnapshot::load(&path).unwrap_err() {
        StateFileError::Invalid { path: p, reason } => {
            assert!(p.ends_with("state"));
            assert!(reason.starts_with("not a tollgate state file"), "{reason}");
        }
        other => panic!("{other}"),
    }
    // A directory that cannot take the file: the error names it.
    let err = backend
        .snapshot()
        .save(&dir.path().join("missing/state"))
        .unwrap_err();
    assert!(err.to_string().contains("missing/state"), "{err}");
}

#[test]
fn a_paced_save_writes_the_same_file_no_faster_than_its_pace() {
    let dir = tempfile::tempdir().unwrap();
    let (backend, _limiter) = backend_with_keys(Strategy::FixedWindow, 30_000);
    // A second, small table beside the large one.
    let small = limiter(
        &backend,
        Policy::new(Strategy::TokenBucket, 5, Duration::from_secs(60)).unwrap(),
        "small",
    );
    for i in 0..3 {
        small.check(format!("key-{i}"));
    }
    let (at_once, paced) = (dir.path().join("at-once"), dir.path().join("paced"));
    backend.snapshot().save(&at_once).unwrap();
    let pace = std::num::NonZeroU64::new(4 << 20).unwrap();
    let started = std::time::Instant::now();
    assert_eq!(
        backend.save_paced(&paced, pace).unwrap(),
        30_003,
        "every key written"
    );
    let took = started.elapsed();
    let bytes = std::fs::read(&paced).unwrap();
    assert_eq!(
        bytes,
        std::fs::read(&at_once).unwrap(),
        "the same file, whatever the pace"
    );
    assert!(
        bytes.len() > 600_000,
        "more than two chunks of 256 KiB: {}",
        bytes.len()
    );
    // The large table in several records, read back as one.
    let read = StateSnapshot::load(&paced).unwrap().unwrap();
    assert_eq!((read.tables(), read.keys()), (2, 30_003));
    // Everything before the end (its last 25 bytes) is due at its size
    // over the pace.
    let due = Duration::from_secs_f64((bytes.len() - 25) as f64 / pace.get() as f64);
    assert!(
        took >= due,
        "{} bytes at 4 MiB/s in {took:?}, before {due:?}",
        bytes.len()
    );
    let names = file_names(dir.path());
    assert_eq!(names.len(), 2, "no temporary file stays: {names:?}");
}
