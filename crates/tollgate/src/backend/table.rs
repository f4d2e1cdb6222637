//! A sharded hash table of per-key strategy state whose decisions on known
//! keys take no lock and write nothing but the key's own state.
//!
//! Each shard is a slot array ([`Slots`]) behind an atomic pointer, a lower
//! bound of its entries' expiries, and a mutex for writers, padded to its
//! own cache lines. Keys are hashed with a randomly seeded `ahash`, so
//! clients cannot aim many keys at one shard or one probe chain.
//!
//! A decision on a key the shard holds (the common case) runs without the
//! mutex: inside a read section ([`reclaim::pin`], which writes only the
//! thread's own record) it finds the key's slot and runs the pure strategy
//! function on the slot's cell, updating it in place ([`StateCell::update`]:
//! a compare-and-swap for GCRA, the cell's own lock for the windows). Two
//! decisions on the same key serialise on that cell; decisions on different
//! keys share nothing they write, so they run in parallel on any number of
//! cores. Everything else takes the shard's mutex: a new key (insert), a
//! decision whose state becomes absent (delete), a cell a writer holds.
//!
//! Writers never move or free memory in place: a deleted slot stays deleted
//! until the shard builds a new slot array (it grew, shrank or ran out of
//! empty slots), which holds every cell it moves for good so late updates
//! fail and retry, and retires the old array and deleted keys' heap blocks
//! to [`reclaim`], which frees them once no lookup can still see them.
//!
//! Expired state is reclaimed in two ways, neither needing a call from the
//! user: a shard that grows to twice its size after its last sweep sweeps
//! itself before inserting (amortised O(1) per insert), and the background
//! janitor sweeps shards whose earliest expiry has passed.
//!
//! The tables of a compound policy are used by compound decisions only,
//! which hold the key's cell in every table, in the policy's order, for the
//! whole decision. On keys every table holds they do it without a lock
//! ([`Table::try_hold`], one read section for all tables); otherwise, or
//! when a cell stays busy, they take the shard's mutex of every table in
//! the same order ([`Table::lock_shard_of`]) and hold the cells under it.
//! Lock-free holders only try for a bounded time and then let go of what
//! they hold, so the two paths cannot deadlock. The tables of a
//! single-limit policy are used only by [`Table::apply`].

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::cell::{Holding, StateCell, Stored};
use super::reclaim;
use super::slots::{buckets_for, Slots};
use super::stored_key::StoredKey;
use crate::clock::ClockHandle;
use crate::strategy::{clamp_time, Algorithm, Outcome, Rate};

/// Shards never sweep themselves below this many entries.
const MIN_SWEEP_LEN: usize = 64;

/// Sweeps only delete state that expired at least this long ago, so a clock
/// stepping back by up to this much can never bring back budget that deleted
/// state had used.
pub(crate) const CLOCK_STEP_TOLERANCE: u64 = 1_000_000_000;

/// The cell type of a strategy's state.
pub(crate) type CellOf<A> = <<A as Algorithm>::State as Stored>::Cell;

/// What only the holder of a shard's mutex reads and writes.
struct Writer {
    /// Full slots.
    len: usize,
    /// Full and deleted slots.
    occupied: usize,
    /// Sweep before inserting once the shard holds this many entries.
    sweep_len: usize,
}

#[repr(align(128))]
struct Shard<C> {
    /// The current slot array (null: none). Replaced only by the holder of
    /// `writer`; read by lock-free decisions inside a read section.
    slots: AtomicPtr<Slots<C>>,
    /// No entry of this shard expires before this tick.
    earliest_expiry: AtomicU64,
    writer: Mutex<Writer>,
}

/// A shard whose mutex this thread holds.
struct ShardLock<'a, C> {
    shard: &'a Shard<C>,
    writer: MutexGuard<'a, Writer>,
}

impl<'a, C: StateCell> ShardLock<'a, C> {
    fn new(shard: &'a Shard<C>) -> Self {
        // A panic while holding a shard cannot leave it half-written
        // (strategies are pure and slot arrays are published whole), so a
        // poisoned lock is still consistent.
        let writer = shard.writer.lock().unwrap_or_else(PoisonError::into_inner);
        Self { shard, writer }
    }

    /// The current slot array.
    fn slots(&self) -> Option<&Slots<C>> {
        // SAFETY: only the holder of the shard's mutex replaces and retires
        // the array, and it does so through `&mut self`, which this borrow
        // excludes.
        unsafe { self.shard.slots.load(Ordering::Acquire).as_ref() }
    }

    /// The index of `key`'s slot in the current array.
    fn find(&self, hash: u64, key: &[u8]) -> Option<usize> {
        self.slots()?.find(hash, key)
    }

    /// Deletes the full slot at `index`, whose cell the caller holds (for
    /// good now); its key's heap block is retired.
    fn remove(&mut self, index: usize) {
        let slots = self.slots().expect("a slot to remove");
        // SAFETY: this thread holds the shard's mutex and the slot is full;
        // its cell stays held, and the key's block is retired below.
        let key = unsafe { slots.erase(index) };
        self.writer.len -= 1;
        if key.owns_heap() {
            reclaim::retire(Box::new(key));
        }
    }
}

/// Retires the heap blocks of deleted keys (inline keys own nothing).
fn retire_keys(mut keys: Vec<StoredKey>) {
    keys.retain(StoredKey::owns_heap);
    if !keys.is_empty() {
        reclaim::retire(Box::new(keys));
    }
}

/// A sharded table holding the state of one strategy under one rate.
pub(crate) struct Table<A: Algorithm<State: Stored>> {
    shards: Box<[Shard<CellOf<A>>]>,
    shard_mask: usize,
    hasher: ahash::RandomState,
    rate: Rate,
    clock: ClockHandle,
    reclaim: bool,
}

impl<A: Algorithm<State: Stored>> Table<A> {
    /// A table of `shards` shards hashing keys with `hasher`. Tables that a
    /// compound decision locks together share one hasher, so a key falls in
    /// the same shard index of each.
    pub(crate) fn new(
        rate: Rate,
        clock: ClockHandle,
        shards: usize,
        reclaim: bool,
        hasher: ahash::RandomState,
    ) -> Self {
        let shards = shards.next_power_of_two().max(1);
        Self {
            shards: (0..shards)
                .map(|_| Shard {
                    slots: AtomicPtr::new(std::ptr::null_mut()),
                    earliest_expiry: AtomicU64::new(u64::MAX),
                    writer: Mutex::new(Writer {
                        len: 0,
                        occupied: 0,
                        sweep_len: MIN_SWEEP_LEN,
                    }),
                })
                .collect(),
            shard_mask: shards - 1,
            hasher,
            rate,
            clock,
            reclaim,
        }
    }

    #[cfg(test)]
    pub(crate) fn rate(&self) -> &Rate {
        &self.rate
    }

    /// The current clock reading in nanoseconds.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    /// The hasher of keys, shared by the tables a compound decision locks
    /// together.
    pub(crate) fn hasher(&self) -> &ahash::RandomState {
        &self.hasher
    }

    /// The hash of `key`, which picks both its shard and its slot.
    #[inline]
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard<CellOf<A>> {
        // The slot arrays use the low bits for the group and the top 7 for
        // tags.
        &self.shards[(hash >> 40) as usize & self.shard_mask]
    }

    /// Applies one request for `key` at the clock's current time: runs the
    /// strategy on the key's state and stores the state it returns.
    #[inline]
    pub(crate) fn apply(&self, rate: &Rate, key: &[u8], cost: u64) -> Outcome {
        // Read the clock first: the read overlaps hashing, and nothing waits
        // on it. Two threads racing on one key may then apply their
        // decisions out of timestamp order by the length of the race;
        // strategies treat such a step back as "no time passed".
        let now = self.clock.now_nanos();
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        if let Some(outcome) = self.apply_in_place(rate, shard, hash, key, now, cost) {
            return outcome;
        }
        self.apply_locked(rate, shard, hash, key, now, cost)
    }

    /// The decision under the shard's mutex: a new key, a state that
    /// becomes absent, or a cell held by a writer.
    #[cold]
    #[inline(never)]
    fn apply_locked(
        &self,
        rate: &Rate,
        shard: &Shard<CellOf<A>>,
        hash: u64,
        key: &[u8],
        now: u64,
        cost: u64,
    ) -> Outcome {
        let mut locked = ShardLock::new(shard);
        self.decide_locked(&mut locked, hash, key, now, |before| {
            A::decide(rate, before, now, cost)
        })
    }

    /// The decision on a key the shard holds, without its mutex; `None`
    /// when it must be made under the mutex.
    #[inline]
    fn apply_in_place(
        &self,
        rate: &Rate,
        shard: &Shard<CellOf<A>>,
        hash: u64,
        key: &[u8],
        now: u64,
        cost: u64,
    ) -> Option<Outcome> {
        let _section = reclaim::pin()?;
        // SAFETY: an array retired after the section began is not freed
        // before it ends (see `reclaim`); one retired before is not what
        // this load returns.
        let slots = unsafe { shard.slots.load(Ordering::Acquire).as_ref() }?;
        let slot = slots.slot(slots.find(hash, key)?);
        let (outcome, _) = slot.cell.update(|before| {
            let (outcome, after) = A::decide(rate, Some(before), now, cost);
            // No strategy moves a key's expiry back (a state after a
            // decision never expires before the one it replaces), so the
            // shard's earliest expiry stays a lower bound without a look.
            debug_assert!(
                after.is_none_or(|a| A::expires_at(rate, &a) >= A::expires_at(rate, &before)),
                "a decision moved a key's expiry back"
            );
            (outcome, after)
        })?;
        Some(outcome)
    }

    /// Lowers the shard's earliest expiry to `state`'s, if earlier.
    #[inline]
    fn note_expiry(&self, shard: &Shard<CellOf<A>>, state: &A::State) {
        let expiry = A::expires_at(&self.rate, state);
        if expiry < shard.earliest_expiry.load(Ordering::Relaxed) {
            shard.earliest_expiry.fetch_min(expiry, Ordering::Relaxed);
        }
    }

    /// Decides for `key` under the shard's mutex, holding the key's cell
    /// while `decide` runs: inserts, updates or deletes its state.
    fn decide_locked<R>(
        &self,
        locked: &mut ShardLock<'_, CellOf<A>>,
        hash: u64,
        key: &[u8],
        now: u64,
        decide: impl FnOnce(Option<A::State>) -> (R, Option<A::State>),
    ) -> R {
        if let Some(index) = locked.find(hash, key) {
            let cell = &locked.slots().expect("found in it").slot(index).cell;
            let before = cell.hold();
            let holding = Holding::new(cell, before);
            let (result, after) = decide(Some(before));
            holding.done();
            match after {
                Some(state) => {
                    cell.release(state);
                    self.note_expiry(locked.shard, &state);
                }
                None => locked.remove(index),
            }
            return result;
        }
        let (result, after) = decide(None);
        if let Some(state) = after {
            self.insert(locked, hash, key, state, now);
        }
        result
    }

    /// Inserts state for a key that holds none, sweeping the shard first
    /// when it has doubled since its last sweep, and building a larger (or
    /// a clean) slot array when the current one has no room.
    fn insert(
        &self,
        locked: &mut ShardLock<'_, CellOf<A>>,
        hash: u64,
        key: &[u8],
        state: A::State,
        now: u64,
    ) {
        if self.reclaim && locked.writer.len >= locked.writer.sweep_len {
            self.sweep_shard(locked, now);
        }
        let needed = locked.writer.len + 1;
        let occupied = locked.writer.occupied;
        let rebuild = match locked.slots() {
            Some(slots) if occupied < slots.capacity() => None,
            // Mostly deleted slots: a clean array of the same size.
            Some(slots) if needed <= slots.capacity() / 2 => Some(slots.buckets()),
            Some(slots) => Some(buckets_for(needed.max(slots.capacity() + 1))),
            None => Some(buckets_for(needed)),
        };
        if let Some(buckets) = rebuild {
            self.rebuild(locked, buckets);
        }
        self.note_expiry(locked.shard, &state);
        let slots = locked.slots().expect("a slot array with room");
        // SAFETY: this thread holds the shard's mutex, the key is absent
        // (looked up under the mutex), and the array has room.
        unsafe { slots.insert(hash, StoredKey::new(key), state) };
        locked.writer.len += 1;
        locked.writer.occupied += 1;
    }

    /// Moves the shard's entries to a new array of `buckets` slots (none
    /// when 0) and retires the old array; returns the bytes it freed.
    fn rebuild(&self, locked: &mut ShardLock<'_, CellOf<A>>, buckets: usize) -> usize {
        let new = (buckets > 0).then(|| Box::new(Slots::<CellOf<A>>::with_buckets(buckets)));
        let new_size = new.as_ref().map_or(0, |s| s.allocation_size());
        let old_ptr = locked.shard.slots.load(Ordering::Acquire);
        if let Some(old) = locked.slots() {
            for index in old.full() {
                // Held for good: a lock-free decision still on the old array
                // fails to update it and retries under the mutex.
                let state = old.slot(index).cell.hold();
                // SAFETY: this thread holds the shard's mutex, the slot is
                // full, and the old array is retired below, never to drop
                // or take its keys again.
                let key = unsafe { old.take_key(index) };
                let hash = self.hasher.hash_one(key.as_bytes());
                let new = new.as_ref().expect("room for the entries");
                // SAFETY: `new` is not published yet; keys are distinct;
                // it was sized for them.
                unsafe { new.insert(hash, key, state) };
            }
        }
        let old_size = locked.slots().map_or(0, Slots::allocation_size);
        let new_ptr = new.map_or(std::ptr::null_mut(), Box::into_raw);
        // Release: the new array's contents before its pointer.
        locked.shard.slots.store(new_ptr, Ordering::Release);
        locked.writer.occupied = locked.writer.len;
        if !old_ptr.is_null() {
            // SAFETY: the old array came from `Box::into_raw` and is no
            // longer reachable from the shard; lock-free decisions that
            // reached it before are waited for.
            unsafe { reclaim::retire_box(old_ptr) };
        }
        old_size.saturating_sub(new_size)
    }

    /// Locks the shard that holds keys of `hash`, for a decision that reads
    /// and writes several tables under one lock scope.
    pub(crate) fn lock_shard_of(&self, hash: u64) -> LockedShard<'_, A> {
        LockedShard {
            table: self,
            locked: ShardLock::new(self.shard(hash)),
            hash,
            held: None,
        }
    }

    /// Holds `key`'s cell without the shard's mutex, inside `section`, for
    /// a compound decision, and returns it with its state; `None` when the
    /// shard holds no state for the key or its cell stays busy (the
    /// decision then takes the locked path). The caller lets the cell go
    /// with [`Self::release_held`], or as it was with [`StateCell::release`].
    #[inline]
    pub(crate) fn try_hold<'s>(
        &'s self,
        _section: &'s reclaim::Section,
        hash: u64,
        key: &[u8],
    ) -> Option<(&'s CellOf<A>, A::State)> {
        let shard = self.shard(hash);
        // SAFETY: an array retired after the section began is not freed
        // before it ends, and the returned cell borrows the section.
        let slots = unsafe { shard.slots.load(Ordering::Acquire).as_ref() }?;
        let cell = &slots.slot(slots.find(hash, key)?).cell;
        Some((cell, cell.try_hold()?))
    }

    /// Stores `after` in a cell held by [`Self::try_hold`] for a key of
    /// `hash`, and lets it go.
    #[inline]
    pub(crate) fn release_held(&self, hash: u64, cell: &CellOf<A>, after: A::State) {
        cell.release(after);
        // A refund can move a key's expiry back: keep the shard's earliest
        // expiry a lower bound.
        self.note_expiry(self.shard(hash), &after);
    }

    /// Removes every entry that expired [`CLOCK_STEP_TOLERANCE`] before
    /// `now` and gives back memory when the shard has shrunk well below its
    /// capacity; returns the approximate bytes of table memory freed.
    ///
    /// The slot array shrinks once fewer than a quarter of its slots are
    /// used, to twice the entries left (and is freed when none are left):
    /// a shard that keeps its size between sweeps is never reallocated, and
    /// one must lose half its entries again before the next shrink.
    ///
    /// `now` is clamped like the strategies' clock readings: state a
    /// decision still counts as live is never deleted.
    fn sweep_shard(&self, locked: &mut ShardLock<'_, CellOf<A>>, now: u64) -> usize {
        let now = clamp_time(now).saturating_sub(CLOCK_STEP_TOLERANCE);
        let rate = &self.rate;
        let mut earliest = u64::MAX;
        let mut removed = Vec::new();
        let mut removed_count = 0;
        let Some(slots) = locked.slots() else {
            locked.shard.earliest_expiry.store(u64::MAX, Ordering::Relaxed);
            return 0;
        };
        let buckets = slots.buckets();
        for index in slots.full().collect::<Vec<_>>() {
            let cell = &slots.slot(index).cell;
            let mut expiry = A::expires_at(rate, &cell.load());
            if expiry <= now {
                // Decided again on the held state: a decision may have
                // renewed it since.
                let state = cell.hold();
                expiry = A::expires_at(rate, &state);
                if expiry <= now {
                    // SAFETY: this thread holds the shard's mutex, the slot
                    // is full, its cell stays held, and the key's block is
                    // retired below.
                    removed.push(unsafe { slots.erase(index) });
                    removed_count += 1;
                    continue;
                }
                cell.release(state);
            }
            earliest = earliest.min(expiry);
        }
        // `earliest` stays a lower bound: decisions only move expiries on.
        locked.shard.earliest_expiry.store(earliest, Ordering::Relaxed);
        retire_keys(removed);
        let len = locked.writer.len - removed_count;
        locked.writer.len = len;
        locked.writer.sweep_len = (len * 2).max(MIN_SWEEP_LEN);
        if len == 0 {
            return self.rebuild(locked, 0);
        }
        if buckets <= (len * 4).max(MIN_SWEEP_LEN) {
            return 0;
        }
        let target = buckets_for(len * 2);
        if target < buckets {
            self.rebuild(locked, target)
        } else {
            0
        }
    }

    /// Sweeps every shard whose earliest expiry has passed; returns the
    /// approximate bytes of table memory freed.
    pub(crate) fn sweep(&self) -> usize {
        let now = clamp_time(self.clock.now_nanos());
        let mut freed = 0;
        for shard in self.shards.iter() {
            let mut locked = ShardLock::new(shard);
            if shard
                .earliest_expiry
                .load(Ordering::Relaxed)
                .saturating_add(CLOCK_STEP_TOLERANCE)
                <= now
            {
                freed += self.sweep_shard(&mut locked, now);
            }
        }
        freed
    }

    /// The number of entries the slot arrays can hold before growing.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| ShardLock::new(shard).slots().map_or(0, Slots::capacity))
            .sum()
    }

    /// The number of keys with stored state.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| ShardLock::new(shard).writer.len)
            .sum()
    }
}

impl<A: Algorithm<State: Stored>> Drop for Table<A> {
    fn drop(&mut self) {
        for shard in self.shards.iter_mut() {
            let slots = *shard.slots.get_mut();
            if !slots.is_null() {
                // SAFETY: the array came from `Box::into_raw`; with `&mut
                // self` no decision can be using it; its full slots own
                // their keys (moved keys left with retired arrays).
                let mut slots = unsafe { Box::from_raw(slots) };
                // SAFETY: as above.
                unsafe { slots.drop_keys() };
            }
        }
    }
}

/// One table's shard, locked for a key's hash (see [`Table::lock_shard_of`]).
///
/// Only compound decisions lock shards this way, and only on their own
/// tables. [`Self::get`] holds the key's cell (lock-free compound decisions
/// hold cells too); [`Self::set`] stores the new state and lets it go. A
/// cell still held when the lock is dropped is released as it was.
pub(crate) struct LockedShard<'a, A: Algorithm<State: Stored>> {
    table: &'a Table<A>,
    locked: ShardLock<'a, CellOf<A>>,
    hash: u64,
    /// The slot index of the key's cell this thread holds, and its state.
    held: Option<(usize, A::State)>,
}

impl<A: Algorithm<State: Stored>> LockedShard<'_, A> {
    /// Holds `key`'s cell, waiting while a lock-free decision holds it, and
    /// returns its state (`None`: the shard holds none for `key`).
    pub(crate) fn get(&mut self, key: &[u8]) -> Option<A::State> {
        debug_assert!(self.held.is_none(), "one key per locked shard");
        let slots = self.locked.slots()?;
        let index = slots.find(self.hash, key)?;
        let state = slots.slot(index).cell.hold();
        self.held = Some((index, state));
        Some(state)
    }

    /// Stores `after` as the state of `key`, whose state [`Self::get`]
    /// returned under this same lock, and lets its cell go.
    pub(crate) fn set(&mut self, key: &[u8], after: Option<A::State>, now: u64) {
        let Some((index, _)) = self.held.take() else {
            if let Some(state) = after {
                self.table.insert(&mut self.locked, self.hash, key, state, now);
            }
            return;
        };
        match after {
            Some(state) => {
                let cell = &self.locked.slots().expect("held in it").slot(index).cell;
                cell.release(state);
                self.table.note_expiry(self.locked.shard, &state);
            }
            // The cell stays held for good: the slot is deleted.
            None => self.locked.remove(index),
        }
    }
}

impl<A: Algorithm<State: Stored>> Drop for LockedShard<'_, A> {
    fn drop(&mut self) {
        if let Some((index, state)) = self.held.take() {
            let cell = &self.locked.slots().expect("held in it").slot(index).cell;
            cell.release(state);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::strategy::{FixedWindow, SlidingWindow, TokenBucket};

    /// A table on `clock` that reclaims expired state.
    fn table_on<A: Algorithm<State: Stored>>(rate: Rate, clock: &ManualClock, shards: usize) -> Table<A> {
        Table::new(
            rate,
            ClockHandle::of(clock.clone()),
            shards,
            true,
            ahash::RandomState::new(),
        )
    }

    /// Two threads decide on the same known keys (lock-free, racing each
    /// other) while a third inserts new keys into the same shard, so its
    /// slot array is rebuilt under them again and again, and sweeps it. No
    /// charge may be lost: each key ends with exactly the units charged.
    fn no_update_is_lost_while_the_shard_is_rebuilt<A: Algorithm<State: Stored>>() {
        let (keys, rounds, churn) = if cfg!(miri) { (4, 6, 60) } else { (64, 400, 20_000) };
        const LIMIT: u64 = 1 << 40;
        let clock = ManualClock::new(Duration::from_secs(1_000));
        let rate = Rate::new(LIMIT, 3_600_000_000_000);
        let table = table_on::<A>(rate, &clock, 1);
        let key = |i: u64| format!("a key longer than fifteen bytes {i}");
        for i in 0..keys {
            table.apply(&table.rate().clone(), key(i).as_bytes(), 1);
        }
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..rounds {
                        for i in 0..keys {
                            assert!(table.apply(&table.rate().clone(), key(i).as_bytes(), 1).allowed);
                        }
                    }
                });
            }
            s.spawn(|| {
                for i in 0..churn {
                    table.apply(&table.rate().clone(), format!("churn {i}").as_bytes(), 1);
                    if i % 16 == 0 {
                        table.sweep();
                    }
                }
            });
        });
        for i in 0..keys {
            let remaining = table.apply(&table.rate().clone(), key(i).as_bytes(), 0).remaining;
            assert_eq!(LIMIT - remaining, 1 + 2 * rounds, "key {i}");
        }
        assert_eq!(table.len() as u64, keys + churn);
    }

    /// Keys are deleted (expired by sweeps, emptied by peeks) while other
    /// threads decide on them: decisions that lose the race retry under
    /// the lock, and every key's memory is given back in the end.
    fn keys_are_deleted_under_running_decisions<A: Algorithm<State: Stored>>() {
        let (keys, rounds) = if cfg!(miri) { (6, 8) } else { (200, 300) };
        let clock = ManualClock::new(Duration::from_secs(1_000));
        // Ten units per millisecond.
        let rate = Rate::new(10, 1_000_000);
        let table = table_on::<A>(rate, &clock, 2);
        let key = |i: u64| format!("a key longer than fifteen bytes {i}");
        std::thread::scope(|s| {
            for cost in [0, 1] {
                let table = &table;
                s.spawn(move || {
                    for _ in 0..rounds {
                        for i in 0..keys {
                            table.apply(&table.rate().clone(), key(i).as_bytes(), cost);
                        }
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..rounds {
                    clock.advance(Duration::from_millis(700));
                    table.sweep();
                }
            });
        });
        clock.advance(Duration::from_secs(5));
        table.sweep();
        assert_eq!((table.len(), table.capacity()), (0, 0));
    }

    #[test]
    fn keys_of_every_strategy_are_deleted_under_running_decisions() {
        keys_are_deleted_under_running_decisions::<TokenBucket>();
        keys_are_deleted_under_running_decisions::<FixedWindow>();
        keys_are_deleted_under_running_decisions::<SlidingWindow>();
    }

    #[test]
    fn no_update_of_any_strategy_is_lost_while_the_shard_is_rebuilt() {
        no_update_is_lost_while_the_shard_is_rebuilt::<TokenBucket>();
        no_update_is_lost_while_the_shard_is_rebuilt::<FixedWindow>();
        no_update_is_lost_while_the_shard_is_rebuilt::<SlidingWindow>();
    }

    #[test]
    #[cfg_attr(miri, ignore = "100,000 keys")]
    fn emptied_tables_shrink_and_steady_ones_keep_their_slots() {
        const SHARDS: usize = 4;
        let clock = ManualClock::new(Duration::from_secs(1_000));
        // One request per second per key: a key's state lasts one second.
        let rate = Rate::new(1, 1_000_000_000);
        let table = table_on::<TokenBucket>(rate, &clock, SHARDS);
        for i in 0..100_000u32 {
            table.apply(&table.rate().clone(), &i.to_le_bytes(), 1);
        }
        let full = table.capacity();
        assert!(full >= 100_000);

        // All but 1,000 keys expire (past the sweeps' clock-step tolerance).
        clock.advance(Duration::from_secs(3));
        for i in 0..1_000u32 {
            table.apply(&table.rate().clone(), &i.to_le_bytes(), 1);
        }
        let freed = table.sweep();
        assert_eq!(table.len(), 1_000);
        let shrunk = table.capacity();
        assert!(
            shrunk <= 4 * 1_000,
            "{shrunk} slots kept for 1,000 keys (from {full})"
        );
        assert!(
            freed
                >= (full - shrunk)
                    * std::mem::size_of::<super::super::slots::Slot<crate::backend::cell::TatCell>>()
        );

        // The same keys stay active: sweeps neither shrink nor reallocate.
        for _ in 0..3 {
            clock.advance(Duration::from_millis(999));
            for i in 0..1_000u32 {
                table.apply(&table.rate().clone(), &i.to_le_bytes(), 1);
            }
            assert_eq!(table.sweep(), 0);
            assert_eq!(table.capacity(), shrunk);
        }

        // Everything expires: the tables hold no slots at all.
        clock.advance(Duration::from_secs(3));
        assert!(table.sweep() > 0);
        assert_eq!((table.len(), table.capacity()), (0, 0));
    }
}
