//! A sharded hash table of per-key strategy state whose decisions on known
//! keys take no lock and write nothing but the key's own state.
//!
//! Each shard is a few slot arrays ([`Slots`], one per *lane*) behind
//! atomic pointers, a lower bound of its entries' expiries, and a mutex for
//! writers, padded to its own cache lines. Keys are hashed with a randomly
//! seeded `ahash`, so clients cannot aim many keys at one shard or one
//! probe chain.
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
//! Lanes keep the keys of different threads off each other's cache lines.
//! A thread inserts new keys into its own lane's array (the lane is its
//! [`reclaim::thread_index`], masked), and looks for a key in its own lane
//! first, then in the others. A key lives in one lane, chosen when it is
//! inserted, and only moves within it (rebuilds); the shard's one mutex
//! covers every lane, so two threads can never insert the same key twice.
//! Keys that stay with one thread (a server worker's connections, a
//! pinned worker's tenants) are then written by that thread's core only,
//! and its decisions never move a line the other cores use.
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

use std::sync::PoisonError;

use super::cell::{Holding, StateCell, Stored};
use super::reclaim;
use super::slots::{buckets_for, Slots};
use super::stored_key::StoredKey;
use super::sync::{AtomicPtr, AtomicU64, Mutex, MutexGuard, Ordering};
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

/// The most lanes (slot arrays) a shard has: a power of two.
pub(crate) const MAX_LANES: usize = 8;

/// The number of lanes for a process with `cores` cores: one per core, as
/// a power of two, at most [`MAX_LANES`].
pub(crate) fn lanes_for(cores: usize) -> usize {
    cores.clamp(1, MAX_LANES).next_power_of_two()
}

/// What only the holder of a shard's mutex reads and writes.
struct Writer {
    /// Sweep before inserting once the shard holds this many entries.
    sweep_len: usize,
}

#[repr(align(128))]
struct Shard<C> {
    /// Each lane's current slot array (null: none). Replaced only by the
    /// holder of `writer`; read by lock-free decisions inside a read
    /// section.
    lanes: [AtomicPtr<Slots<C>>; MAX_LANES],
    /// No entry of this shard expires before this tick.
    earliest_expiry: AtomicU64,
    writer: Mutex<Writer>,
}

/// A key's place in a shard: its lane and its slot in that lane's array.
#[derive(Clone, Copy)]
struct Place {
    lane: usize,
    index: usize,
}

/// A shard whose mutex this thread holds.
struct ShardLock<'a, C> {
    shard: &'a Shard<C>,
    writer: MutexGuard<'a, Writer>,
    /// The table's lane count.
    lanes: usize,
}

impl<'a, C: StateCell> ShardLock<'a, C> {
    fn new(shard: &'a Shard<C>, lanes: usize) -> Self {
        // A panic while holding a shard cannot leave it half-written
        // (strategies are pure and slot arrays are published whole), so a
        // poisoned lock is still consistent.
        let writer = shard.writer.lock().unwrap_or_else(PoisonError::into_inner);
        Self { shard, writer, lanes }
    }

    /// The current slot array of `lane`.
    fn slots(&self, lane: usize) -> Option<&Slots<C>> {
        // SAFETY: only the holder of the shard's mutex replaces and retires
        // the arrays, and it does so through `&mut self`, which this borrow
        // excludes.
        unsafe { self.shard.lanes[lane].load(Ordering::Acquire).as_ref() }
    }

    /// The slot array holding the key at `place`.
    fn slots_at(&self, place: Place) -> &Slots<C> {
        self.slots(place.lane).expect("a key's place is in a slot array")
    }

    /// The place of `key`'s slot, in whichever lane holds it.
    fn find(&self, hash: u64, key: &[u8]) -> Option<Place> {
        (0..self.lanes).find_map(|lane| {
            let index = self.slots(lane)?.find(hash, key)?;
            Some(Place { lane, index })
        })
    }

    /// The number of keys the shard holds, over all lanes.
    fn len(&self) -> usize {
        (0..self.lanes)
            .filter_map(|lane| self.slots(lane))
            .map(Slots::len)
            .sum()
    }

    /// Deletes the full slot at `place`, whose cell the caller holds (for
    /// good now); its key's heap block is retired.
    fn remove(&mut self, place: Place) {
        let slots = self.slots_at(place);
        // SAFETY: this thread holds the shard's mutex and the slot is full;
        // its cell stays held, and the key's block is retired below.
        let key = unsafe { slots.erase(place.index) };
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
    /// Lanes per shard, less one (a power of two, less one).
    lane_mask: usize,
    hasher: ahash::RandomState,
    rate: Rate,
    clock: ClockHandle,
    reclaim: bool,
}

impl<A: Algorithm<State: Stored>> Table<A> {
    /// A table of `shards` shards of `lanes` lanes (each rounded up to a
    /// power of two, lanes to at most [`MAX_LANES`]) hashing keys with
    /// `hasher`. Tables that a compound decision locks together share one
    /// hasher, so a key falls in the same shard index of each.
    pub(crate) fn new(
        rate: Rate,
        clock: ClockHandle,
        (shards, lanes): (usize, usize),
        reclaim: bool,
        hasher: ahash::RandomState,
    ) -> Self {
        let shards = shards.next_power_of_two().max(1);
        Self {
            shards: (0..shards)
                .map(|_| Shard {
                    lanes: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
                    earliest_expiry: AtomicU64::new(u64::MAX),
                    writer: Mutex::new(Writer {
                        sweep_len: MIN_SWEEP_LEN,
                    }),
                })
                .collect(),
            shard_mask: shards - 1,
            lane_mask: lanes_for(lanes) - 1,
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

    /// The clock the table reads.
    pub(crate) fn clock(&self) -> ClockHandle {
        self.clock.clone()
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

    /// Locks `shard`.
    fn lock<'s>(&self, shard: &'s Shard<CellOf<A>>) -> ShardLock<'s, CellOf<A>> {
        ShardLock::new(shard, self.lane_mask + 1)
    }

    /// The lane of the thread whose index is `thread`.
    #[inline]
    fn lane_of(&self, thread: usize) -> usize {
        thread & self.lane_mask
    }

    /// The cell of `key` in `shard`, looked up without the mutex: in the
    /// lane of the thread whose index is `thread` first, then in the
    /// others.
    ///
    /// # Safety
    ///
    /// The caller must be inside a read section for as long as it uses the
    /// cell returned.
    #[inline(always)]
    unsafe fn find_unlocked<'s>(
        &self,
        shard: &'s Shard<CellOf<A>>,
        thread: usize,
        hash: u64,
        key: &[u8],
    ) -> Option<&'s CellOf<A>> {
        let first = self.lane_of(thread);
        let mut lane = first;
        loop {
            // SAFETY: an array retired after the section began is not freed
            // before it ends (see `reclaim`); one retired before is not what
            // this load returns. `lane <= lane_mask < MAX_LANES`.
            let slots = unsafe { shard.lanes[lane % MAX_LANES].load(Ordering::Acquire).as_ref() };
            if let Some(slots) = slots {
                if let Some(index) = slots.find(hash, key) {
                    return Some(&slots.slot(index).cell);
                }
            }
            lane = (lane + 1) & self.lane_mask;
            if lane == first {
                return None;
            }
        }
    }

    /// The state of `key` as a lock-free decision finds it, left as it is:
    /// `None` when no lane holds it, or when a writer holds its cell (loom
    /// models only).
    #[cfg(all(test, tollgate_loom))]
    pub(crate) fn find_unlocked_state(&self, key: &[u8]) -> Option<A::State> {
        let section = reclaim::pin()?;
        let hash = self.hash(key);
        // SAFETY: the cell is used only while `section` lives.
        let cell = unsafe { self.find_unlocked(self.shard(hash), section.thread_index(), hash, key) }?;
        cell.update(|state| (state, Some(state))).map(|(state, _)| state)
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
        let mut locked = self.lock(shard);
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
        let section = reclaim::pin()?;
        // SAFETY: the cell is used only while `section` lives.
        let cell = unsafe { self.find_unlocked(shard, section.thread_index(), hash, key) }?;
        let (outcome, _) = cell.update(|before| {
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
        if let Some(place) = locked.find(hash, key) {
            let cell = &locked.slots_at(place).slot(place.index).cell;
            let before = cell.hold();
            let holding = Holding::new(cell, before);
            let (result, after) = decide(Some(before));
            holding.done();
            match after {
                Some(state) => {
                    cell.release(state);
                    self.note_expiry(locked.shard, &state);
                }
                None => locked.remove(place),
            }
            return result;
        }
        let (result, after) = decide(None);
        if let Some(state) = after {
            self.insert(locked, hash, key, state, now);
        }
        result
    }

    /// Inserts state for a key that holds none into the calling thread's
    /// lane, sweeping the shard first when it has doubled since its last
    /// sweep, and building a larger (or a clean) slot array when the lane's
    /// has no room.
    fn insert(
        &self,
        locked: &mut ShardLock<'_, CellOf<A>>,
        hash: u64,
        key: &[u8],
        state: A::State,
        now: u64,
    ) {
        let lane = self.lane_of(reclaim::thread_index());
        if self.reclaim && locked.len() >= locked.writer.sweep_len {
            self.sweep_shard(locked, now);
        }
        let rebuild = match locked.slots(lane) {
            Some(slots) if slots.occupied() < slots.capacity() => None,
            // Mostly deleted slots: a clean array of the same size.
            Some(slots) if slots.len() < slots.capacity() / 2 => Some(slots.buckets()),
            Some(slots) => Some(buckets_for(slots.capacity() + 1)),
            None => Some(buckets_for(1)),
        };
        if let Some(buckets) = rebuild {
            self.rebuild(locked, lane, buckets);
        }
        self.note_expiry(locked.shard, &state);
        let slots = locked.slots(lane).expect("a slot array with room");
        // SAFETY: this thread holds the shard's mutex, the key is absent
        // from every lane (looked up under the mutex), and the array has
        // room.
        unsafe { slots.insert(hash, StoredKey::new(key), state) };
    }

    /// Moves the entries of `lane` to a new array of `buckets` slots (none
    /// when 0) and retires the old array; returns the bytes it freed.
    fn rebuild(&self, locked: &mut ShardLock<'_, CellOf<A>>, lane: usize, buckets: usize) -> usize {
        let new = (buckets > 0).then(|| Box::new(Slots::<CellOf<A>>::with_buckets(buckets)));
        let new_size = new.as_ref().map_or(0, |s| s.allocation_size());
        let old_ptr = locked.shard.lanes[lane].load(Ordering::Acquire);
        if let Some(old) = locked.slots(lane) {
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
        let old_size = locked.slots(lane).map_or(0, Slots::allocation_size);
        let new_ptr = new.map_or(std::ptr::null_mut(), Box::into_raw);
        // Release: the new array's contents before its pointer.
        locked.shard.lanes[lane].store(new_ptr, Ordering::Release);
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
            locked: self.lock(self.shard(hash)),
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
        section: &'s reclaim::Section,
        hash: u64,
        key: &[u8],
    ) -> Option<(&'s CellOf<A>, A::State)> {
        let shard = self.shard(hash);
        // SAFETY: the returned cell borrows the section.
        let cell = unsafe { self.find_unlocked(shard, section.thread_index(), hash, key) }?;
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
    /// `now` and gives back memory when a lane has shrunk well below its
    /// capacity; returns the approximate bytes of table memory freed.
    ///
    /// `now` is clamped like the strategies' clock readings: state a
    /// decision still counts as live is never deleted.
    fn sweep_shard(&self, locked: &mut ShardLock<'_, CellOf<A>>, now: u64) -> usize {
        let now = clamp_time(now).saturating_sub(CLOCK_STEP_TOLERANCE);
        let mut earliest = u64::MAX;
        let mut freed = 0;
        for lane in 0..locked.lanes {
            freed += self.sweep_lane(locked, lane, now, &mut earliest);
        }
        // `earliest` stays a lower bound: decisions only move expiries on.
        locked.shard.earliest_expiry.store(earliest, Ordering::Relaxed);
        locked.writer.sweep_len = (locked.len() * 2).max(MIN_SWEEP_LEN);
        freed
    }

    /// Removes the entries of `lane` that expired by `now` (already less
    /// the tolerance), lowers `earliest` to the expiry of any entry kept,
    /// and returns the bytes freed.
    ///
    /// The lane's slot array shrinks once fewer than a quarter of its slots
    /// are used, to twice the entries left (and is freed when none are
    /// left): a lane that keeps its size between sweeps is never
    /// reallocated, and one must lose half its entries again before the
    /// next shrink.
    fn sweep_lane(
        &self,
        locked: &mut ShardLock<'_, CellOf<A>>,
        lane: usize,
        now: u64,
        earliest: &mut u64,
    ) -> usize {
        let rate = &self.rate;
        let mut removed = Vec::new();
        let Some(slots) = locked.slots(lane) else {
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
                    continue;
                }
                cell.release(state);
            }
            *earliest = (*earliest).min(expiry);
        }
        retire_keys(removed);
        let len = slots.len();
        if len == 0 {
            return self.rebuild(locked, lane, 0);
        }
        if buckets <= (len * 4).max(MIN_SWEEP_LEN) {
            return 0;
        }
        let target = buckets_for(len * 2);
        if target < buckets {
            self.rebuild(locked, lane, target)
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
            let mut locked = self.lock(shard);
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

    /// How many shards the table holds: what [`Self::for_each_entry_in`]
    /// takes one at a time.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Calls `f` with every key of shard `shard` (below
    /// [`Self::shard_count`]) and its state, under the shard's mutex (so no
    /// key is inserted or deleted meanwhile in that shard; decisions on its
    /// keys go on, and `f` sees each state as one of them left it).
    pub(crate) fn for_each_entry_in(&self, shard: usize, mut f: impl FnMut(&[u8], A::State)) {
        let locked = self.lock(&self.shards[shard]);
        for lane in 0..locked.lanes {
            let Some(slots) = locked.slots(lane) else {
                continue;
            };
            for index in slots.full() {
                // SAFETY: the slot is full and this thread holds the
                // shard's mutex, which every writer of its keys takes.
                let key = unsafe { slots.key(index) }.as_bytes();
                f(key, slots.slot(index).cell.load());
            }
        }
    }

    /// Stores `state` as `key`'s, under its shard's mutex, unless it has
    /// expired by now.
    pub(crate) fn restore_entry(&self, key: &[u8], state: A::State) {
        let now = self.now();
        if A::expires_at(&self.rate, &state) <= now {
            return;
        }
        let mut shard = self.lock_shard_of(self.hash(key));
        let _ = shard.get(key);
        shard.set(key, Some(state), now);
    }

    /// The number of entries the slot arrays can hold before growing.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let locked = self.lock(shard);
                (0..locked.lanes)
                    .filter_map(|lane| locked.slots(lane))
                    .map(Slots::capacity)
                    .sum::<usize>()
            })
            .sum()
    }

    /// The number of lanes holding a slot array (tests only).
    #[cfg(test)]
    fn lanes_in_use(&self) -> usize {
        (0..=self.lane_mask)
            .filter(|&lane| {
                self.shards
                    .iter()
                    .any(|shard| self.lock(shard).slots(lane).is_some())
            })
            .count()
    }

    /// The number of keys with stored state.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| self.lock(shard).len()).sum()
    }
}

impl<A: Algorithm<State: Stored>> Drop for Table<A> {
    fn drop(&mut self) {
        // Unwinding from a failed loom model, outside loom's execution: the
        // arrays are left to leak.
        #[cfg(tollgate_loom)]
        if std::thread::panicking() {
            return;
        }
        for slots in self.shards.iter_mut().flat_map(|shard| &mut shard.lanes) {
            #[cfg(not(tollgate_loom))]
            let slots = *slots.get_mut();
            #[cfg(tollgate_loom)]
            let slots = slots.with_mut(|slots| *slots);
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
    /// The place of the key's cell this thread holds, and its state.
    held: Option<(Place, A::State)>,
}

impl<A: Algorithm<State: Stored>> LockedShard<'_, A> {
    /// Holds `key`'s cell, waiting while a lock-free decision holds it, and
    /// returns its state (`None`: the shard holds none for `key`).
    pub(crate) fn get(&mut self, key: &[u8]) -> Option<A::State> {
        debug_assert!(self.held.is_none(), "one key per locked shard");
        let place = self.locked.find(self.hash, key)?;
        let state = self.locked.slots_at(place).slot(place.index).cell.hold();
        self.held = Some((place, state));
        Some(state)
    }

    /// Stores `after` as the state of `key`, whose state [`Self::get`]
    /// returned under this same lock, and lets its cell go.
    pub(crate) fn set(&mut self, key: &[u8], after: Option<A::State>, now: u64) {
        let Some((place, _)) = self.held.take() else {
            if let Some(state) = after {
                self.table.insert(&mut self.locked, self.hash, key, state, now);
            }
            return;
        };
        match after {
            Some(state) => {
                let cell = &self.locked.slots_at(place).slot(place.index).cell;
                cell.release(state);
                self.table.note_expiry(self.locked.shard, &state);
            }
            // The cell stays held for good: the slot is deleted.
            None => self.locked.remove(place),
        }
    }
}

impl<A: Algorithm<State: Stored>> Drop for LockedShard<'_, A> {
    fn drop(&mut self) {
        if let Some((place, state)) = self.held.take() {
            let cell = &self.locked.slots_at(place).slot(place.index).cell;
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

    /// A table on `clock` with two lanes that reclaims expired state.
    /// Tests pick each thread's lane with [`reclaim::set_thread_index`].
    fn table_on<A: Algorithm<State: Stored>>(rate: Rate, clock: &ManualClock, shards: usize) -> Table<A> {
        Table::new(
            rate,
            ClockHandle::of(clock.clone()),
            (shards, 2),
            true,
            ahash::RandomState::new(),
        )
    }

    impl<A: Algorithm<State: Stored>> Table<A> {
        /// The lane holding `key`'s state.
        fn lane_of_key(&self, key: &[u8]) -> Option<usize> {
            let hash = self.hash(key);
            let locked = self.lock(self.shard(hash));
            locked.find(hash, key).map(|place| place.lane)
        }
    }

    /// Two threads of different lanes insert and decide on the same new
    /// keys at once, and each on keys of its own: every key is stored once
    /// and no charge is lost, whichever lane holds it; a thread's own keys
    /// are in its lane.
    fn each_key_lives_in_one_lane<A: Algorithm<State: Stored>>() {
        let (keys, rounds) = if cfg!(miri) { (6, 3) } else { (2_000, 20) };
        const LIMIT: u64 = 1 << 40;
        let clock = ManualClock::new(Duration::from_secs(1_000));
        let table = table_on::<A>(Rate::new(LIMIT, 3_600_000_000_000), &clock, 4);
        let shared = |i: u64| format!("shared {i}");
        let own = |t: u64, i: u64| format!("own {t} {i}");
        std::thread::scope(|s| {
            for t in 0..2 {
                let table = &table;
                s.spawn(move || {
                    reclaim::set_thread_index(t as usize);
                    for _ in 0..rounds {
                        for i in 0..keys {
                            assert!(
                                table
                                    .apply(&table.rate().clone(), shared(i).as_bytes(), 1)
                                    .allowed
                            );
                            assert!(
                                table
                                    .apply(&table.rate().clone(), own(t, i).as_bytes(), 1)
                                    .allowed
                            );
                        }
                    }
                });
            }
        });
        assert_eq!(table.len() as u64, 3 * keys);
        assert_eq!(table.lanes_in_use(), 2);
        for i in 0..keys {
            let charged = |key: &str| LIMIT - table.apply(&table.rate().clone(), key.as_bytes(), 0).remaining;
            assert_eq!(charged(&shared(i)), 2 * rounds, "shared key {i}");
            for t in 0..2 {
                assert_eq!(charged(&own(t, i)), rounds, "key {i} of thread {t}");
                assert_eq!(table.lane_of_key(own(t, i).as_bytes()), Some(t as usize));
            }
        }
    }

    #[test]
    fn keys_of_every_strategy_live_in_one_lane() {
        each_key_lives_in_one_lane::<TokenBucket>();
        each_key_lives_in_one_lane::<FixedWindow>();
        each_key_lives_in_one_lane::<SlidingWindow>();
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
        reclaim::set_thread_index(0);
        for i in 0..keys {
            table.apply(&table.rate().clone(), key(i).as_bytes(), 1);
        }
        std::thread::scope(|s| {
            // The keys are in lane 0: one decider finds them in its own
            // lane, the other after probing lane 1, whose array the churn
            // rebuilds.
            for lane in 0..2 {
                let (table, key) = (&table, &key);
                s.spawn(move || {
                    reclaim::set_thread_index(lane);
                    for _ in 0..rounds {
                        for i in 0..keys {
                            assert!(table.apply(&table.rate().clone(), key(i).as_bytes(), 1).allowed);
                        }
                    }
                });
            }
            s.spawn(|| {
                reclaim::set_thread_index(1);
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
                    reclaim::set_thread_index(cost as usize);
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
