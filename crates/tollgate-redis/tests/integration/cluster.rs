//! Redis Cluster: three primaries started and joined by the test; keys spread
//! over all of them, and shared limits stay exact.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use support::cluster::Cluster;
use support::{cli, RedisServer};
use tollgate::{Limiter, Strategy};
use tollgate_redis::RedisBackend;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_decisions_spread_over_primaries_and_stay_exact() {
    let cluster = Cluster::start(3, 0, 2_000);
    let urls = cluster.urls();
    // The test is about exactness, not latency: 1,440 tasks at once on a
    // loaded 2-core machine can keep a decision waiting past the default
    // 200 ms timeout, so allow far more.
    let builder = || RedisBackend::builder().timeout(Duration::from_secs(10));
    let mut backends = Vec::new();
    // Each backend knows a different single seed; they find the others.
    for url in &urls {
        let backend = builder().connect_cluster(&[url]).await.unwrap();
        assert!(backend.is_cluster());
        backends.push(backend);
    }
    backends.push(builder().connect_cluster(&urls).await.unwrap());

    for strategy in Strategy::ALL {
        let limiters: Vec<_> = backends
            .iter()
            .map(|backend| {
                Arc::new(
                    Limiter::builder()
                        .backend(backend.clone())
                        .strategy(strategy)
                        .limit(10)
                        .window(Duration::from_secs(3_600))
                        .build()
                        .unwrap(),
                )
            })
            .collect();
        // 24 keys; every limiter runs 3 tasks per key of 5 requests each:
        // 60 requests per key for a limit of 10.
        let mut tasks = Vec::new();
        for key in 0..24 {
            for limiter in &limiters {
                for _ in 0..3 {
                    let limiter = limiter.clone();
                    tasks.push(tokio::spawn(async move {
                        let mut admitted = 0;
                        for _ in 0..5 {
                            if limiter.allow(format!("user-{key}")).await.unwrap().allowed {
                                admitted += 1;
                            }
                        }
                        (key, admitted)
                    }));
                }
            }
        }
        let mut per_key = [0u32; 24];
        for task in tasks {
            let (key, admitted) = task.await.unwrap();
            per_key[key] += admitted;
        }
        assert_eq!(per_key, [10; 24], "{strategy}");
    }

    // The keys landed on every primary.
    for node in &cluster.nodes {
        let keys: u64 = node.cli(&["DBSIZE"]).parse().unwrap();
        assert!(keys > 0, "no key on the primary at port {}", node.port());
    }

    // Keys with one hash tag share a slot, so they share a primary.
    let limiter = Limiter::builder()
        .backend(backends[0].clone())
        .strategy(Strategy::TokenBucket)
        .limit(1)
        .window(Duration::from_secs(3_600))
        .build()
        .unwrap();
    assert!(limiter.allow("{tenant-7}:alice").await.unwrap().allowed);
    assert!(limiter.allow("{tenant-7}:bob").await.unwrap().allowed);
    assert!(!limiter.allow("{tenant-7}:bob").await.unwrap().allowed);
    let holders: Vec<u16> = cluster
        .nodes
        .iter()
        .filter(|n| n.cli(&["EXISTS", "tollgate::token_bucket:{tenant-7}:alice"]) == "1")
        .map(RedisServer::port)
        .collect();
    assert_eq!(holders.len(), 1);
    assert_eq!(
        cli(holders[0], &["EXISTS", "tollgate::token_bucket:{tenant-7}:bob"]),
        "1"
    );
}
