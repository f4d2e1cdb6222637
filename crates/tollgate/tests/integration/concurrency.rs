//! Same-key decisions are atomic: under contention exactly the limit is
//! admitted, never one more.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::backend::store::StoreBackend;
use tollgate::clock::ManualClock;
use tollgate::testing::MapStore;
use tollgate::{Limiter, Strategy};

const THREADS: usize = 8;
const PER_THREAD: u64 = 2_000;
const LIMIT: u64 = 5_000;

#[test]
fn threads_on_one_key_take_exactly_the_limit() {
    for strategy in Strategy::ALL {
        let limiter = Arc::new(
            Limiter::builder()
                .strategy(strategy)
                .limit(LIMIT)
                .window(Duration::from_secs(3_600))
                .clock(ManualClock::new(Duration::from_secs(1_000_000)))
                .build()
                .unwrap(),
        );
        let admitted = Arc::new(AtomicU64::new(0));
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (limiter, admitted) = (limiter.clone(), admitted.clone());
                s.spawn(move || {
                    for i in 0..PER_THREAD {
                        // Mix in other keys so shards are shared with the hot one.
                        let _ = limiter.check(format!("other-{t}-{i}"));
                        if limiter.check("hot").allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.load(Ordering::Relaxed), LIMIT, "{strategy}");
        assert_eq!(limiter.check_n("hot", 0).remaining, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_through_the_store_adapter_take_exactly_the_limit() {
    for strategy in Strategy::ALL {
        let clock = ManualClock::new(Duration::from_secs(1_000_000));
        let backend = StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone());
        let limiter = Arc::new(
            Limiter::builder()
                .strategy(strategy)
                .limit(300)
                .window(Duration::from_secs(3_600))
                .backend(backend)
                .build()
                .unwrap(),
        );
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let limiter = limiter.clone();
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0u64;
                for _ in 0..50 {
                    admitted += u64::from(limiter.allow("hot").await.unwrap().allowed);
                }
                admitted
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        assert_eq!(total, 300, "{strategy}");
    }
}
