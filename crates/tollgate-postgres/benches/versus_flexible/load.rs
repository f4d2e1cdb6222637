//! tollgate's side: decisions of fixed-window limiters, one task per call
//! in flight, on random keys of the same key space as the Node.js driver's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::backend::Backend;
use tollgate::Limiter;

use crate::meter::Meter;
use crate::run::{percentile, Run};
use crate::Settings;

/// What one task measured: each decision's latency in µs, and how many
/// were not admitted.
struct Measured {
    latencies: Vec<u32>,
    not_admitted: u64,
}

/// Runs `in_flight` tasks, task `t` deciding on `limiters[t % len]`, for
/// the warm-up then `settings.seconds` measured, with `meter` read when
/// the measurement starts and ends.
pub(crate) async fn load<B: Backend>(
    limiters: &[Arc<Limiter<B>>],
    in_flight: usize,
    settings: &Settings,
    meter: &Meter,
) -> Run {
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..in_flight)
        .map(|t| {
            let limiter = limiters[t % limiters.len()].clone();
            let (measuring, stop) = (measuring.clone(), stop.clone());
            let keys = settings.keys;
            tokio::spawn(async move { decide_until(&limiter, t as u64, keys, &measuring, &stop).await })
        })
        .collect();
    tokio::time::sleep(settings.warm_up).await;
    let before = meter.read();
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(settings.seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let after = meter.read();
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    let mut not_admitted = 0;
    for task in tasks {
        let measured = task.await.expect("a decision task");
        latencies.extend(measured.latencies);
        not_admitted += measured.not_admitted;
    }
    latencies.sort_unstable();
    let decisions = latencies.len() as f64;
    assert!(decisions > 0.0, "no decision while measuring");
    Run {
        per_second: decisions / elapsed,
        p50_us: percentile(&latencies, 50.0),
        p99_us: percentile(&latencies, 99.0),
        cpu: before.until(&after, decisions),
        not_admitted,
    }
}

/// Decides on random keys until `stop`, recording while `measuring`.
async fn decide_until<B: Backend>(
    limiter: &Limiter<B>,
    seed: u64,
    keys: u64,
    measuring: &AtomicBool,
    stop: &AtomicBool,
) -> Measured {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x2545_F491_4F6C_DD1D;
    let mut measured = Measured {
        latencies: Vec::new(),
        not_admitted: 0,
    };
    while !stop.load(Ordering::Relaxed) {
        let key = format!("key-{}", splitmix64(&mut state) % keys);
        let started = Instant::now();
        let admitted = matches!(limiter.allow(&key).await, Ok(d) if d.allowed);
        if measuring.load(Ordering::Relaxed) {
            let micros = started.elapsed().as_micros();
            measured.latencies.push(u32::try_from(micros).unwrap_or(u32::MAX));
            measured.not_admitted += u64::from(!admitted);
        }
    }
    measured
}

/// The next number of the SplitMix64 sequence at `state`.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
