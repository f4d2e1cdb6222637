//! `acquire` on a key that is admitted at once against `check`, in memory:
//! what awaiting admission costs when nobody waits.
//!
//! ```sh
//! cargo bench -p tollgate --bench acquire -- --warm-up-time 1 --measurement-time 3 --noplot
//! ```
//!
//! Both decide unit requests over 1,024 keys under a token bucket that
//! admits them all; `acquire` runs its future to completion on a
//! current-thread tokio runtime, one `block_on` per 1,024 decisions, so the
//! runtime's own cost is spread out as it is in a task that decides in a
//! loop.

use std::time::{Duration, Instant};

use criterion::Criterion;
use tollgate::{Limiter, Strategy};

fn keys() -> Vec<String> {
    (0..1_024).map(|i| format!("key-{i}")).collect()
}

fn limiter() -> Limiter {
    Limiter::builder()
        .strategy(Strategy::TokenBucket)
        .limit(1 << 40)
        .window(Duration::from_secs(1))
        .build()
        .unwrap()
}

#[path = "support/tasks.rs"]
mod tasks;
use tasks::in_tasks;

fn bench(c: &mut Criterion) {
    let keys = keys();
    let mut group = c.benchmark_group("acquire_admitted");
    let checking = &limiter();
    group.bench_function("check", |b| {
        b.iter_custom(|iters| {
            let started = Instant::now();
            for i in 0..iters {
                std::hint::black_box(checking.check(&keys[i as usize % keys.len()]));
            }
            started.elapsed()
        })
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    // `check` inside the same loop of futures as `acquire` below: what the
    // loop itself costs.
    group.bench_function("check_in_a_task", |b| {
        b.iter_custom(|iters| in_tasks(&rt, &keys, iters, |key| async move { checking.check(key) }))
    });
    let acquiring = &limiter();
    group.bench_function("acquire", |b| {
        b.iter_custom(|iters| {
            in_tasks(&rt, &keys, iters, |key| async move {
                acquiring.acquire(key).await.unwrap()
            })
        })
    });
    group.finish();
}

// `criterion_group!` defines an undocumented public function.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}

criterion::criterion_main!(group::benches);
