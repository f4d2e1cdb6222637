//! One background thread per process that sweeps expired state out of every
//! live in-memory table, so memory follows the number of active keys even
//! when no further requests arrive.
//!
//! Tables register a weak reference; a dropped table is forgotten at the next
//! pass. The thread starts with the first table and sleeps between passes. A
//! pass only touches shards whose earliest expiry has passed.

use std::sync::{Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

/// Something the janitor can sweep.
pub(crate) trait Sweep: Send + Sync {
    /// Removes expired entries.
    fn sweep(&self);
}

struct Registered {
    table: Weak<dyn Sweep>,
    every: Duration,
    next: Instant,
}

/// The longest the janitor sleeps before looking for due tables again.
const MAX_NAP: Duration = Duration::from_millis(50);

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
            table.sweep();
        }
    }
}
