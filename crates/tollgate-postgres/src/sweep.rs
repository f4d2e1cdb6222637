//! The sweep: a task that deletes rows whose state has expired, in small
//! batches, so that keys no decision touches again do not stay. It takes
//! no lock on the table: each batch skips the rows a decision holds.

use std::time::Duration;

use deadpool_postgres::Pool;

/// The most rows one statement of the sweep deletes.
pub(crate) const BATCH: i32 = 1_000;

/// Starts the sweep of `schema` on `pool` every `every`, on the current
/// Tokio runtime; it ends when the pool's last other handle is gone.
pub(crate) fn start(pool: &Pool, schema: &str, every: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let pool = pool.weak();
    let sql = format!("SELECT {schema}.sweep({BATCH})");
    runtime.spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(pool) = pool.upgrade() else {
                return;
            };
            sweep_once(&pool, &sql).await;
        }
    });
}

/// Deletes expired rows batch by batch until a batch comes back short; a
/// failure ends this round (the next tries again).
async fn sweep_once(pool: &Pool, sql: &str) {
    let Ok(client) = pool.get().await else {
        return;
    };
    loop {
        match client.query_one(sql, &[]).await.map(|row| row.get::<_, i32>(0)) {
            Ok(gone) if gone >= BATCH => tokio::task::yield_now().await,
            _ => return,
        }
    }
}
