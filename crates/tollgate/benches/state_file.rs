//! Saving the in-memory state: how long a snapshot of `KEYS` keys (1,000,000
//! by default) takes to copy and to write as a state file, the file's size
//! per key, and what saving continuously does to the latency of decisions
//! made meanwhile.
//!
//! ```sh
//! cargo bench -p tollgate --bench state_file
//! KEYS=100000 ROUNDS=3 cargo bench -p tollgate --bench state_file
//! ```
//!
//! The keys hold a fixed window's state (a string key of 12 to 16 bytes,
//! as `tenant-123456`). Each round: `MemoryBackend::snapshot`, then
//! `StateSnapshot::save` to a file in a temporary directory (write, fsync,
//! rename). Then decisions on one thread, on known keys, in batches of 64
//! timed together, for `SECONDS` (2) without a save and `SECONDS` while
//! another thread saves again and again; the p50 and p99 of a batch's
//! time per decision are compared. Medians of `ROUNDS` (5) are printed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::{Limiter, MemoryBackend, Policy, Strategy};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[((values.len() as f64 * p) as usize).min(values.len() - 1)]
}

/// Per-decision times (ns) of batches of 64 decisions for `seconds`.
fn decide_for(limiter: &Limiter, keys: &[String], seconds: u64) -> Vec<f64> {
    let mut batches = Vec::new();
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut i = 0usize;
    while Instant::now() < end {
        let started = Instant::now();
        for _ in 0..64 {
            std::hint::black_box(limiter.check(&keys[i % keys.len()]));
            i = i.wrapping_add(7_919);
        }
        batches.push(started.elapsed().as_nanos() as f64 / 64.0);
    }
    batches
}

fn main() {
    let keys_count = env_number("KEYS", 1_000_000) as usize;
    let rounds = env_number("ROUNDS", 5) as usize;
    let seconds = env_number("SECONDS", 2);
    let backend = MemoryBackend::new().snapshots();
    let policy = Policy::new(Strategy::FixedWindow, 1 << 40, Duration::from_secs(3_600)).unwrap();
    let limiter = Limiter::builder()
        .backend(backend.clone())
        .policy(policy)
        .build()
        .unwrap();
    let keys: Vec<String> = (0..keys_count).map(|i| format!("tenant-{i}")).collect();
    for key in &keys {
        limiter.check(key);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state");
    let (mut copy, mut write, mut size) = (Vec::new(), Vec::new(), 0);
    for _ in 0..rounds {
        let started = Instant::now();
        let snapshot = backend.snapshot();
        copy.push(started.elapsed().as_secs_f64());
        assert_eq!(snapshot.keys(), keys_count as u64);
        let started = Instant::now();
        snapshot.save(&path).unwrap();
        write.push(started.elapsed().as_secs_f64());
        size = std::fs::metadata(&path).unwrap().len();
    }
    let (copy, write) = (median(copy), median(write));
    println!(
        "{keys_count} keys: snapshot {:.0} ms, write {:.0} ms, together {:.0} ms (target < 1,000); \
         file {size} bytes, {:.1} bytes per key",
        copy * 1e3,
        write * 1e3,
        (copy + write) * 1e3,
        size as f64 / keys_count as f64
    );

    let (mut quiet_p50, mut quiet_p99, mut busy_p50, mut busy_p99, mut saves) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let mut quiet = decide_for(&limiter, &keys, seconds);
        quiet_p50.push(percentile(&mut quiet, 0.5));
        quiet_p99.push(percentile(&mut quiet, 0.99));
        let stop = Arc::new(AtomicBool::new(false));
        let saver = {
            let (stop, backend, path) = (stop.clone(), backend.clone(), path.clone());
            std::thread::spawn(move || {
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    backend.snapshot().save(&path).unwrap();
                    n += 1;
                }
                n
            })
        };
        let mut busy = decide_for(&limiter, &keys, seconds);
        stop.store(true, Ordering::Relaxed);
        saves.push(f64::from(saver.join().unwrap()));
        busy_p50.push(percentile(&mut busy, 0.5));
        busy_p99.push(percentile(&mut busy, 0.99));
    }
    let (qp50, qp99, bp50, bp99) = (
        median(quiet_p50),
        median(quiet_p99),
        median(busy_p50),
        median(busy_p99),
    );
    println!(
        "decisions per batch of 64, ns each: without saving p50 {qp50:.0}, p99 {qp99:.0}; while \
         saving without pause ({:.0} saves in {seconds} s) p50 {bp50:.0}, p99 {bp99:.0}: p99 {:.2}x \
         (target < 1.05x)",
        median(saves),
        bp99 / qp99
    );
}
