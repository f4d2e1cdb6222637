//! In-memory backend against `governor`'s keyed limiter, same workloads, same
//! run. Both use their default clocks (system time for tollgate, quanta for
//! governor) and seeded hashers.
//!
//! `cargo bench -p tollgate --bench in_memory`
//!
//! Before the timings it prints the live heap bytes per active key for each
//! strategy and for governor, measured with a counting allocator.
//!
//! With `IN_MEMORY_CALLS=N` and the name of a `lists_keys_1024` case as the
//! only argument, it makes N decisions of that case and nothing else, for
//! an instruction counter (see `count`).
//!
//! With `IN_MEMORY_SCALING=R` (and optionally a part of a workload's name
//! as an argument: `IN_MEMORY_SCALING=41 cargo bench -p tollgate --bench
//! in_memory -- distinct`) it runs only the two-thread workloads, as R
//! back-to-back pairs of a one-thread and a two-thread run, and prints the
//! median, lowest and highest speed-up of the pairs (see `paired_scaling`):
//! on a machine whose speed drifts, a ratio taken within each pair is
//! steadier than one between two criterion measurements.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use governor::{Quota, RateLimiter};
use tollgate::{KeyList, Limit, Limiter, LimiterBuilder, MemoryBackend, Policy, Strategy};

use tollgate_test_support::counting_alloc::{live, Counting};

#[path = "support/cpu.rs"]
mod cpu;
use cpu::pin_to_cpu;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

type Governor = governor::DefaultKeyedRateLimiter<String>;

/// A limiter that admits everything the benchmarks throw at it.
fn open_limiter(strategy: Strategy) -> Limiter {
    Limiter::builder()
        .strategy(strategy)
        .limit(1_000_000_000)
        .window(Duration::from_secs(1))
        .build()
        .expect("valid policy")
}

fn open_governor() -> Governor {
    RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX))
}

/// A limiter that denies everything after the first request per key.
fn closed_limiter(strategy: Strategy) -> Limiter {
    Limiter::builder()
        .strategy(strategy)
        .limit(1)
        .window(Duration::from_secs(3_600))
        .build()
        .expect("valid policy")
}

fn closed_governor() -> Governor {
    RateLimiter::keyed(Quota::per_hour(NonZeroU32::MIN))
}

fn keys(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255))
        .collect()
}

/// One decision per iteration, cycling through `keys`.
fn single_thread(c: &mut Criterion, group_name: &str, keys: &[String], open: bool) {
    let mut group = c.benchmark_group(group_name);
    for strategy in Strategy::ALL {
        let limiter = if open {
            open_limiter(strategy)
        } else {
            closed_limiter(strategy)
        };
        for k in keys {
            limiter.check(k);
        }
        group.bench_function(BenchmarkId::new("tollgate", strategy), |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % keys.len();
                black_box(limiter.check(&keys[i]).allowed)
            })
        });
    }
    let gov = if open { open_governor() } else { closed_governor() };
    for k in keys {
        let _ = gov.check_key(k);
    }
    group.bench_function(BenchmarkId::new("governor", "gcra"), |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(gov.check_key(&keys[i]).is_ok())
        })
    });
    group.finish();
}

/// A compound policy of a per-second burst cap (token bucket) and a
/// per-hour sustained cap (sliding window) against each of them alone, and
/// two limits of one strategy, on 1,024 keys, all admitted: the cost of
/// deciding two limits as one step.
fn compound(c: &mut Criterion) {
    let keys = keys(1_024);
    let burst = Limit::new(Strategy::TokenBucket, 1_000_000_000, Duration::from_secs(1)).expect("valid");
    let hourly =
        Limit::new(Strategy::SlidingWindow, 1_000_000_000, Duration::from_secs(3_600)).expect("valid");
    let hourly_bucket =
        Limit::new(Strategy::TokenBucket, 1_000_000_000, Duration::from_secs(3_600)).expect("valid");
    let burst_window =
        Limit::new(Strategy::SlidingWindow, 1_000_000_000, Duration::from_secs(1)).expect("valid");
    let mut group = c.benchmark_group("compound_keys_1024");
    for (name, policy) in [
        ("token_bucket", Policy::from(burst)),
        ("sliding_window", Policy::from(hourly)),
        (
            "token_bucket+sliding_window",
            Policy::compound([burst, hourly]).expect("valid"),
        ),
        (
            "token_bucket+token_bucket",
            Policy::compound([burst, hourly_bucket]).expect("valid"),
        ),
        (
            "sliding_window+sliding_window",
            Policy::compound([burst_window, hourly]).expect("valid"),
        ),
    ] {
        let limiter = Limiter::builder().policy(policy).build().expect("valid policy");
        decisions(&mut group, name, &limiter, &keys);
    }
    group.finish();
}

/// Case `name` of `group`: one decision of `limiter` per iteration, cycling
/// through `keys`, each decided once before.
fn decisions(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    limiter: &Limiter,
    keys: &[String],
) {
    for k in keys {
        limiter.check(k);
    }
    group.bench_function(BenchmarkId::new("tollgate", name), |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(limiter.check(&keys[i]).allowed)
        })
    });
}

/// `n` keys that are not IP addresses (`client-0`, `client-1`, ...).
fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("client-{i}")).collect()
}

/// A case of [`lists`]: its name, its limiter and the keys it cycles
/// through.
type ListCase = (&'static str, Limiter, Vec<String>);

/// Exempt keys, denied keys and shadow mode against plain decisions, on
/// 1,024 keys (token bucket): a listed or shadow decision should cost no
/// more than a normal one, and a list should not slow down the keys it
/// does not hold. `closed` cases deny every measured request.
fn list_cases() -> Vec<ListCase> {
    let ips = keys(1_024);
    let names = names(1_024);
    let list = |entries: &[String]| KeyList::parse("bench", entries).expect("valid list");
    let open = || {
        Limiter::builder()
            .strategy(Strategy::TokenBucket)
            .limit(1_000_000_000)
            .window(Duration::from_secs(1))
    };
    let closed = || {
        Limiter::builder()
            .strategy(Strategy::TokenBucket)
            .limit(1)
            .window(Duration::from_secs(3_600))
    };
    let others = || list(&["health-checker".to_owned(), "batch-job".to_owned()]);
    let elsewhere = || list(&["192.0.2.0/24".to_owned(), "2001:db8::/32".to_owned()]);
    let cases: Vec<(&'static str, LimiterBuilder<MemoryBackend>, &Vec<String>)> = vec![
        ("plain, ip keys", open(), &ips),
        ("plain, name keys", open(), &names),
        (
            "not listed, exact lists, name keys",
            open().exempt(others()).deny(others()),
            &names,
        ),
        (
            "not listed, cidr lists, ip keys",
            open().exempt(elsewhere()).deny(elsewhere()),
            &ips,
        ),
        (
            "not listed, cidr lists, name keys",
            open().exempt(elsewhere()).deny(elsewhere()),
            &names,
        ),
        ("exempt, exact, name keys", open().exempt(list(&names)), &names),
        (
            "exempt, cidr, ip keys",
            open().exempt(list(&["10.0.0.0/8".to_owned()])),
            &ips,
        ),
        ("denied list, exact, name keys", open().deny(list(&names)), &names),
        ("shadow, admitted, ip keys", open().shadow(true), &ips),
        ("closed, denied, ip keys", closed(), &ips),
        ("closed, shadow denied, ip keys", closed().shadow(true), &ips),
    ];
    cases
        .into_iter()
        .map(|(name, builder, keys)| (name, builder.build().expect("valid limiter"), keys.clone()))
        .collect()
}

fn lists(c: &mut Criterion) {
    let mut group = c.benchmark_group("lists_keys_1024");
    for (name, limiter, keys) in list_cases() {
        decisions(&mut group, name, &limiter, &keys);
    }
    group.finish();
}

/// Makes `calls` decisions of the [`lists`] case `name`, outside criterion,
/// for an instruction counter such as callgrind, which other work on the
/// machine does not disturb: the cost of a decision is the difference of
/// two counts over the difference of their `calls`.
fn count(name: &str, calls: usize) {
    let (_, limiter, keys) = list_cases()
        .into_iter()
        .find(|(case, ..)| *case == name)
        .unwrap_or_else(|| panic!("no case {name:?}"));
    for k in &keys {
        limiter.check(k);
    }
    for i in 0..calls {
        black_box(limiter.check(&keys[i % keys.len()]).allowed);
    }
}

/// One decision by worker `t` on a key, for any limiter.
type Decide = Arc<dyn Fn(usize, &String) + Send + Sync>;

/// Long-lived worker threads, as a server's: worker `t` always decides on
/// key set `t`. With disjoint sets each key is decided on (and was first
/// inserted) by one thread, as with connections pinned to worker threads;
/// with one pool in two orders every key is decided on both.
struct Workers {
    jobs: Vec<std::sync::mpsc::Sender<Job>>,
}

/// A round for a worker: how many decisions, how, and the barrier that
/// starts and the one that ends the round.
type Job = (u64, Decide, Arc<Barrier>, Arc<Barrier>);

impl Workers {
    /// Two workers on `keys[0]` and `keys[1]`.
    fn new(keys: &Arc<Vec<Vec<String>>>) -> Self {
        let jobs = (0..keys.len())
            .map(|t| {
                let (tx, rx) = std::sync::mpsc::channel::<Job>();
                let keys = keys.clone();
                std::thread::spawn(move || {
                    pin_to_cpu(t);
                    let own = &keys[t];
                    for (iters, decide, start, end) in rx {
                        start.wait();
                        for i in 0..iters as usize {
                            decide(t, &own[i % own.len()]);
                        }
                        end.wait();
                    }
                });
                tx
            })
            .collect();
        Self { jobs }
    }

    /// Has the first `threads` workers make `iters` decisions each on their
    /// own keys; returns the wall time until all have finished.
    fn run(&self, threads: usize, iters: u64, decide: &Decide) -> Duration {
        self.run_on(0..threads, iters, decide)
    }

    /// Has the workers of `which` make `iters` decisions each on their own
    /// keys; returns the wall time until all have finished.
    fn run_on(&self, which: std::ops::Range<usize>, iters: u64, decide: &Decide) -> Duration {
        let threads = which.len();
        let (start, end) = (
            Arc::new(Barrier::new(threads + 1)),
            Arc::new(Barrier::new(threads + 1)),
        );
        for job in &self.jobs[which] {
            job.send((iters, decide.clone(), start.clone(), end.clone()))
                .expect("worker alive");
        }
        start.wait();
        let started = Instant::now();
        end.wait();
        started.elapsed()
    }
}

/// Wall time for `iters` decisions per thread with one and with two threads
/// on disjoint key sets, on long-lived worker threads pinned to cores:
/// equal times mean perfect scaling (2x throughput), so the speed-up of two
/// threads is `2 × time(1) / time(2)`. Beside one shared limiter, each
/// worker on a limiter of its own (token bucket) shows what the machine
/// gives when the threads share nothing. Three key
/// sets: one key per thread (each thread's key stays in its core's cache),
/// 1,024 keys per thread (every shard visited by both threads, the state
/// still in cache) and 100,000 keys per thread (most lookups miss the cache).
///
/// Then the pattern of a server, whose workers each take any client's
/// requests: both threads decide on one pool of 2,048 keys, each in its own
/// order, so every key is decided by both cores in turn.
fn two_threads(c: &mut Criterion) {
    for (name, keys) in scaling_workloads() {
        scaling(c, &name, keys);
    }
}

/// The two-thread workloads: a name and the key set of each worker.
fn scaling_workloads() -> Vec<(String, Vec<Vec<String>>)> {
    let mut workloads: Vec<_> = [1, 1_024, 100_000]
        .into_iter()
        .map(|per_thread| {
            let all = keys(2 * per_thread);
            let keys = vec![all[..per_thread].to_vec(), all[per_thread..].to_vec()];
            (format!("threads_distinct_keys_{per_thread}"), keys)
        })
        .collect();
    const POOL: usize = 2_048;
    let pool = keys(POOL);
    // Thread 0 walks the pool in order, thread 1 by an odd stride (a
    // permutation of the power-of-two pool) from its middle.
    let strided = (0..POOL)
        .map(|i| pool[(i * 1_031 + POOL / 2) % POOL].clone())
        .collect();
    workloads.push((format!("threads_shared_keys_{POOL}"), vec![pool, strided]));
    workloads
}

/// The limiters of a scaling group, each as a decision of worker `t`: each
/// strategy, the reference of a limiter per thread (token bucket) and
/// governor.
fn scaling_cases() -> Vec<(String, Decide)> {
    let mut cases: Vec<(String, Decide)> = Strategy::ALL
        .into_iter()
        .map(|strategy| {
            let l = open_limiter(strategy);
            let decide: Decide = Arc::new(move |_, k| {
                black_box(l.check(k).allowed);
            });
            (format!("tollgate/{strategy}"), decide)
        })
        .collect();
    // The reference for scaling: each worker on a limiter of its own, so
    // that the two share no memory at all.
    let own: [Limiter; 2] = [0, 1].map(|_| open_limiter(Strategy::TokenBucket));
    cases.push((
        "tollgate/token_bucket, a limiter per thread".into(),
        Arc::new(move |t, k| {
            black_box(own[t].check(k).allowed);
        }),
    ));
    let g = open_governor();
    cases.push((
        "governor/gcra".into(),
        Arc::new(move |_, k| {
            black_box(g.check_key(k).is_ok());
        }),
    ));
    cases
}

/// One scaling group: each case with one and two workers, worker `t`
/// deciding on `keys[t]` in order.
fn scaling(c: &mut Criterion, name: &str, keys: Vec<Vec<String>>) {
    let mut group = c.benchmark_group(name);
    let workers = Workers::new(&Arc::new(keys));
    for (case, decide) in scaling_cases() {
        for threads in [1, 2] {
            group.bench_function(BenchmarkId::new(&case, threads), |b| {
                b.iter_custom(|iters| workers.run(threads, iters, &decide))
            });
        }
    }
    group.finish();
}

/// The speed-up of two threads, `2 × time(1) / time(2)`, from `rounds`
/// pairs of runs taken back to back (a one-thread run of 100,000
/// decisions, by each worker in turn, then a two-thread one, each after an
/// untimed pass over the keys), for every workload and case; prints the median of the pairs' ratios with the
/// lowest and highest, and the median time per decision of one thread. A
/// first two-thread pass inserts every key, each by the worker that
/// decides on it.
fn paired_scaling(rounds: usize, only: &str) {
    const DECISIONS: u64 = 100_000;
    println!(
        "two threads against one, median of {rounds} pairs (lowest-highest), one thread's ns per decision:"
    );
    for (name, keys) in scaling_workloads()
        .into_iter()
        .filter(|(name, _)| name.contains(only))
    {
        let per_thread = keys[0].len() as u64;
        let workers = Workers::new(&Arc::new(keys));
        for (case, decide) in scaling_cases() {
            workers.run(2, per_thread, &decide);
            let mut ratios = Vec::with_capacity(rounds);
            let mut one = Vec::with_capacity(rounds);
            let warm_up = per_thread.min(DECISIONS);
            for round in 0..rounds {
                let alone = round % 2;
                // Each timed run follows an untimed pass over the keys in
                // the same arrangement, so that it starts where the caches
                // of a steady run are, not where the other arrangement
                // left them (lines dirty in the other core's cache).
                workers.run_on(alone..alone + 1, warm_up, &decide);
                let t1 = workers.run_on(alone..alone + 1, DECISIONS, &decide);
                workers.run(2, warm_up, &decide);
                let t2 = workers.run(2, DECISIONS, &decide);
                ratios.push(2.0 * t1.as_secs_f64() / t2.as_secs_f64());
                one.push(t1.as_secs_f64() * 1e9 / DECISIONS as f64);
            }
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let ns = median(&mut one);
            let r = median(&mut ratios);
            println!(
                "  {name}/{case:<45} {r:>5.2}x ({:.2}-{:.2})  {ns:>6.1} ns",
                ratios[0],
                ratios[rounds - 1]
            );
        }
    }
}

/// Live heap bytes per active key with 100,000 keys.
fn memory_per_key() {
    const N: usize = 100_000;
    let names = keys(N);
    let measure = |fill: &dyn Fn() -> Box<dyn std::any::Any>| {
        let before = live();
        let kept = fill();
        let bytes = live() - before;
        drop(kept);
        bytes as f64 / N as f64
    };
    println!("memory per active key ({N} keys, live heap bytes incl. key storage; inserted by one thread / half each by two):");
    for strategy in Strategy::ALL {
        let per_key = |threads: usize| {
            measure(&|| {
                // A long window keeps every key's state alive while measured.
                let limiter = Limiter::builder()
                    .strategy(strategy)
                    .limit(1_000)
                    .window(Duration::from_secs(3_600))
                    .build()
                    .expect("valid policy");
                // Threads alive together insert into distinct lanes.
                std::thread::scope(|s| {
                    for part in names.chunks(N / threads) {
                        let limiter = &limiter;
                        s.spawn(move || {
                            for k in part {
                                black_box(limiter.check(k));
                            }
                        });
                    }
                });
                Box::new(limiter)
            })
        };
        println!(
            "  tollgate/{strategy:<15} {:>6.1} B / {:>6.1} B",
            per_key(1),
            per_key(2)
        );
    }
    let per_key = measure(&|| {
        let gov: Governor = RateLimiter::keyed(Quota::per_hour(NonZeroU32::new(1_000).expect("non-zero")));
        for k in &names {
            let _ = gov.check_key(k);
        }
        Box::new(gov)
    });
    println!("  governor/gcra            {per_key:>6.1} B");
}

fn main() {
    // `IN_MEMORY_CALLS=N in_memory CASE`: the counting mode.
    if let Ok(calls) = std::env::var("IN_MEMORY_CALLS") {
        let calls = calls.parse().expect("IN_MEMORY_CALLS is a count");
        let name = std::env::args().nth(1).expect("the case to run");
        count(&name, calls);
        return;
    }
    if let Ok(rounds) = std::env::var("IN_MEMORY_SCALING") {
        let rounds = rounds.parse().expect("IN_MEMORY_SCALING is a count of pairs");
        // `cargo bench` adds `--bench` to the arguments.
        let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
        paired_scaling(rounds, &only.unwrap_or_default());
        return;
    }
    memory_per_key();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
        .configure_from_args();
    single_thread(&mut c, "hot_key", &keys(1), true);
    single_thread(&mut c, "keys_1024", &keys(1_024), true);
    single_thread(&mut c, "keys_100000", &keys(100_000), true);
    single_thread(&mut c, "denied", &keys(1_024), false);
    two_threads(&mut c);
    compound(&mut c);
    lists(&mut c);
    c.final_summary();
}
