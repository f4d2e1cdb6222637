//! A key as stored in the in-memory table: 16 bytes, holding keys of up to
//! 15 bytes inline (an IPv4 address in text fits) and longer keys on the heap.
//!
//! Memory per active key is a headline number for a rate limiter facing
//! untrusted clients; a plain `Box<[u8]>` costs 16 bytes plus a heap block
//! (with the allocator's own overhead) for every key, however short.

use std::ptr::NonNull;

const INLINE: usize = 15;
const INLINE_TAG: u8 = 0x80;

#[derive(Clone, Copy)]
#[repr(C)]
struct Inline {
    /// `INLINE_TAG | len`.
    tag: u8,
    bytes: [u8; INLINE],
}

#[derive(Clone, Copy)]
#[repr(C)]
struct Heap {
    /// Byte 0 is 0 (the heap tag); bytes 1..8 hold the length, little-endian.
    len: [u8; 8],
    ptr: NonNull<u8>,
}

#[repr(C)]
union Repr {
    inline: Inline,
    heap: Heap,
}

/// An owned key of any length in 16 bytes (plus a heap block when longer
/// than 15 bytes).
pub(crate) struct StoredKey {
    repr: Repr,
}

// SAFETY: a StoredKey exclusively owns its bytes, like a Box<[u8]>.
unsafe impl Send for StoredKey {}
// SAFETY: shared access only reads the bytes.
unsafe impl Sync for StoredKey {}

const _: () = assert!(std::mem::size_of::<StoredKey>() == 16);

/// Whether two slices of the same length, at most 16 bytes, are equal:
/// two fixed-size comparisons (overlapping unless the length is 1, 4 or 8),
/// not a call to `memcmp`.
#[inline]
fn eq_short(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    debug_assert!(n == b.len() && n <= 16);
    let u64_at = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().expect("4 bytes"));
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => u32_at(a, 0) == u32_at(b, 0) && u32_at(a, n - 4) == u32_at(b, n - 4),
        _ => u64_at(a, 0) == u64_at(b, 0) && u64_at(a, n - 8) == u64_at(b, n - 8),
    }
}

impl StoredKey {
    pub(crate) fn new(key: &[u8]) -> Self {
        if key.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            return Self {
                repr: Repr {
                    inline: Inline {
                        tag: INLINE_TAG | key.len() as u8,
                        bytes,
                    },
                },
            };
        }
        // Lengths above 2^56 cannot exist in memory.
        let len = key.len() as u64;
        let mut len_bytes = (len << 8).to_le_bytes();
        len_bytes[0] = 0;
        // `into_raw` keeps the box's unique permission for the pointer, which
        // `drop` turns back into the box.
        let raw: *mut [u8] = Box::into_raw(Box::<[u8]>::from(key));
        let ptr = NonNull::new(raw.cast::<u8>()).expect("boxed slices are non-null");
        Self {
            repr: Repr {
                heap: Heap { len: len_bytes, ptr },
            },
        }
    }

    #[inline]
    fn tag(&self) -> u8 {
        // SAFETY: both variants start with an initialised byte at offset 0.
        unsafe { self.repr.inline.tag }
    }

    /// Whether this is `key`.
    #[inline]
    pub(crate) fn matches(&self, key: &[u8]) -> bool {
        if key.len() <= INLINE {
            if self.tag() != INLINE_TAG | key.len() as u8 {
                return false;
            }
            // SAFETY: the tag says the inline variant is active.
            let inline = unsafe { &self.repr.inline };
            eq_short(&inline.bytes[..key.len()], key)
        } else {
            self.owns_heap() && self.as_bytes() == key
        }
    }

    /// Whether the key lives in a heap block (it is longer than 15 bytes).
    #[inline]
    pub(crate) fn owns_heap(&self) -> bool {
        self.tag() & INLINE_TAG == 0
    }

    #[inline]
    fn heap_len(heap: &Heap) -> usize {
        (u64::from_le_bytes(heap.len) >> 8) as usize
    }

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        let tag = self.tag();
        if tag & INLINE_TAG != 0 {
            // SAFETY: the tag says the inline variant is active.
            let inline = unsafe { &self.repr.inline };
            &inline.bytes[..usize::from(tag & !INLINE_TAG)]
        } else {
            // SAFETY: the tag says the heap variant is active; ptr and len
            // come from a live boxed slice this key owns.
            unsafe {
                let heap = &self.repr.heap;
                std::slice::from_raw_parts(heap.ptr.as_ptr(), Self::heap_len(heap))
            }
        }
    }
}

impl Drop for StoredKey {
    fn drop(&mut self) {
        if self.owns_heap() {
            // SAFETY: the heap variant owns a boxed slice of exactly this
            // pointer and length, created in `new` and not freed before.
            unsafe {
                let heap = self.repr.heap;
                let slice = std::ptr::slice_from_raw_parts_mut(heap.ptr.as_ptr(), Self::heap_len(&heap));
                drop(Box::from_raw(slice));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_every_length_round_trip() {
        for len in 0..100 {
            let key: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let stored = StoredKey::new(&key);
            assert_eq!(stored.as_bytes(), &key[..], "length {len}");
        }
        let big = vec![0xAB; 1 << 16];
        assert_eq!(StoredKey::new(&big).as_bytes(), &big[..]);
    }

    #[test]
    fn a_key_matches_exactly_its_own_bytes() {
        let keys: Vec<Vec<u8>> = (0..40)
            .map(|len| (0..len).map(|i| (i * 7 + len) as u8).collect())
            .chain([vec![0; 15], vec![0; 16], vec![0; 14], b"10.0.0.1".to_vec()])
            .collect();
        for a in &keys {
            let stored = StoredKey::new(a);
            for b in &keys {
                assert_eq!(stored.matches(b), a == b, "{a:?} against {b:?}");
            }
        }
    }
}
