//! Memory follows the number of active keys: expired state is reclaimed
//! without any call from the user. Measured with a counting allocator, so the
//! figures are live heap bytes (the tables must give back their slots, not
//! only their entries); on Linux the resident set is checked too.
//!
//! `cargo test --release -p tollgate --test memory_reclaim -- --nocapture`
//! prints both.
//!
//! A test binary of its own, apart from `tests/integration`: it installs the
//! counting allocator as the global allocator, and its figures are
//! process-wide, so any other test running in the same process would
//! disturb them.

use std::time::{Duration, Instant};

use tollgate::clock::ManualClock;
use tollgate::{Limiter, MemoryBackend, Strategy};

use tollgate_test_support::counting_alloc::{live, Counting};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KEYS: usize = 1_000_000;

/// The allocation count is process-wide: tests here must not overlap.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn one_million_one_off_keys_are_reclaimed_once_their_windows_pass() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for strategy in Strategy::ALL {
        let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
        let backend = MemoryBackend::new()
            .clock(clock.clone())
            .sweep_interval(Duration::from_millis(20));
        let limiter = Limiter::builder()
            .strategy(strategy)
            .limit(10)
            .window(Duration::from_secs(1))
            .backend(backend)
            .build()
            .unwrap();
        let before = live();
        let rss_before = rss();
        let mut key = String::with_capacity(32);
        for i in 0..KEYS {
            key.clear();
            use std::fmt::Write;
            write!(key, "client-{i}").unwrap();
            assert!(limiter.allow_now(&key));
        }
        let peak = live() - before;
        let rss_peak = rss();
        assert_eq!(limiter.stored_keys(), KEYS);
        assert!(
            peak > (KEYS * 24) as isize,
            "{strategy}: only {peak} bytes for {KEYS} keys?"
        );

        // The windows pass; the user makes no call at all.
        clock.advance(Duration::from_secs(3));
        let deadline = Instant::now() + Duration::from_secs(60);
        while limiter.stored_keys() != 0 {
            assert!(
                Instant::now() < deadline,
                "{strategy}: state not reclaimed in time"
            );
            std::thread::yield_now();
        }
        let after = live() - before;
        println!("{strategy}: {peak} bytes with {KEYS} keys, {after} bytes after their windows passed");
        // The process gives the memory back too (glibc: the janitor trims
        // its heap once sweeps have freed several megabytes).
        if let (Some(start), true) = (rss_before, cfg!(all(target_os = "linux", target_env = "gnu"))) {
            let bound = start + 16 * 1024;
            while rss().is_some_and(|now| now > bound) {
                assert!(
                    Instant::now() < deadline,
                    "{strategy}: resident memory {:?} kB stays above {bound} kB",
                    rss()
                );
                std::thread::yield_now();
            }
        }
        println!(
            "{strategy}: resident {rss_before:?} kB before, {rss_peak:?} kB at peak, {:?} kB after",
            rss()
        );
        assert!(
            after < 256 * 1024,
            "{strategy}: {after} bytes still held after reclaiming"
        );
    }
}

#[test]
fn memory_follows_active_keys_while_traffic_flows() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // No janitor help: the shards sweep themselves as new keys arrive.
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let backend = MemoryBackend::new()
        .clock(clock.clone())
        .sweep_interval(Duration::from_secs(3_600));
    let limiter = Limiter::builder()
        .strategy(Strategy::SlidingWindow)
        .limit(5)
        .window(Duration::from_secs(1))
        .backend(backend)
        .build()
        .unwrap();
    const ACTIVE: usize = 50_000;
    let mut most = 0;
    for round in 0..10 {
        for i in 0..ACTIVE {
            assert!(limiter.allow_now(format!("r{round}-k{i}")));
        }
        most = most.max(limiter.stored_keys());
        // Past the state's expiry (2W) and the sweeps' one-second tolerance
        // for clock steps.
        clock.advance(Duration::from_secs(4));
    }
    // Each shard sweeps when it doubles past its last sweep: at most about
    // twice the active keys, plus each shard's minimum.
    assert!(
        most <= 2 * ACTIVE + 64 * 256,
        "{most} entries held for {ACTIVE} active keys"
    );
}

trait AllowNow {
    fn allow_now(&self, key: impl AsRef<[u8]>) -> bool;
}

impl AllowNow for Limiter {
    fn allow_now(&self, key: impl AsRef<[u8]>) -> bool {
        self.check(key).allowed
    }
}

/// The process's resident set in kB (Linux), for the printed report only:
/// it depends on the allocator, so no assertion uses it.
fn rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
