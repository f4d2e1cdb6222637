//! Loom models of the in-memory table: loom runs each model once for every
//! interleaving of its threads (up to a bound on preemptions), with the
//! table's atomics, mutexes and key cells replaced by loom's (see
//! [`super::sync`]), and reports a data race, a read of a value the memory
//! model does not allow, or a failed assertion, with the interleaving.
//!
//! Built only with `--cfg tollgate_loom`; `.ci/loom` runs them:
//!
//! ```text
//! RUSTFLAGS="--cfg tollgate_loom" cargo test --release -p tollgate --lib -- loom_models
//! ```
//!
//! `LOOM_MAX_PREEMPTIONS` raises the bound (each model sets its own when it
//! is not set), for a longer, deeper run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use loom::thread;

use super::reclaim;
use super::table::Table;
use crate::clock::{ClockHandle, ManualClock};
use crate::strategy::{Algorithm, FixedWindow, Rate, SlidingWindow, TokenBucket};

/// The clock's reading when a model starts.
const START: Duration = Duration::from_secs(1_000);

/// Runs `model` in every interleaving with at most `preemptions`
/// preemptions (unless `LOOM_MAX_PREEMPTIONS` says otherwise), and prints
/// how many executions that took (shown with `--nocapture`).
///
/// Loom prunes interleavings it judges equivalent, and its pruning is known
/// to skip some that are not (tokio-rs/loom#166 and #392): a thread whose
/// earlier steps touched the same atomics as the other thread's can be
/// left unpreempted where it matters. The models therefore yield between a
/// thread's steps (`thread::yield_now`), which makes loom run the other
/// thread there; without the yield in the first model, a control byte
/// published with a relaxed store goes unreported.
fn check(name: &str, preemptions: usize, model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(preemptions);
    }
    let executions = Arc::new(AtomicUsize::new(0));
    let counted = executions.clone();
    let started = Instant::now();
    builder.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        model();
    });
    println!(
        "{name}: {} executions, at most {} preemptions, {:.1} s",
        executions.load(Ordering::Relaxed),
        builder.preemption_bound.unwrap_or(preemptions),
        started.elapsed().as_secs_f64()
    );
}

/// A table of one shard with `lanes` lanes, whose keys hash the same way in
/// every execution (loom replays executions, so they must be deterministic).
fn table<A: Algorithm<State: super::cell::Stored>>(
    rate: Rate,
    clock: &ManualClock,
    lanes: usize,
) -> Table<A> {
    Table::new(
        rate,
        ClockHandle::of(clock.clone()),
        (1, lanes),
        true,
        ahash::RandomState::with_seeds(1, 2, 3, 4),
    )
}

/// Checks, at the end of an execution, that everything retired in it was
/// freed once its threads had finished.
fn assert_all_freed() {
    reclaim::collect();
    assert_eq!(reclaim::pending(), 0, "retired memory left unfreed");
}

/// Insertion into a slot array by two threads. Each thread inserts a key
/// of its own (into the array of its own lane, under the shard's mutex)
/// and then looks up the other's key without the mutex, while the other
/// may be inserting it: the lookup finds nothing, or the whole key with the
/// state it was inserted with. Loom checks that the key bytes it compares
/// were written before the control byte it saw (they are in loom's
/// `UnsafeCell`), that the array it probes was made before its pointer was
/// published, and that the state it reads is not an older value of the
/// cell. Once both threads are done, both keys are found.
#[test]
fn loom_a_lookup_sees_an_inserted_key_whole_or_not_at_all() {
    check("insert and lookup", 6, || {
        let clock = ManualClock::new(START);
        let rate = Rate::new(10, 1_000_000_000);
        let table = Arc::new(table::<TokenBucket>(rate, &clock, 2));
        let now = table.now();
        let inserted = TokenBucket::decide(&rate, None, now, 1).1;
        assert!(inserted.is_some());
        let threads: Vec<_> = [(b"key a", b"key b"), (b"key b", b"key a")]
            .into_iter()
            .map(|(own, other)| {
                let table = table.clone();
                thread::spawn(move || {
                    assert!(table.apply(&rate, own, 1).allowed);
                    // Lets the other thread run here: loom's search alone
                    // misses some interleavings (see `check`).
                    thread::yield_now();
                    let seen = table.find_unlocked_state(other);
                    assert!(seen.is_none() || seen == inserted, "a torn state: {seen:?}");
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(table.find_unlocked_state(b"key a"), inserted);
        assert_eq!(table.find_unlocked_state(b"key b"), inserted);
        assert_eq!(table.len(), 2);
        assert_all_freed();
    });
}

/// A lane's slot array replaced under a read section. A reader decides on
/// a key of a full array without the mutex while a writer inserts another
/// key, which makes the writer build a larger array, move the keys to it
/// (holding each cell for good), publish it and retire the old one, and
/// then collect retired memory as the janitor does. The old array must not
/// be freed while the reader may still use it: loom reports a free that is
/// not ordered after every read of the array (freeing counts as a write of
/// its control bytes, keys and cells). The reader's decision is charged
/// exactly once, on whichever array it met.
#[test]
fn loom_a_slot_array_is_not_freed_under_a_read_section() {
    check("lookup and rebuild", 6, || {
        const LIMIT: u64 = 100;
        let clock = ManualClock::new(START);
        let rate = Rate::new(LIMIT, 1_000_000_000);
        let table = Arc::new(table::<TokenBucket>(rate, &clock, 1));
        // 7 keys fill an array of 8 slots: the next insert rebuilds it.
        for i in 0..7 {
            assert!(table.apply(&rate, format!("key {i}").as_bytes(), 1).allowed);
        }
        let reader = {
            let table = table.clone();
            thread::spawn(move || {
                let outcome = table.apply(&rate, b"key 0", 1);
                assert!(outcome.allowed);
                assert_eq!(outcome.remaining, LIMIT - 2, "a charge lost or doubled");
            })
        };
        let writer = {
            let table = table.clone();
            thread::spawn(move || {
                assert!(table.apply(&rate, b"key 7", 1).allowed);
                thread::yield_now();
                reclaim::collect();
            })
        };
        reader.join().unwrap();
        writer.join().unwrap();
        assert_eq!(table.len(), 8);
        assert_eq!(table.apply(&rate, b"key 0", 0).remaining, LIMIT - 2);
        assert_all_freed();
    });
}

/// A key's state updated while a writer deletes its slot. A key charged to
/// its limit (1 or 2 requests per second) has expired when two decisions
/// on it arrive at the same instant: one from a thread that decides at once
/// (lock-free, on the cell it found), the other from a thread that first
/// sweeps the shard, which holds the expired cell for good, deletes the
/// slot and frees the emptied array. In every interleaving exactly `limit`
/// of the two are admitted, and a further request at that instant is
/// denied: a decision made on a deleted slot would be lost (the further
/// request admitted), two made on one state would both pass a limit of 1,
/// and one made on a stale reading of a window's count (the old window's
/// `limit`) would be denied with a limit of 2. The freed array waits for
/// the first thread's read section.
fn decisions_racing_a_sweep_are_never_lost<A: Algorithm<State: super::cell::Stored> + 'static>(limit: u64) {
    let name = format!("{} limit {limit}", std::any::type_name::<A>());
    check(&name, 4, move || {
        let clock = ManualClock::new(START);
        let rate = Rate::new(limit, 1_000_000_000);
        let table = Arc::new(table::<A>(rate, &clock, 2));
        for _ in 0..limit {
            assert!(table.apply(&rate, b"key", 1).allowed);
        }
        // Expired, and past the tolerance sweeps give the clock.
        clock.advance(Duration::from_secs(5));
        let decider = {
            let table = table.clone();
            thread::spawn(move || table.apply(&rate, b"key", 1).allowed)
        };
        let sweeper = {
            let table = table.clone();
            thread::spawn(move || {
                table.sweep();
                thread::yield_now();
                table.apply(&rate, b"key", 1).allowed
            })
        };
        let admitted = [decider.join().unwrap(), sweeper.join().unwrap()];
        let count = admitted.iter().filter(|&&a| a).count() as u64;
        assert_eq!(count, limit, "admitted: {admitted:?}");
        assert_eq!(table.len(), 1);
        assert!(
            !table.apply(&rate, b"key", 1).allowed,
            "an admitted request was not charged"
        );
        assert_all_freed();
    });
}

#[test]
fn loom_a_gcra_decision_racing_a_sweep_is_never_lost() {
    decisions_racing_a_sweep_are_never_lost::<TokenBucket>(1);
    decisions_racing_a_sweep_are_never_lost::<TokenBucket>(2);
}

#[test]
fn loom_a_fixed_window_decision_racing_a_sweep_is_never_lost() {
    decisions_racing_a_sweep_are_never_lost::<FixedWindow>(1);
    decisions_racing_a_sweep_are_never_lost::<FixedWindow>(2);
}

#[test]
fn loom_a_sliding_window_decision_racing_a_sweep_is_never_lost() {
    decisions_racing_a_sweep_are_never_lost::<SlidingWindow>(1);
    decisions_racing_a_sweep_are_never_lost::<SlidingWindow>(2);
}
