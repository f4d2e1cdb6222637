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
//! as `tenant-123456`). Each of `ROUNDS` (5) rounds:
//! `MemoryBackend::snapshot`, then `StateSnapshot::save` to a file in a
//! temporary directory (write, fsync, rename); the medians are printed.
//!
//! Then decisions on one thread, on known keys, in batches of 64 timed
//! together, in `PAIRS` (40) rounds of three phases in rotating order:
//! without saving, while another thread makes `SAVES` (2) saves at once
//! (`MemoryBackend::snapshot`, `StateSnapshot::save`), and while it makes
//! as many at `PACE_MIB` (128) MiB/s (`MemoryBackend::save_paced`, what
//! `tollgate serve` does while serving). A quiet
//! phase lasts as long as the saves took above. Each round gives the ratios
//! of a saving phase's p50 and p99 (of a batch's time per decision) to the
//! quiet phase's; their medians are printed. Alternating every few hundred
//! milliseconds keeps the machine's drift out of the ratios, which runs of
//! seconds each did not (the same build gave 0.99× to 1.15×).
//!
//! `PIN=N` pins the deciding thread to the machine's `N`-th core and the
//! saving one to another: a VM that delivers the disk's completions to
//! one vCPU slows the decisions most when they run there.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::{Limiter, MemoryBackend, Policy, Strategy};

#[path = "support/cpu.rs"]
mod cpu;

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

/// Per-decision times (ns) of batches of 64 decisions, until `over`.
/// `cursor` walks the keys on from one call to the next.
fn decide_until(limiter: &Limiter, keys: &[String], cursor: &mut usize, over: impl Fn() -> bool) -> Vec<f64> {
    let mut batches = Vec::new();
    let i = cursor;
    while !over() {
        let started = Instant::now();
        for _ in 0..64 {
            std::hint::black_box(limiter.check(&keys[*i % keys.len()]));
            *i = i.wrapping_add(7_919);
        }
        batches.push(started.elapsed().as_nanos() as f64 / 64.0);
    }
    batches
}

fn main() {
    let keys_count = env_number("KEYS", 1_000_000) as usize;
    let rounds = env_number("ROUNDS", 5) as usize;
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

    // Decisions in rotating phases: without saving (as long as the saves
    // took when timed above), while another thread saves `SAVES` times at
    // once, and while it saves as often at `PACE_MIB` MiB/s. Each round
    // of the three gives the ratios of a saving phase's p50 and p99 to the
    // quiet phase's; the medians over `PAIRS` rounds are printed.
    // Alternating every few hundred milliseconds keeps the machine's drift
    // (its other tenants, its caches) out of the ratios.
    let pairs = env_number("PAIRS", 40) as usize;
    let saves = env_number("SAVES", 2);
    let pace = NonZeroU64::new(env_number("PACE_MIB", 128) << 20).expect("PACE_MIB above 0");
    let quiet_phase = Duration::from_secs_f64((copy + write) * saves as f64);
    let pin = std::env::var("PIN").ok().and_then(|v| v.parse::<usize>().ok());
    if let Some(core) = pin {
        cpu::pin_to_cpu(core);
        println!(
            "decisions pinned to core {core}, saves to core {}",
            usize::from(core == 0)
        );
    }
    let mut cursor = 0;
    let mut ratios: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    let mut phase_ms: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut quiet_times = Vec::new();
    for pair in 0..pairs {
        let mut times: [(f64, f64); 3] = [(0.0, 0.0); 3];
        // Each phase in turn comes first, so that none always follows the
        // saves (which leave the keys in the caches).
        for phase in (0..3).map(|i| (i + pair) % 3) {
            let started = Instant::now();
            let mut batches = if phase == 0 {
                let end = started + quiet_phase;
                decide_until(&limiter, &keys, &mut cursor, || Instant::now() >= end)
            } else {
                let done = Arc::new(AtomicBool::new(false));
                let saver = {
                    let (done, backend, path) = (done.clone(), backend.clone(), path.clone());
                    std::thread::spawn(move || {
                        if let Some(core) = pin {
                            cpu::pin_to_cpu(usize::from(core == 0));
                        }
                        for _ in 0..saves {
                            match phase {
                                1 => backend.snapshot().save(&path).unwrap(),
                                _ => {
                                    backend.save_paced(&path, pace).unwrap();
                                }
                            }
                        }
                        done.store(true, Ordering::Release);
                    })
                };
                let batches = decide_until(&limiter, &keys, &mut cursor, || done.load(Ordering::Acquire));
                saver.join().unwrap();
                phase_ms[phase - 1].push(started.elapsed().as_secs_f64() * 1e3);
                batches
            };
            times[phase] = (percentile(&mut batches, 0.5), percentile(&mut batches, 0.99));
        }
        quiet_times.push(times[0]);
        for saving in 0..2 {
            let (p50, p99) = times[saving + 1];
            ratios[saving].push((p50 / times[0].0, p99 / times[0].1));
        }
    }
    println!(
        "decisions per batch of 64, ns each, medians of {pairs} rounds: without saving p50 {:.0}, \
         p99 {:.0}",
        median(quiet_times.iter().map(|t| t.0).collect()),
        median(quiet_times.iter().map(|t| t.1).collect()),
    );
    for (saving, name) in ["at once", &format!("at {} MiB/s", pace.get() >> 20)]
        .into_iter()
        .enumerate()
    {
        println!(
            "  while saving {name} ({saves} saves in {:.0} ms): p50 {:.3}x, p99 {:.3}x (target < 1.05x)",
            median(phase_ms[saving].clone()),
            median(ratios[saving].iter().map(|r| r.0).collect()),
            median(ratios[saving].iter().map(|r| r.1).collect()),
        );
    }
}
