//! One background thread per process that sweeps expired state out of every
//! live in-memory table, so memory follows the number of active keys even
//! when no further requests arrive.
//!
//! Tables register a weak reference; a dropped table is forgotten at the next
//! pass. The thread starts with the first table and sleeps between passes. A
//! pass only touches shards whose earliest expiry has passed. Sweeps shrink
//! tables that have emptied; once they have freed several megabytes, the
//! janitor also asks the allocator to hand free memory back (see
//! [`trim`]), so the process's resident memory follows the active keys too.

use std::sync::{Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use super::{reclaim, trim};

/// The default interval between background sweeps of expired state.
pub(crate) const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Something the janitor can sweep.
pub(crate) trait Sweep: Send + Sync {
    /// Removes expired entries; returns the approximate bytes freed.
    fn sweep(&self) -> usize;
}

struct Registered {
    table: Weak<dyn Sweep>,
    every: Duration,
    next: Instant,
}

/// The longest the janitor sleeps before looking for due tables again.
const MAX_NAP: Duration = Duration::from_millis(50);

/// Once sweeps have freed this much table memory, the janitor asks the
/// allocator to return its free memory to the operating system.
const TRIM_AFTER: usize = 8 << 20;

fn registry() -> &'static Mutex<Vec<Registered>> {
    static REGISTRY: OnceLock<Mutex<Vec<Registered>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        std::thread::Builder::new()
            .name("tollgate-janitor".into())
            .spawn(run)
            .expect("spawning the tollgate janitor thread");
        Mutex::new(Vec::new())
    })
}

/// Asks the janitor to sweep `table` every `every`.
pub(crate) fn register(table: Weak<dyn Sweep>, every: Duration) {
    let mut tables = registry().lock().unwrap_or_else(PoisonError::into_inner);
    tables.push(Registered {
        table,
        every,
        next: Instant::now() + every,
    });
}

fn run() {
    let mut nap = MAX_NAP;
    let mut freed = 0;
    loop {
        std::thread::sleep(nap);
        let now = Instant::now();
        let due: Vec<_> = {
            let mut tables = registry().lock().unwrap_or_else(PoisonError::into_inner);
            tables.retain(|r| r.table.strong_count() > 0);
            let due = tables
                .iter_mut()
                .filter(|r| r.next <= now)
                .map(|r| {
                    r.next = now + r.every;
                    r.table.clone()
                })
                .collect();
            let soonest = tables.iter().map(|r| r.next).min();
            nap = soonest.map_or(MAX_NAP, |t| t.saturating_duration_since(now).min(MAX_NAP));
            due
        };
        for table in due.iter().filter_map(Weak::upgrade) {
            freed += table.sweep();
        }
        // Memory retired while decisions were reading it, now unread.
        reclaim::collect();
        if freed >= TRIM_AFTER {
            freed = 0;
            trim::release_free_memory();
        }
    }
}
