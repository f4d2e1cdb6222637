//! Many keys in both orders from many tasks: no deadlock, no error, and
//! every fixed window exact; and the sweep deleting only expired rows, of
//! state and of lessees.

use std::sync::Arc;
use std::time::Duration;

use tollgate::protection::Lease;
use tollgate::{Limit, Limiter, Policy, Strategy};
use tollgate_postgres::PostgresBackend;

use crate::support::TestDatabase;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compound_keys_in_both_orders_never_deadlock_and_stay_exact() {
    let db = TestDatabase::create().await;
    let backend = PostgresBackend::builder(db.url())
        .pool_size(16)
        .timeout(Duration::from_secs(10));
    let backend = backend.connect().await.unwrap();
    // Two compound policies whose rows sort in opposite orders for the
    // same keys: a minute window first in one, a second window in the other.
    let minute = Limit::new(Strategy::FixedWindow, 200, Duration::from_secs(3600)).unwrap();
    let second = Limit::new(Strategy::FixedWindow, 100_000, Duration::from_secs(3599)).unwrap();
    let limiters: Vec<Arc<Limiter<PostgresBackend>>> = [vec![minute, second], vec![second, minute]]
        .into_iter()
        .map(|limits| {
            Arc::new(
                Limiter::builder()
                    .backend(backend.clone())
                    .policy(Policy::compound(limits).unwrap())
                    .build()
                    .unwrap(),
            )
        })
        .collect();
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let limiter = limiters[t % 2].clone();
            tokio::spawn(async move {
                let mut admitted = 0u64;
                for i in 0..60 {
                    let key = format!("key-{}", (t * 7 + i) % 4);
                    if limiter.allow(&key).await.expect("no error, no deadlock").allowed {
                        admitted += 1;
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    // Both policies count the same two rows per key (their keys name the
    // resource, the key, the strategy and the window): 4 keys × 200.
    assert_eq!(admitted, 800);
}

#[tokio::test]
async fn the_sweep_deletes_expired_rows_and_keeps_the_others() {
    let db = TestDatabase::create().await;
    // The decisions' backend does not sweep, so that every row is there
    // when counted; another instance sweeps after.
    let backend = PostgresBackend::builder(db.url())
        .sweep_interval(None)
        .connect()
        .await
        .unwrap();
    let limiter = |window| {
        Limiter::builder()
            .backend(backend.clone())
            .policy(Policy::new(Strategy::TokenBucket, 10, window).unwrap())
            .key_prefix(format!("w{}", window.as_millis()))
            .build()
            .unwrap()
    };
    let short = limiter(Duration::from_millis(50));
    let long = limiter(Duration::from_secs(3600));
    for i in 0..50 {
        assert!(short.allow(format!("k{i}")).await.unwrap().allowed);
        assert!(long.allow(format!("k{i}")).await.unwrap().allowed);
    }
    // Processes leasing keys for half a second and for a minute: a key's
    // second request asks for a lease, which counts its lessee.
    let leasing = |age| {
        Limiter::builder()
            .backend(backend.clone())
            .policy(Policy::new(Strategy::FixedWindow, 100, Duration::from_secs(3600)).unwrap())
            .key_prefix(format!("lease{}", Duration::as_millis(&age)))
            .lease(Lease::new(8, age))
            .build()
            .unwrap()
    };
    for lessee in [
        leasing(Duration::from_millis(500)),
        leasing(Duration::from_secs(60)),
    ] {
        for i in 0..5 {
            for _ in 0..2 {
                assert!(lessee.allow(format!("k{i}")).await.unwrap().allowed);
            }
        }
    }
    let client = db.client().await;
    let count = |sql: &'static str| {
        let client = &client;
        async move { client.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(count("SELECT count(*) FROM tollgate.state").await, 110);
    assert_eq!(count("SELECT count(*) FROM tollgate.lessees").await, 10);
    let _sweeper = PostgresBackend::builder(db.url())
        .sweep_interval(Some(Duration::from_millis(100)))
        .connect()
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while count("SELECT count(*) FROM tollgate.state").await > 60
        || count("SELECT count(*) FROM tollgate.lessees").await > 5
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sweep left expired rows"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        count("SELECT count(*) FROM tollgate.state WHERE key LIKE '%w3600000%'").await,
        50
    );
    assert_eq!(
        count("SELECT count(*) FROM tollgate.lessees WHERE key LIKE '%lease60000%'").await,
        5,
        "the lessees of a minute stay"
    );
}
