//! Makes a given number of in-memory decisions through `Limiter::check`, for
//! counting instructions per decision independently of the machine's load
//! (the instruction counts in docs/performance.md):
//!
//! ```sh
//! cargo build --release -p tollgate --example decide_loop
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/decide_loop token_bucket 1024 1050000
//! ```
//!
//! Run it twice, with 50,000 and 1,050,000 decisions, and divide the
//! difference in instructions by 1,000,000: setup and warm-up cancel out.
//! Or count the decisions alone, as `.ci/instruction-budget` does, with
//! `--toggle-collect='*decide_loop::measured*'`, and divide by their number.
//! What remains varies by a few instructions between runs (hash seeds, and
//! the latency metric's sampled clock readings, which follow wall time).
//! Arguments: strategy, keys (`10.x.y.z` strings, cycled), decisions, then
//! `closed` for a limit of 1 (every decision after a key's first is
//! denied) and `protected` for the protected path: a deny cache, a circuit
//! breaker and an in-memory fallback (the settings a shared store is
//! served with), here in front of the in-memory store.
//! Decisions run on a `ManualClock`, so their clock readings do not vary.

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::protection::CircuitBreaker;
use tollgate::protection::DenyCache;
use tollgate::{FailPolicy, Limiter, Policy, Strategy};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: decide_loop STRATEGY KEYS DECISIONS [closed] [protected]";
    let strategy: Strategy = args.get(1).expect(usage).parse().expect("a strategy name");
    let keys: usize = args.get(2).expect(usage).parse().expect("a number of keys");
    let decisions: usize = args.get(3).expect(usage).parse().expect("a number of decisions");
    let (mut closed, mut protected) = (false, false);
    for arg in &args[4..] {
        match arg.as_str() {
            "closed" => closed = true,
            "protected" => protected = true,
            other => panic!("{usage}: unknown argument {other:?}"),
        }
    }
    let limit = if closed { 1 } else { 1_000_000_000 };
    let window = Duration::from_secs(3_600);
    let mut builder = Limiter::builder()
        .strategy(strategy)
        .limit(limit)
        .window(window)
        .clock(ManualClock::new(Duration::from_secs(1_700_000_000)));
    if protected {
        builder = builder
            .deny_cache(DenyCache::default())
            .circuit_breaker(CircuitBreaker::default())
            .fail_policy(FailPolicy::Fallback)
            .fallback(Policy::new(strategy, limit, window).expect("valid fallback"));
    }
    let limiter = builder.build().expect("valid policy");
    let keys: Vec<String> = (0..keys.max(1))
        .map(|i| format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255))
        .collect();
    // Every key once, and at least a thousand decisions: the first sampled
    // latency reading calibrates the clock once, which is setup.
    for i in 0..keys.len().max(1_000) {
        limiter.check(&keys[i % keys.len()]);
    }
    let allowed = measured(&limiter, &keys, decisions);
    println!("{allowed} of {decisions} admitted");
}

/// The decisions counted: `callgrind --toggle-collect='*decide_loop::measured*'`
/// counts this function alone, without the setup.
#[inline(never)]
fn measured(limiter: &Limiter, keys: &[String], decisions: usize) -> usize {
    let mut allowed = 0;
    for i in 0..decisions {
        allowed += usize::from(limiter.check(&keys[i % keys.len()]).allowed);
    }
    allowed
}
