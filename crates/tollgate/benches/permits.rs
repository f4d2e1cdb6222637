//! A permit's acquire and its release, in memory, against one fixed-window
//! `check` of the same keys and against the anchor, a keyed map of
//! `tokio::sync::Semaphore`s (a read-locked map from key to an
//! `Arc<Semaphore>`, acquired and dropped): what a concurrency limit costs
//! a request.
//!
//! ```sh
//! cargo bench -p tollgate --bench permits -- --warm-up-time 1 --measurement-time 3 --noplot
//! ```
//!
//! All three take unit requests over 1,024 keys that always have room; the
//! two that await run in a current-thread tokio runtime, one `block_on`
//! per 1,024 requests, as `benches/acquire.rs` does.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use criterion::Criterion;
use tokio::sync::Semaphore;
use tollgate::{Limiter, Policy, Strategy};

fn keys() -> Vec<String> {
    (0..1_024).map(|i| format!("key-{i}")).collect()
}

#[path = "support/tasks.rs"]
mod tasks;
use tasks::in_tasks;

/// The anchor: a semaphore per key, found under a read lock.
struct SemaphoreMap(RwLock<HashMap<String, Arc<Semaphore>>>);

impl SemaphoreMap {
    fn new(keys: &[String], permits: usize) -> Self {
        let map = keys
            .iter()
            .map(|k| (k.clone(), Arc::new(Semaphore::new(permits))))
            .collect();
        Self(RwLock::new(map))
    }

    /// Acquires a permit of `key` and releases it.
    async fn acquire_release(&self, key: &str) -> bool {
        let semaphore = self.0.read().unwrap().get(key).cloned();
        let Some(semaphore) = semaphore else {
            return false;
        };
        let permit = semaphore.acquire_owned().await;
        permit.is_ok()
    }
}

fn bench(c: &mut Criterion) {
    let keys = keys();
    let mut group = c.benchmark_group("permits");
    let fixed = Limiter::builder()
        .strategy(Strategy::FixedWindow)
        .limit(1 << 40)
        .window(Duration::from_secs(3_600))
        .build()
        .unwrap();
    group.bench_function("fixed_window_check", |b| {
        b.iter_custom(|iters| {
            let started = Instant::now();
            for i in 0..iters {
                std::hint::black_box(fixed.check(&keys[i as usize % keys.len()]));
            }
            started.elapsed()
        })
    });
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let policy = Policy::new(Strategy::Concurrency, 1_000, Duration::from_secs(30)).unwrap();
    let permits = &Arc::new(Limiter::builder().policy(policy).build().unwrap());
    group.bench_function("acquire_release", |b| {
        b.iter_custom(|iters| {
            in_tasks(&rt, &keys, iters, |key| async move {
                let permit = permits.acquire_permit(key, 1).await.unwrap();
                permit.decision().allowed
            })
        })
    });
    let semaphores = &SemaphoreMap::new(&keys, 1_000);
    group.bench_function("semaphore_map", |b| {
        b.iter_custom(|iters| in_tasks(&rt, &keys, iters, |key| semaphores.acquire_release(key)))
    });
    group.finish();
}

// `criterion_group!` defines an undocumented public function.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}

criterion::criterion_main!(group::benches);
