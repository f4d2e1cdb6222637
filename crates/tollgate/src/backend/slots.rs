//! One shard's slot array: open addressing with a control byte per slot, in
//! groups of eight, that lookups read while one writer changes it.
//!
//! The layout follows `hashbrown` (one byte per slot holding 7 bits of the
//! hash, probing group by group), so a slot costs what a `hashbrown` entry
//! costs. What differs is what a writer may do while lookups run without
//! any lock:
//!
//! - A slot goes from empty to full, and from full to deleted, never back.
//!   A full slot's key is written before its control byte is published and
//!   never changes afterwards, so a lookup that sees the byte reads a
//!   complete key; a deleted slot is never reused, so a lookup cannot mistake
//!   a new key for the one it looked at.
//! - Inserts only fill empty slots. When full and deleted slots take up the
//!   array's capacity, the writer builds a new array (see `Table`) and the
//!   old one is retired ([`super::reclaim`]).
//!
//! Control bytes are read and written as whole 8-byte groups, with atomic
//! loads and stores; only the writer holding the shard's lock stores them.

use std::mem::MaybeUninit;

use super::cell::StateCell;
use super::stored_key::StoredKey;
use super::sync::{AtomicU64, AtomicUsize, Ordering, UnsafeCell};

/// Slots per control group.
const GROUP: usize = 8;
/// The control byte of an empty slot.
const EMPTY: u8 = 0xFF;
/// The control byte of a deleted slot.
const DELETED: u8 = 0x80;

const fn repeat(byte: u8) -> u64 {
    u64::from_ne_bytes([byte; GROUP])
}

/// The top 7 bits of a hash, stored in a full slot's control byte. (The
/// shard index uses bits 40 and up to 55, the first group the low bits,
/// the preferred slot in a group bits 32 to 34.)
#[inline]
fn tag(hash: u64) -> u8 {
    (hash >> 57) as u8
}

/// Control byte `i` of a group (byte `i` counts from the low end).
#[inline]
fn byte(group: u64, i: usize) -> u8 {
    (group >> (8 * i)) as u8
}

/// Bits 8i+7 set for the bytes equal to `tag`, and possibly for a byte just
/// above a match (filter candidates by [`byte`]).
#[inline]
fn match_tag(group: u64, tag: u8) -> u64 {
    let cmp = group ^ repeat(tag);
    cmp.wrapping_sub(repeat(0x01)) & !cmp & repeat(0x80)
}

/// Bits 8i+7 set for the empty bytes (the only bytes with bits 7 and 6 set).
#[inline]
fn match_empty(group: u64) -> u64 {
    group & (group << 1) & repeat(0x80)
}

/// Bits 8i+7 set for the full bytes (bit 7 clear).
#[inline]
fn match_full(group: u64) -> u64 {
    !group & repeat(0x80)
}

/// The slot index within its group of a match bit.
#[inline]
fn lowest(matches: u64) -> usize {
    matches.trailing_zeros() as usize / 8
}

/// One slot: a key and its state.
pub(crate) struct Slot<C> {
    /// Initialised while the slot is full or deleted.
    key: KeyCell,
    /// The key's state.
    pub(crate) cell: C,
}

/// A slot's key as the table stores it.
type KeyCell = UnsafeCell<MaybeUninit<StoredKey>>;

/// Runs `f` on a pointer to a slot's key, to read it.
#[cfg(not(tollgate_loom))]
#[inline(always)]
fn read_key<R>(cell: &KeyCell, f: impl FnOnce(*const MaybeUninit<StoredKey>) -> R) -> R {
    f(cell.get())
}

/// Runs `f` on a pointer to a slot's key, to write it.
#[cfg(not(tollgate_loom))]
#[inline(always)]
fn write_key<R>(cell: &KeyCell, f: impl FnOnce(*mut MaybeUninit<StoredKey>) -> R) -> R {
    f(cell.get())
}

/// Runs `f` on a pointer to a slot's key, to read it: loom checks that
/// the key's last write happens before (the key was published).
#[cfg(tollgate_loom)]
fn read_key<R>(cell: &KeyCell, f: impl FnOnce(*const MaybeUninit<StoredKey>) -> R) -> R {
    cell.with(f)
}

/// Runs `f` on a pointer to a slot's key, to write it: loom checks that
/// every read of the key happens before.
#[cfg(tollgate_loom)]
fn write_key<R>(cell: &KeyCell, f: impl FnOnce(*mut MaybeUninit<StoredKey>) -> R) -> R {
    cell.with_mut(f)
}

/// The slots of one control group, aligned to a cache line. A slot is 24,
/// 32 or 40 bytes, so eight of them fill whole lines without padding: an
/// array's slots begin and end on line boundaries and share no line with
/// another heap block, such as another lane's array, whose keys other
/// threads write.
///
/// `repr(C)` with no padding (checked where arrays are made): the groups of
/// an array are its slots, contiguous, and are indexed as one slice.
#[repr(C, align(64))]
struct SlotGroup<C>([Slot<C>; GROUP]);

/// A slot array and its control bytes.
pub(crate) struct Slots<C> {
    group_mask: usize,
    ctrl: Box<[AtomicU64]>,
    slots: Box<[SlotGroup<C>]>,
    /// Full slots. Like `occupied`, read and written only by the writer
    /// holding the shard's lock (atomics only because lookups share the
    /// array).
    len: AtomicUsize,
    /// Full and deleted slots.
    occupied: AtomicUsize,
}

// SAFETY: the only non-`Sync` part is a slot's key, written once by the
// writer holding the shard's lock before the slot is published (a release
// store of its control byte that readers load with acquire) and never
// written again; readers only read it after seeing that byte. The cells are
// atomics.
unsafe impl<C: Sync> Sync for Slots<C> {}

/// Under loom, freeing an array counts as a write of its control bytes and
/// keys (and its cells count their own, see `cell`): loom then reports a
/// lookup whose reads of the array are not ordered before the free, that
/// is, an array freed while a read section may still use it. (Loom does
/// not see freed memory itself.)
#[cfg(tollgate_loom)]
impl<C> Drop for Slots<C> {
    fn drop(&mut self) {
        // Unwinding from a failed model, outside loom's execution.
        if std::thread::panicking() {
            return;
        }
        for group in self.ctrl.iter_mut() {
            group.with_mut(|_| ());
        }
        for slot in self.slots.iter().flat_map(|group| &group.0) {
            slot.key.with_mut(|_| ());
        }
    }
}

/// The number of slots for `capacity` entries at a load of at most 7/8,
/// as `hashbrown` sizes its tables (at least one group).
pub(crate) fn buckets_for(capacity: usize) -> usize {
    if capacity < GROUP {
        GROUP
    } else {
        (capacity.saturating_mul(8) / 7).next_power_of_two()
    }
}

impl<C: StateCell> Slots<C> {
    /// An array of `buckets` empty slots (a power of two, at least 8).
    pub(crate) fn with_buckets(buckets: usize) -> Self {
        debug_assert!(buckets.is_power_of_two() && buckets >= GROUP);
        const {
            assert!(std::mem::size_of::<SlotGroup<C>>() == GROUP * std::mem::size_of::<Slot<C>>());
        }
        let groups = buckets / GROUP;
        Self {
            group_mask: groups - 1,
            ctrl: (0..groups).map(|_| AtomicU64::new(repeat(EMPTY))).collect(),
            slots: (0..groups)
                .map(|_| {
                    SlotGroup(std::array::from_fn(|_| Slot {
                        key: UnsafeCell::new(MaybeUninit::uninit()),
                        cell: C::vacant(),
                    }))
                })
                .collect(),
            len: AtomicUsize::new(0),
            occupied: AtomicUsize::new(0),
        }
    }

    /// The number of full slots (for the writer holding the shard's lock).
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// The number of full and deleted slots (for the writer holding the
    /// shard's lock).
    pub(crate) fn occupied(&self) -> usize {
        self.occupied.load(Ordering::Relaxed)
    }

    /// The number of slots.
    pub(crate) fn buckets(&self) -> usize {
        self.slots.len() * GROUP
    }

    /// How many slots may be full or deleted before the array is rebuilt.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len() * 7
    }

    /// The heap bytes the array takes.
    pub(crate) fn allocation_size(&self) -> usize {
        std::mem::size_of_val(&*self.ctrl) + std::mem::size_of_val(&*self.slots) + std::mem::size_of::<Self>()
    }

    /// The slot at `index`.
    #[inline]
    pub(crate) fn slot(&self, index: usize) -> &Slot<C> {
        &self.flat()[index]
    }

    /// The slots, as one slice.
    #[inline(always)]
    fn flat(&self) -> &[Slot<C>] {
        // SAFETY: a `SlotGroup` is `repr(C)` over `GROUP` slots with no
        // padding (asserted in `with_buckets`), so the groups are
        // `GROUP × len` contiguous, initialised slots.
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr().cast::<Slot<C>>(), self.slots.len() * GROUP) }
    }

    /// The index of the full slot holding `key`, whose hash is `hash`.
    ///
    /// Runs alongside the writer: a key inserted meanwhile may be missed,
    /// but a key that was present before the lookup began and is not
    /// deleted meanwhile is always found (slots never go back to empty, so a
    /// probe never stops short of it).
    #[inline(always)]
    pub(crate) fn find(&self, hash: u64, key: &[u8]) -> Option<usize> {
        let tag = tag(hash);
        let mask = self.group_mask;
        let mut group_index = hash as usize & mask;
        // Triangular probing visits every group once in `groups` steps.
        let mut stride = 0;
        loop {
            // SAFETY: `group_index <= group_mask`, and there are
            // `group_mask + 1` groups.
            let ctrl = unsafe { self.ctrl.get_unchecked(group_index) };
            // Acquire: a full byte seen here was published after its key.
            let group = ctrl.load(Ordering::Acquire);
            let mut matches = match_tag(group, tag);
            while matches != 0 {
                let i = lowest(matches);
                matches &= matches - 1;
                if byte(group, i) == tag {
                    let index = group_index * GROUP + i;
                    // SAFETY: the control byte says the slot is full.
                    if unsafe { self.key(index) }.matches(key) {
                        return Some(index);
                    }
                }
            }
            if match_empty(group) != 0 || stride == mask {
                return None;
            }
            stride += 1;
            group_index = (group_index + stride) & mask;
        }
    }

    /// The key of a slot.
    ///
    /// # Safety
    ///
    /// The slot must be full (its control byte seen with acquire ordering,
    /// or read by the writer), or deleted with its key still owned by a
    /// retired block or another array (its bits are left in place).
    #[inline]
    pub(crate) unsafe fn key(&self, index: usize) -> &StoredKey {
        debug_assert!(index < self.buckets());
        // SAFETY: `index` is below the slot count (callers compute it from
        // a group index and a byte position).
        let slot = unsafe { self.flat().get_unchecked(index) };
        // SAFETY: per the contract, the key was initialised and is not
        // written while `self` is borrowed.
        read_key(&slot.key, |key| unsafe { (*key).assume_init_ref() })
    }

    /// The indices of the full slots.
    pub(crate) fn full(&self) -> impl Iterator<Item = usize> + '_ {
        self.ctrl.iter().enumerate().flat_map(|(g, group)| {
            let mut matches = match_full(group.load(Ordering::Acquire));
            std::iter::from_fn(move || {
                (matches != 0).then(|| {
                    let i = lowest(matches);
                    matches &= matches - 1;
                    g * GROUP + i
                })
            })
        })
    }

    /// Puts `key` with `state` in an empty slot.
    ///
    /// # Safety
    ///
    /// Only the writer holding the shard's lock may call it, the key must be
    /// absent, and full plus deleted slots must be fewer than
    /// [`Self::capacity`].
    pub(crate) unsafe fn insert(&self, hash: u64, key: StoredKey, state: C::State) {
        let mut group_index = hash as usize & self.group_mask;
        for stride in 1..=self.ctrl.len() {
            let group = self.ctrl[group_index].load(Ordering::Relaxed);
            let empty = match_empty(group);
            if empty != 0 {
                // The empty slot at or after a position taken from the hash
                // (bits no other use takes), not the first: keys spread over
                // the group's cache lines instead of crowding its first
                // ones, so fewer keys share a line that decisions write.
                let start = (hash >> 32) as usize % GROUP;
                let i = (lowest(empty.rotate_right(8 * start as u32)) + start) % GROUP;
                let slot = self.slot(group_index * GROUP + i);
                // SAFETY: the slot is empty, so no reader reads its key, and
                // the caller is the only writer.
                write_key(&slot.key, |slot_key| unsafe { (*slot_key).write(key) });
                slot.cell.init(state);
                let shift = 8 * i;
                let published = group & !(0xFF << shift) | u64::from(tag(hash)) << shift;
                // Release: the key and state are written before readers see
                // the slot full.
                self.ctrl[group_index].store(published, Ordering::Release);
                // The caller is the only writer: no read-modify-write needed.
                self.len.store(self.len() + 1, Ordering::Relaxed);
                self.occupied.store(self.occupied() + 1, Ordering::Relaxed);
                return;
            }
            group_index = (group_index + stride) & self.group_mask;
        }
        unreachable!("an insert into a slot array with no empty slot");
    }

    /// Marks the full slot at `index` deleted and returns its key.
    ///
    /// # Safety
    ///
    /// Only the writer holding the shard's lock may call it, on a full slot.
    /// Lookups that found the slot before may still read its key: the caller
    /// must keep the key's heap block until they have finished (retire it),
    /// and should hold the cell for good so they cannot update it.
    pub(crate) unsafe fn erase(&self, index: usize) -> StoredKey {
        let (group_index, i) = (index / GROUP, index % GROUP);
        let group = self.ctrl[group_index].load(Ordering::Relaxed);
        let shift = 8 * i;
        let deleted = group & !(0xFF << shift) | u64::from(DELETED) << shift;
        self.ctrl[group_index].store(deleted, Ordering::Release);
        self.len.store(self.len() - 1, Ordering::Relaxed);
        // SAFETY: the slot was full; its bits stay in place for lookups in
        // flight, and the control byte no longer claims them, so the key
        // is taken out exactly once.
        unsafe { std::ptr::read(self.key(index)) }
    }

    /// Takes the key out of a full slot, leaving the slot full, for a writer
    /// that moves it to a new array and retires this one.
    ///
    /// # Safety
    ///
    /// Only the writer holding the shard's lock may call it, on a full slot,
    /// at most once per slot; the array must then be retired, never used to
    /// take or drop keys again.
    pub(crate) unsafe fn take_key(&self, index: usize) -> StoredKey {
        // SAFETY: the slot is full; the caller takes each key once.
        unsafe { std::ptr::read(self.key(index)) }
    }

    /// Drops the keys of the full slots.
    ///
    /// # Safety
    ///
    /// No other thread may use the array, and its keys must not have been
    /// taken out (see [`Self::take_key`]).
    pub(crate) unsafe fn drop_keys(&mut self) {
        for index in self.full().collect::<Vec<_>>() {
            // SAFETY: the array is used by this thread only and owns the
            // keys of its full slots.
            write_key(&self.slot(index).key, |key| unsafe { (*key).assume_init_drop() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cell::TatCell;
    use crate::strategy::GcraState;

    fn state(tat: u64) -> GcraState {
        GcraState { tat }
    }

    /// Hashes that all start probing at group 0 with the same tag, so
    /// probing and tag filtering are exercised.
    fn colliding(i: u64) -> u64 {
        (0x2A << 57) | (i << 3) << 8
    }

    #[test]
    fn keys_are_found_until_erased_and_slots_never_return_to_empty() {
        let slots = Slots::<TatCell>::with_buckets(32);
        let keys: Vec<Vec<u8>> = (0..slots.capacity())
            .map(|i| format!("key-with-a-long-name-{i}").into_bytes())
            .collect();
        for (i, key) in keys.iter().enumerate() {
            // SAFETY: single-threaded; keys are distinct; below capacity.
            unsafe { slots.insert(colliding(i as u64), StoredKey::new(key), state(i as u64 + 1)) };
        }
        for (i, key) in keys.iter().enumerate() {
            let index = slots.find(colliding(i as u64), key).expect("inserted");
            assert_eq!(slots.slot(index).cell.load(), state(i as u64 + 1));
        }
        assert_eq!(slots.find(colliding(1), b"absent"), None);
        let erased = slots.find(colliding(3), &keys[3]).unwrap();
        // SAFETY: single-threaded, full slot.
        let key = unsafe { slots.erase(erased) };
        assert_eq!(key.as_bytes(), &keys[3][..]);
        assert_eq!(slots.find(colliding(3), &keys[3]), None);
        // Keys probed past the deleted slot are still found.
        for (i, key) in keys.iter().enumerate().filter(|(i, _)| *i != 3) {
            assert!(slots.find(colliding(i as u64), key).is_some(), "key {i}");
        }
        assert_eq!(slots.full().count(), keys.len() - 1);
        let mut slots = slots;
        // SAFETY: single-threaded; no key was taken out.
        unsafe { slots.drop_keys() };
    }

    #[test]
    fn readers_find_present_keys_while_a_writer_inserts() {
        let slots = Slots::<TatCell>::with_buckets(if cfg!(miri) { 64 } else { 1024 });
        let present = slots.capacity() / 2;
        let hash = |i: usize| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for i in 0..present {
            // SAFETY: single-threaded so far.
            unsafe { slots.insert(hash(i), StoredKey::new(&i.to_le_bytes()), state(1)) };
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in present..slots.capacity() {
                    // SAFETY: the only writer; below capacity.
                    unsafe { slots.insert(hash(i), StoredKey::new(&i.to_le_bytes()), state(2)) };
                }
            });
            for _ in 0..if cfg!(miri) { 1 } else { 50 } {
                for i in 0..present {
                    assert!(slots.find(hash(i), &i.to_le_bytes()).is_some(), "key {i} lost");
                }
            }
        });
        assert_eq!(slots.full().count(), slots.capacity());
    }
}
