//! Calendar windows on Redis: the caller sends the boundaries of the
//! periods around its now, the script decides in the period that holds the
//! clock it reads. The same decisions as in memory, with functions and
//! with scripts, alone and beside a rate, and on the server's own clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tollgate::calendar::{Calendar, Period};
use tollgate::{Limit, Limiter, MemoryBackend, Operation, Policy, Strategy};
use tollgate_redis::RedisBackend;

use crate::differential::Harness;

/// 2026-01-01T00:00:00Z in nanoseconds.
const START: u64 = 1_767_225_600_000_000_000;

fn calendars() -> Vec<Calendar> {
    vec![
        Calendar::new(Period::Month, "Europe/Berlin", Some("2026-01-15T09:00:00")).unwrap(),
        Calendar::new(Period::Day, "America/New_York", Some("2026-03-08T02:30:00")).unwrap(),
        Calendar::new(Period::Week, "UTC", None).unwrap(),
        Calendar::new(
            Period::Quarter,
            "Australia/Lord_Howe",
            Some("2026-02-28T02:15:00"),
        )
        .unwrap(),
        Calendar::new(Period::Year, "Pacific/Apia", Some("2024-02-29T00:00:00")).unwrap(),
    ]
}

/// A fixed sequence of (step in seconds, key, cost): steps from a second to
/// two weeks, so that each trace crosses many boundaries.
fn trace(seed: u64) -> Vec<(u64, usize, u64)> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..150)
        .map(|_| {
            let step = match next() % 6 {
                0..=2 => next() % 60,
                3 | 4 => next() % 86_400,
                _ => next() % 1_209_600,
            };
            (step, (next() % 3) as usize, next() % 5)
        })
        .collect()
}

fn decide_as_in_memory(h: &Harness, policies: &[Policy]) {
    for (p, &policy) in policies.iter().enumerate() {
        h.clock.set_nanos(START);
        let redis = h.limiter(policy);
        let memory = Limiter::builder()
            .policy(policy)
            .clock(h.clock.clone())
            .build()
            .unwrap();
        let mut now = START;
        for (i, (step, key, cost)) in trace(p as u64 + 1).into_iter().enumerate() {
            // Whole seconds: the microseconds Redis counts lose nothing.
            now += step * 1_000_000_000;
            h.clock.set_nanos(now);
            let key = format!("k{key}");
            let expected = memory.check_n(&key, cost);
            let got = h.rt.block_on(redis.allow_n(&key, cost)).unwrap();
            assert_eq!(got, expected, "request {i} of {policy}");
        }
    }
}

fn policies() -> Vec<Policy> {
    let mut policies: Vec<Policy> = calendars()
        .into_iter()
        .map(|c| Limit::per_calendar(4, c).unwrap().into())
        .collect();
    // Beside a rate: one compound decision, keys in one hash slot.
    policies.push(
        Policy::compound([
            Limit::per_calendar(6, calendars()[0]).unwrap(),
            Limit::new(Strategy::TokenBucket, 2, Duration::from_secs(3_600)).unwrap(),
        ])
        .unwrap(),
    );
    policies
}

#[test]
fn calendar_windows_decide_as_in_memory_with_functions() {
    decide_as_in_memory(&Harness::new(), &policies());
}

#[test]
fn calendar_windows_decide_as_in_memory_with_scripts() {
    decide_as_in_memory(&Harness::with_scripts(), &policies());
}

#[test]
fn refunds_and_penalties_count_in_the_period() {
    let h = Harness::new();
    h.clock.set_nanos(START);
    let day = Calendar::new(Period::Day, "UTC", None).unwrap();
    let policy = Limit::per_calendar(10, day).unwrap().into();
    let redis = h.limiter(policy);
    // The compound layout, its tail naming the calendar.
    let keys = crate::support::bound(&h.backend, "case", "", &policy).state_keys(b"k");
    let key = String::from_utf8(keys[0].clone()).unwrap();
    assert!(
        key.ends_with(":{:k}:fixed_window:day@2001-01-01T00%3A00%3A00@UTC"),
        "{key}"
    );
    h.rt.block_on(redis.allow_n("k", 6)).unwrap();
    h.rt.block_on(redis.operate("k", Operation::Refund(4))).unwrap();
    assert_eq!(h.rt.block_on(redis.allow_n("k", 0)).unwrap().remaining, 8);
    h.rt.block_on(redis.operate("k", Operation::Penalty(5))).unwrap();
    let peek = h.rt.block_on(redis.allow_n("k", 0)).unwrap();
    assert_eq!(peek.remaining, 3);
    // Midnight UTC is a day after START: the state expires with it.
    assert_eq!(peek.reset, Duration::from_secs(86_400));
}

#[test]
fn the_server_clock_decides_a_calendar_window() {
    let h = Harness::new();
    let backend = h.rt.block_on(RedisBackend::builder().connect(h.url())).unwrap();
    let day = Calendar::new(Period::Day, "UTC", None).unwrap();
    let limiter = Limiter::builder()
        .backend(backend)
        .policy(Limit::per_calendar(3, day).unwrap().into())
        .key_prefix("server-clock")
        .build()
        .unwrap();
    assert!(h.rt.block_on(limiter.allow_n("k", 3)).unwrap().allowed);
    let denied = h.rt.block_on(limiter.allow("k")).unwrap();
    assert!(!denied.allowed);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let to_midnight = Duration::from_secs(86_400 - now.as_secs() % 86_400);
    let retry = denied.retry_after.expect("the next day admits it");
    // The server's clock and this process's read the same machine's time.
    let gap = retry.abs_diff(to_midnight);
    assert!(gap < Duration::from_secs(2), "{retry:?} against {to_midnight:?}");
}

/// Random instants over ten years, and the second before each one's
/// period ends and the boundary itself, in eight zones (DST both ways, a
/// 30-minute DST, midnight changes, a skipped day, half-hour offsets) and
/// every period: Redis decides each as memory does, and memory's periods
/// are the model's (`calendar::tests` in tollgate). A key per instant, so
/// that each key's three decisions (admitted twice in the period, once in
/// the next) test the period's bounds. The years are 2027 to 2037: keys
/// expire at their period's end on the server's clock, which must not
/// have passed it.
/// `TOLLGATE_CALENDAR_INSTANTS` instants per zone and period, 50 unless
/// set (a campaign: `TOLLGATE_CALENDAR_INSTANTS=100000 cargo test --release
/// -p tollgate-redis --test integration calendar::random_instants`).
#[test]
fn random_instants_over_ten_years_decide_as_in_memory_in_every_zone_and_period() {
    const ZONES: [&str; 8] = [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "America/Santiago",
        "Pacific/Apia",
        "Asia/Kolkata",
        "America/St_Johns",
    ];
    const PERIODS: [Period; 5] = [
        Period::Day,
        Period::Week,
        Period::Month,
        Period::Quarter,
        Period::Year,
    ];
    /// 2027-01-01T00:00:00Z and ten years on, in seconds.
    const FROM: u64 = 1_798_761_600;
    const SPAN: u64 = 10 * 365 * 86_400;
    let count: u64 = std::env::var("TOLLGATE_CALENDAR_INSTANTS").map_or(50, |n| n.parse().unwrap());
    let h = Harness::new();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut checked = 0u64;
    for zone in ZONES {
        for period in PERIODS {
            let calendar = Calendar::new(period, zone, None).unwrap();
            let policy: Policy = Limit::per_calendar(3, calendar).unwrap().into();
            let redis = h.limiter(policy);
            // Reclaiming off: the clock jumps back years between keys, and a
            // sweep that read a later time would delete a key set since
            // (MemoryBackend::reclaim).
            let memory = Limiter::builder()
                .backend(MemoryBackend::new().clock(h.clock.clone()).reclaim(false))
                .policy(policy)
                .clock(h.clock.clone())
                .build()
                .unwrap();
            for i in 0..count {
                let key = format!("k{i}");
                let at = FROM + next() % SPAN;
                let (_, end) = calendar.period_at(UNIX_EPOCH + Duration::from_secs(at));
                let end = end.duration_since(UNIX_EPOCH).unwrap().as_secs();
                for secs in [at, end - 1, end] {
                    h.clock.set_nanos(secs * 1_000_000_000);
                    let expected = memory.check(&key);
                    let got = h.rt.block_on(redis.allow(&key)).unwrap_or_else(|err| {
                        panic!("{period:?} in {zone} at {secs} s (from {at} s): {err}")
                    });
                    assert_eq!(got, expected, "{period:?} in {zone} at {secs} s");
                    checked += 1;
                }
            }
        }
    }
    eprintln!("{checked} decisions on Redis as in memory");
}
