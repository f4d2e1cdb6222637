//! Many limiters on one Redis: connections of their own, one limiter per
//! connection, and many tasks deciding on one key at once.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{Limiter, Policy};
use tollgate_redis::{RedisBackend, RedisBackendBuilder};

/// `n` backends from `builder`, each on its own connection to `url`.
///
/// Exactness, not latency, is what these tests check: a loaded machine
/// must not turn a slow answer into a failed decision, so the decision
/// timeout is 10 s.
pub async fn connect_many(builder: RedisBackendBuilder, url: &str, n: usize) -> Vec<RedisBackend> {
    let mut backends = Vec::new();
    for _ in 0..n {
        let backend = builder
            .clone()
            .timeout(Duration::from_secs(10))
            .connect(url)
            .await
            .unwrap();
        backends.push(backend);
    }
    backends
}

/// One limiter per backend, serving `policy` as `resource`.
pub fn limiters(
    backends: &[RedisBackend],
    policy: Policy,
    resource: &str,
) -> Vec<Arc<Limiter<RedisBackend>>> {
    backends
        .iter()
        .map(|backend| {
            Arc::new(
                Limiter::builder()
                    .backend(backend.clone())
                    .policy(policy)
                    .resource(resource)
                    .build()
                    .unwrap(),
            )
        })
        .collect()
}

/// 16 tasks per limiter, each making 8 requests of `cost` on `key`, all at
/// once; the units admitted.
pub async fn hammer(limiters: &[Arc<Limiter<RedisBackend>>], key: &str, cost: u64) -> u64 {
    let mut tasks = Vec::new();
    for limiter in limiters {
        for _ in 0..16 {
            let (limiter, key) = (limiter.clone(), key.to_owned());
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..8 {
                    if limiter.allow_n(&key, cost).await.unwrap().allowed {
                        admitted += cost;
                    }
                }
                admitted
            }));
        }
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    total
}
