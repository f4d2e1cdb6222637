//! Awaited requests timed in a loop of futures, as a task that decides in
//! a loop runs them (shared by the `acquire` and `permits` benches).

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

/// Runs `request` `iters` times, over `keys` in turn, in tasks of one
/// `block_on` on `rt` per 1,024 requests (so the runtime's own cost is
/// spread out); the time it took.
pub fn in_tasks<'k, F, T>(
    rt: &Runtime,
    keys: &'k [String],
    iters: u64,
    request: impl Fn(&'k str) -> F,
) -> Duration
where
    F: Future<Output = T>,
{
    let started = Instant::now();
    let mut left = iters;
    while left > 0 {
        let batch = left.min(1_024);
        rt.block_on(async {
            for key in &keys[..batch as usize] {
                std::hint::black_box(request(key).await);
            }
        });
        left -= batch;
    }
    started.elapsed()
}
