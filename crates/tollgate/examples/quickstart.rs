//! The shortest useful program: one in-memory limiter, a few decisions.
//!
//! `cargo run -p tollgate --example quickstart`

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{Limiter, Limiters, Policy, Strategy};

fn main() -> Result<(), tollgate::Error> {
    // 5 requests per 10 seconds per client, smoothed across window boundaries.
    // A manual clock makes the output reproducible; omit `.clock(..)` to use
    // the system clock.
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let limiter = Limiter::builder()
        .strategy(Strategy::SlidingWindow)
        .limit(5)
        .window(Duration::from_secs(10))
        .clock(clock.clone())
        .build()?;

    for i in 1..=7 {
        let d = limiter.check("203.0.113.7");
        println!(
            "request {i}: allowed={} remaining={} reset={:?} retry_after={:?}",
            d.allowed, d.remaining, d.reset, d.retry_after
        );
    }
    clock.advance(Duration::from_secs(12));
    println!("12s later: allowed={}", limiter.check("203.0.113.7").allowed);

    // Per-resource policies: logins are scarcer than searches.
    let limiter = Limiters::builder()
        .clock(clock)
        .default_policy(Policy::new(
            Strategy::SlidingWindow,
            100,
            Duration::from_secs(60),
        )?)
        .resource(
            "login",
            Policy::new(Strategy::FixedWindow, 3, Duration::from_secs(60))?,
        )
        .resource(
            "search",
            Policy::new(Strategy::TokenBucket, 20, Duration::from_secs(1))?,
        )
        .build()?;
    for resource in ["login", "search", "profile"] {
        let d = limiter.limiter(resource).check("alice");
        println!("{resource}: {} of {} left", d.remaining, d.limit);
    }
    Ok(())
}
