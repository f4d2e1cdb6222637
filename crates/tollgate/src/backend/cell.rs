//! A strategy's state inside a table slot, in atomics, so that a decision
//! on a known key updates it in place without the shard's lock.
//!
//! - GCRA (token and leaky bucket) keeps one word, `tat`, and updates it with
//!   a compare-and-swap: lock-free, and a denied request writes nothing.
//! - The fixed and sliding windows keep two and three words. No portable
//!   atomic covers them, so the cell has a lock of its own: the top bit of
//!   the window start (a start is a clock reading, at most
//!   [`MAX_TICK`](crate::strategy::MAX_TICK) `< 2^63`). A decision holds it
//!   for one strategy call; it lives in the key's own slot, so it is only
//!   ever contended by decisions on the same key.
//!
//! Either way the pure strategy function is the only place a decision is
//! made: a cell only reads the state before it and stores the state after
//! it.
//!
//! A cell can also be *held* for good. A writer holding the shard's lock
//! does so before it moves a slot to a new slot array or deletes it, so that
//! a lock-free decision still looking at the old slot fails to update it and
//! retries under the shard's lock.

use std::marker::PhantomData;

use super::sync::{spin_loop, yield_now, AtomicU64, Ordering};
use crate::strategy::{FixedWindowState, GcraState, SlidingWindowState};

/// How long a lock-free decision spins on a window cell another decision
/// holds before it falls back to the shard's lock (where it waits).
#[cfg(not(tollgate_loom))]
const SPINS: u32 = 64;

/// Under loom each spin is a yield to the other threads: two are enough to
/// explore both a spin that succeeds and one that gives up.
#[cfg(tollgate_loom)]
const SPINS: u32 = 2;

/// A strategy state as a table slot holds it.
pub(crate) trait Stored: Copy + PartialEq + Send + Sync + 'static {
    /// The cell holding this state.
    type Cell: StateCell<State = Self>;
}

impl Stored for GcraState {
    type Cell = TatCell;
}

impl Stored for FixedWindowState {
    type Cell = WindowCell<2, FixedWindowState>;
}

impl Stored for SlidingWindowState {
    type Cell = WindowCell<3, SlidingWindowState>;
}

/// The operations on a slot's state.
pub(crate) trait StateCell: Send + Sync + Sized {
    /// The strategy state it holds.
    type State: Copy + PartialEq;

    /// The cell of a slot not yet used.
    fn vacant() -> Self;

    /// Sets the state of a cell no other thread can see yet.
    fn init(&self, state: Self::State);

    /// Replaces the state with what `decide` returns for it, atomically:
    /// returns `decide`'s result and the state stored. `decide` may run more
    /// than once when other decisions change the state meanwhile.
    ///
    /// `None` when the caller must decide under the shard's lock instead:
    /// the cell is held (moved, deleted, or busy for a while), or `decide`
    /// returns no state (deleting a key changes the table).
    fn update<R>(
        &self,
        decide: impl FnMut(Self::State) -> (R, Option<Self::State>),
    ) -> Option<(R, Self::State)>;

    /// Holds the cell, waiting while a lock-free decision holds it, and
    /// returns its state. Only for a writer holding the shard's lock, on a
    /// slot of the shard's current slot array (where no cell is held for
    /// good).
    fn hold(&self) -> Self::State;

    /// Stores `state` in a cell this thread holds and lets it go.
    fn release(&self, state: Self::State);

    /// The state, as one consistent reading. Same conditions as [`Self::hold`].
    fn load(&self) -> Self::State {
        let state = self.hold();
        self.release(state);
        state
    }

    /// Holds the cell if no one else does within a short spin, and returns
    /// its state; the caller releases it with [`Self::release`]. For
    /// compound decisions, which hold one cell per limit outside the
    /// shards' locks: `None` (the cell is held for good, or busy) sends
    /// them to the locked path.
    fn try_hold(&self) -> Option<Self::State>;
}

/// A cell held while a strategy function runs: should the function panic,
/// the cell is released with the state it had, so the key is not locked for
/// good (strategies do not panic; this keeps a bug from hanging a key).
pub(crate) struct Holding<'a, C: StateCell> {
    cell: &'a C,
    before: C::State,
}

impl<'a, C: StateCell> Holding<'a, C> {
    /// Watches `cell`, held with state `before`.
    pub(crate) fn new(cell: &'a C, before: C::State) -> Self {
        Self { cell, before }
    }

    /// The function returned: the holder releases the cell (or keeps it).
    pub(crate) fn done(self) {
        std::mem::forget(self);
    }
}

impl<C: StateCell> Drop for Holding<'_, C> {
    fn drop(&mut self) {
        self.cell.release(self.before);
    }
}

/// GCRA's `tat` in one word.
///
/// 0 never holds a state (GCRA stores `tat > now >= 0`) and marks a vacant
/// cell; [`HELD`] marks a held one (a stored `tat` is below `2^63 + 2^62`).
pub(crate) struct TatCell(AtomicU64);

/// The value of a held [`TatCell`].
const HELD: u64 = u64::MAX;

impl StateCell for TatCell {
    type State = GcraState;

    fn vacant() -> Self {
        Self(AtomicU64::new(0))
    }

    fn init(&self, state: GcraState) {
        debug_assert!(state.tat != HELD);
        self.0.store(state.tat, Ordering::Relaxed);
    }

    #[inline]
    fn update<R>(
        &self,
        mut decide: impl FnMut(GcraState) -> (R, Option<GcraState>),
    ) -> Option<(R, GcraState)> {
        let mut tat = self.0.load(Ordering::Acquire);
        loop {
            if tat == HELD {
                return None;
            }
            let (result, next) = decide(GcraState { tat });
            let next = next?;
            // A denied request leaves `tat` as it was: nothing to write.
            if next.tat == tat {
                return Some((result, next));
            }
            debug_assert!(next.tat != HELD);
            match self
                .0
                .compare_exchange_weak(tat, next.tat, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some((result, next)),
                Err(current) => tat = current,
            }
        }
    }

    fn hold(&self) -> GcraState {
        // Only writers holding the shard's lock hold a cell of the current
        // slot array, so this never waits in practice.
        let mut spins = 0;
        loop {
            let tat = self.0.swap(HELD, Ordering::Acquire);
            if tat != HELD {
                return GcraState { tat };
            }
            backoff(&mut spins);
        }
    }

    fn release(&self, state: GcraState) {
        debug_assert!(state.tat != HELD);
        self.0.store(state.tat, Ordering::Release);
    }

    fn load(&self) -> GcraState {
        GcraState {
            tat: self.0.load(Ordering::Acquire),
        }
    }

    #[inline]
    fn try_hold(&self) -> Option<GcraState> {
        for _ in 0..SPINS {
            let tat = self.0.load(Ordering::Relaxed);
            if tat == HELD {
                spin_loop();
                continue;
            }
            if self
                .0
                .compare_exchange_weak(tat, HELD, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Some(GcraState { tat });
            }
        }
        None
    }
}

/// A window state as `N` words, the window start first.
pub(crate) trait Words<const N: usize>: Copy + PartialEq {
    /// The words, the start first.
    fn to_words(self) -> [u64; N];
    /// The state from its words.
    fn from_words(words: [u64; N]) -> Self;
}

impl Words<2> for FixedWindowState {
    fn to_words(self) -> [u64; 2] {
        [self.start, self.count]
    }
    fn from_words([start, count]: [u64; 2]) -> Self {
        Self { start, count }
    }
}

impl Words<3> for SlidingWindowState {
    fn to_words(self) -> [u64; 3] {
        [self.start, self.curr, self.prev]
    }
    fn from_words([start, curr, prev]: [u64; 3]) -> Self {
        Self { start, curr, prev }
    }
}

/// A window state in `N` words whose first word, the window start, carries
/// the cell's lock in its top bit.
pub(crate) struct WindowCell<const N: usize, S> {
    words: [AtomicU64; N],
    state: PhantomData<fn() -> S>,
}

/// The lock bit of a window cell's first word.
const LOCK: u64 = 1 << 63;

impl<const N: usize, S: Words<N>> WindowCell<N, S> {
    /// Takes the lock, trying up to `spins` times; returns the start.
    #[inline]
    fn try_lock(&self, spins: u32) -> Option<u64> {
        for _ in 0..spins {
            let start = self.words[0].load(Ordering::Relaxed);
            if start & LOCK == 0 {
                if self.words[0]
                    .compare_exchange_weak(start, start | LOCK, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return Some(start);
                }
            } else {
                spin_loop();
            }
        }
        None
    }

    /// The state under the lock, its start given.
    #[inline]
    fn read(&self, start: u64) -> S {
        let mut words = [start; N];
        for (word, atomic) in words.iter_mut().zip(&self.words).skip(1) {
            *word = atomic.load(Ordering::Relaxed);
        }
        S::from_words(words)
    }

    /// Stores `state` and unlocks.
    #[inline]
    fn write_unlock(&self, state: S) {
        let words = state.to_words();
        debug_assert!(words[0] & LOCK == 0, "a window start at or past 2^63");
        for (word, atomic) in words.iter().zip(&self.words).skip(1) {
            atomic.store(*word, Ordering::Relaxed);
        }
        self.words[0].store(words[0], Ordering::Release);
    }
}

impl<const N: usize, S: Words<N>> StateCell for WindowCell<N, S> {
    type State = S;

    fn vacant() -> Self {
        Self {
            words: std::array::from_fn(|_| AtomicU64::new(0)),
            state: PhantomData,
        }
    }

    fn init(&self, state: S) {
        for (word, atomic) in state.to_words().iter().zip(&self.words) {
            atomic.store(*word, Ordering::Relaxed);
        }
    }

    #[inline]
    fn update<R>(&self, mut decide: impl FnMut(S) -> (R, Option<S>)) -> Option<(R, S)> {
        let start = self.try_lock(SPINS)?;
        let before = self.read(start);
        let holding = Holding::new(self, before);
        let (result, next) = decide(before);
        holding.done();
        match next {
            Some(state) => {
                self.write_unlock(state);
                Some((result, state))
            }
            None => {
                self.words[0].store(start, Ordering::Release);
                None
            }
        }
    }

    fn hold(&self) -> S {
        let mut spins = 0;
        loop {
            if let Some(start) = self.try_lock(SPINS) {
                return self.read(start);
            }
            backoff(&mut spins);
        }
    }

    fn release(&self, state: S) {
        self.write_unlock(state);
    }

    #[inline]
    fn try_hold(&self) -> Option<S> {
        self.try_lock(SPINS).map(|start| self.read(start))
    }
}

/// Waits a little longer each time: spins first, then gives up the core
/// (the holder may have been preempted).
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 8 {
        spin_loop();
    } else {
        yield_now();
    }
}

/// Under loom, freeing a cell counts as a write of its words: loom then
/// reports a decision whose access to a freed slot array's cell is not
/// ordered before the free (see `Slots`).
#[cfg(tollgate_loom)]
impl Drop for TatCell {
    fn drop(&mut self) {
        // Unwinding from a failed model, outside loom's execution.
        if !std::thread::panicking() {
            self.0.with_mut(|_| ());
        }
    }
}

/// As for [`TatCell`].
#[cfg(tollgate_loom)]
impl<const N: usize, S> Drop for WindowCell<N, S> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        for word in &mut self.words {
            word.with_mut(|_| ());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An allowed request of one unit, shaped like a strategy's decision.
    fn bump_tat(s: GcraState) -> (bool, Option<GcraState>) {
        (true, Some(GcraState { tat: s.tat + 1 }))
    }

    #[test]
    fn a_held_tat_cell_refuses_updates_until_released() {
        let cell = TatCell::vacant();
        cell.init(GcraState { tat: 10 });
        assert_eq!(cell.update(bump_tat), Some((true, GcraState { tat: 11 })));
        let held = cell.hold();
        assert_eq!(held.tat, 11);
        assert_eq!(cell.update(bump_tat), None);
        cell.release(GcraState { tat: 20 });
        assert_eq!(cell.update(bump_tat).map(|(_, s)| s.tat), Some(21));
        // No state after the decision: decided again under the shard lock.
        assert_eq!(cell.update(|_| (false, None)), None);
        assert_eq!(cell.load().tat, 21);
        assert_eq!(cell.try_hold(), Some(GcraState { tat: 21 }));
        assert_eq!(cell.try_hold(), None, "a held cell is not held twice");
        assert_eq!(cell.update(bump_tat), None);
        cell.release(GcraState { tat: 21 });
    }

    #[test]
    fn a_held_window_cell_refuses_updates_until_released() {
        let cell = WindowCell::<3, SlidingWindowState>::vacant();
        let state = SlidingWindowState {
            start: (1 << 63) - 1,
            curr: 4,
            prev: 9,
        };
        cell.init(state);
        let bump = |s: SlidingWindowState| {
            (
                s.curr,
                Some(SlidingWindowState {
                    curr: s.curr + 1,
                    ..s
                }),
            )
        };
        assert_eq!(cell.update(bump).map(|(r, s)| (r, s.curr)), Some((4, 5)));
        let held = cell.hold();
        assert_eq!((held.start, held.curr, held.prev), (state.start, 5, 9));
        assert_eq!(cell.update(bump), None);
        cell.release(state);
        assert_eq!(cell.load(), state);
        assert_eq!(cell.update(|_| ((), None)), None);
        assert_eq!(
            cell.load(),
            state,
            "an update with no state after it changes nothing"
        );
        assert_eq!(cell.try_hold(), Some(state));
        assert_eq!(cell.try_hold(), None, "a held cell is not held twice");
        cell.release(state);
    }

    #[test]
    fn a_panicking_decision_leaves_the_cell_as_it_was() {
        let cell = WindowCell::<2, FixedWindowState>::vacant();
        let state = FixedWindowState { start: 5, count: 2 };
        cell.init(state);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cell.update(|_| -> ((), Option<FixedWindowState>) { panic!("a strategy bug") })
        }));
        assert!(panicked.is_err());
        assert_eq!(
            cell.update(|s| (s, Some(s))).map(|(before, _)| before),
            Some(state)
        );
    }

    #[test]
    fn concurrent_updates_of_one_cell_are_never_lost() {
        const THREADS: u64 = 4;
        const EACH: u64 = if cfg!(miri) { 50 } else { 20_000 };
        let tat = TatCell::vacant();
        tat.init(GcraState { tat: 1 });
        let window = WindowCell::<2, FixedWindowState>::vacant();
        window.init(FixedWindowState { start: 7, count: 0 });
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..EACH {
                        while tat.update(bump_tat).is_none() {}
                        let count = |w: FixedWindowState| {
                            (
                                (),
                                Some(FixedWindowState {
                                    count: w.count + 1,
                                    ..w
                                }),
                            )
                        };
                        while window.update(count).is_none() {}
                    }
                });
            }
        });
        assert_eq!(tat.load().tat, 1 + THREADS * EACH);
        assert_eq!(
            window.load(),
            FixedWindowState {
                start: 7,
                count: THREADS * EACH
            }
        );
    }
}
