//! The Space-Saving summary (Metwally, Agrawal and El Abbadi, 2005): the
//! heaviest keys of a stream in a fixed number of counters.
//!
//! Each of at most `capacity` entries holds a key, its count and the error
//! of that count. A key already held adds its weight to its count; a new
//! key takes a free entry, or else the entry of the smallest count `m`,
//! starting at `m` plus its weight with error `m`. So every count is at
//! least the key's true weight and at most `error` above it, `error` is at
//! most the smallest count, and the smallest count is at most `N /
//! capacity` for a stream of total weight `N`: every key heavier than that
//! is held. The entries form a min-heap by count, found by key through a
//! table of heap positions, so each addition costs O(log capacity) and
//! memory never grows past `capacity` entries, however many distinct keys
//! arrive.

use hashbrown::HashTable;

/// One held key.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    /// The key as recorded ([`super::cut`]).
    pub(crate) key: Box<[u8]>,
    /// Whether `key` is the start of a longer key.
    pub(crate) cut: bool,
    /// The key's count: at least its true weight.
    pub(crate) count: u64,
    /// How far `count` may exceed the true weight.
    pub(crate) error: u64,
    /// The key's hash, to find its position again.
    hash: u64,
}

impl Entry {
    /// The key's hash.
    pub(crate) fn hash(&self) -> u64 {
        self.hash
    }
}

/// A Space-Saving summary of at most `capacity` keys.
pub(crate) struct SpaceSaving {
    capacity: usize,
    /// A min-heap by `count`.
    heap: Vec<Entry>,
    /// The heap position of each entry, hashed by its key.
    positions: HashTable<usize>,
}

impl SpaceSaving {
    /// An empty summary; it allocates as keys arrive, up to `capacity`
    /// entries.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            heap: Vec::new(),
            positions: HashTable::new(),
        }
    }

    /// The held entries, in no order.
    pub(crate) fn entries(&self) -> &[Entry] {
        &self.heap
    }

    /// The most a key not held may have been added: 0 until the summary is
    /// full, then the smallest count.
    pub(crate) fn floor(&self) -> u64 {
        if self.heap.len() < self.capacity {
            0
        } else {
            self.heap.first().map_or(0, |e| e.count)
        }
    }

    /// The count of `key` and its error: its entry's when held, else
    /// [`floor`](Self::floor) for both (the key may have been added that
    /// much and evicted).
    pub(crate) fn count(&self, hash: u64, key: &[u8], cut: bool) -> (u64, u64) {
        match self.get(hash, key, cut) {
            Some(e) => (e.count, e.error),
            None => (self.floor(), self.floor()),
        }
    }

    /// The entry of `key`, when held.
    pub(crate) fn get(&self, hash: u64, key: &[u8], cut: bool) -> Option<&Entry> {
        let heap = &self.heap;
        self.positions
            .find(hash, |&i| heap[i].cut == cut && *heap[i].key == *key)
            .map(|&i| &heap[i])
    }

    /// Adds `weight` to `key` (hashed to `hash`).
    pub(crate) fn add(&mut self, hash: u64, key: &[u8], cut: bool, weight: u64) {
        if self.capacity == 0 || weight == 0 {
            return;
        }
        let heap = &self.heap;
        if let Some(&i) = self
            .positions
            .find(hash, |&i| heap[i].cut == cut && *heap[i].key == *key)
        {
            self.heap[i].count = self.heap[i].count.saturating_add(weight);
            self.sift_down(i);
            return;
        }
        if self.heap.len() < self.capacity {
            let i = self.heap.len();
            self.heap.push(Entry {
                key: key.into(),
                cut,
                count: weight,
                error: 0,
                hash,
            });
            let heap = &self.heap;
            self.positions.insert_unique(hash, i, |&j| heap[j].hash);
            self.sift_up(i);
            return;
        }
        // Full: the smallest entry gives its place, and its count becomes
        // the newcomer's error.
        let smallest = &self.heap[0];
        if let Ok(slot) = self.positions.find_entry(smallest.hash, |&j| j == 0) {
            slot.remove();
        }
        let floor = self.heap[0].count;
        self.heap[0] = Entry {
            key: key.into(),
            cut,
            count: floor.saturating_add(weight),
            error: floor,
            hash,
        };
        let heap = &self.heap;
        self.positions.insert_unique(hash, 0, |&j| heap[j].hash);
        self.sift_down(0);
    }

    /// Moves entry `i` up while it is smaller than its parent.
    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[parent].count <= self.heap[i].count {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    /// Moves entry `i` down while a child is smaller.
    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (left, right) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if left < self.heap.len() && self.heap[left].count < self.heap[least].count {
                least = left;
            }
            if right < self.heap.len() && self.heap[right].count < self.heap[least].count {
                least = right;
            }
            if least == i {
                return;
            }
            self.swap(i, least);
            i = least;
        }
    }

    /// Swaps two heap entries and their positions.
    fn swap(&mut self, a: usize, b: usize) {
        // Each position is found by the index it holds, unique in the
        // table; the one at `a` is parked on a value no position holds
        // while the one at `b` moves, so neither is mistaken for the other.
        const PARKED: usize = usize::MAX;
        let (hash_a, hash_b) = (self.heap[a].hash, self.heap[b].hash);
        for (hash, from, to) in [(hash_a, a, PARKED), (hash_b, b, a), (hash_a, PARKED, b)] {
            if let Some(position) = self.positions.find_mut(hash, |&j| j == from) {
                *position = to;
            }
        }
        self.heap.swap(a, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary_of(capacity: usize, stream: &[(&str, u64)]) -> SpaceSaving {
        let hasher = ahash::RandomState::new();
        let mut s = SpaceSaving::new(capacity);
        for (key, weight) in stream {
            s.add(hasher.hash_one(key.as_bytes()), key.as_bytes(), false, *weight);
        }
        s
    }

    fn count(s: &SpaceSaving, key: &str) -> Option<(u64, u64)> {
        s.entries()
            .iter()
            .find(|e| &*e.key == key.as_bytes())
            .map(|e| (e.count, e.error))
    }

    #[test]
    fn below_capacity_counts_are_exact() {
        let s = summary_of(3, &[("a", 1), ("b", 2), ("a", 5), ("c", 1)]);
        assert_eq!(count(&s, "a"), Some((6, 0)));
        assert_eq!(count(&s, "b"), Some((2, 0)));
        assert_eq!(count(&s, "c"), Some((1, 0)));
    }

    #[test]
    fn a_new_key_takes_the_smallest_entry_and_its_count_as_error() {
        let s = summary_of(2, &[("a", 5), ("b", 2), ("c", 1)]);
        assert_eq!(count(&s, "b"), None);
        assert_eq!(count(&s, "c"), Some((3, 2)));
        assert_eq!(count(&s, "a"), Some((5, 0)));
        assert_eq!(s.entries().len(), 2);
    }

    #[test]
    fn every_entry_is_found_by_its_key_after_many_swaps() {
        let hasher = ahash::RandomState::new();
        let mut s = SpaceSaving::new(50);
        for i in 0..5_000u64 {
            let key = format!("k{}", (i * 7919) % 131);
            s.add(hasher.hash_one(key.as_bytes()), key.as_bytes(), false, 1 + i % 3);
        }
        assert_eq!(s.entries().len(), 50);
        for e in s.entries() {
            let found = s.get(e.hash, &e.key, e.cut).expect("held entry found by key");
            assert_eq!(found.count, e.count);
        }
        for (i, e) in s.entries().iter().enumerate().skip(1) {
            assert!(s.entries()[(i - 1) / 2].count <= e.count, "heap order at {i}");
        }
    }

    #[test]
    fn zero_capacity_or_weight_holds_nothing() {
        let s = summary_of(0, &[("a", 1)]);
        assert!(s.entries().is_empty());
        let s = summary_of(4, &[("a", 0)]);
        assert!(s.entries().is_empty());
    }
}
