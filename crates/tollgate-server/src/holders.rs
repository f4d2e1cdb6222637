//! The keys holding the most units in flight, per concurrency policy: what
//! `GET /v1/top?by=in_flight` lists.
//!
//! Every answer of the store to an acquire, a release or an extend says
//! how many units the key's unexpired permits hold (`in_flight`, counted
//! by the store, so over the whole fleet on a shared store) and when the
//! last of them expires (`reset`). Each policy keeps the latest such
//! answer of at most its top keys' capacity of keys: a key answered
//! holding nothing leaves, one whose permits have all expired since counts
//! as holding nothing, and when the table is full a new key takes the
//! place of the key holding least, if it holds more. So with fewer keys
//! holding units than the capacity, every one of them is listed; in a
//! flood of keys, the ones holding most stay. Keys longer than
//! [`MAX_KEY_BYTES`] are kept by their start (`cut`), and keys sharing it
//! share an entry. A policy whose top keys are off keeps nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tollgate::clock::SharedClock;
use tollgate::top::TopMetric;
use tollgate::{Decision, Limiter};
use tollgate_config::AnyBackend;

/// The most bytes of a key kept, as the core's top keys keep.
pub(crate) const MAX_KEY_BYTES: usize = 256;

/// The latest answers per policy.
pub(crate) struct Holders {
    clock: SharedClock,
    tables: Mutex<HashMap<String, Table>>,
}

/// One policy's keys.
struct Table {
    /// The limiter whose settings `capacity` was read from.
    limiter: Weak<Limiter<AnyBackend>>,
    /// The most keys kept; 0 when its top keys are off.
    capacity: usize,
    keys: HashMap<(Box<[u8]>, bool), Answered>,
}

/// A key's latest answer.
#[derive(Clone, Copy)]
struct Answered {
    in_flight: u64,
    limit: u64,
    /// When it was answered, in the clock's nanoseconds.
    at: u64,
    /// When every permit it counted has expired.
    until: u64,
}

impl Answered {
    /// The units it says are held at `now`: none once all have expired.
    fn held(&self, now: u64) -> u64 {
        if self.until > now {
            self.in_flight
        } else {
            0
        }
    }
}

/// One key of a list, highest `in_flight` first.
pub(crate) struct Holder {
    /// The key, or its start when `cut`.
    pub(crate) key: Vec<u8>,
    pub(crate) cut: bool,
    /// The units the store said the key held at its latest answer.
    pub(crate) in_flight: u64,
    pub(crate) limit: u64,
    /// How long ago that answer was.
    pub(crate) age: Duration,
    /// The time until every permit it counted expires, at the latest.
    pub(crate) expires_in: Duration,
}

impl Holders {
    /// No answers yet, timed by `clock` (the service's).
    pub(crate) fn new(clock: SharedClock) -> Self {
        Self {
            clock,
            tables: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps the store's answer `answer` for `key` under `policy` (whose
    /// limiter is `limiter`): `in_flight` is `limit − remaining`, `reset`
    /// the time until the key's last permit expires.
    pub(crate) fn record(
        &self,
        limiter: &Arc<Limiter<AnyBackend>>,
        policy: &str,
        key: &[u8],
        answer: &Decision,
    ) {
        let now = self.clock.now_nanos();
        let answered = Answered {
            in_flight: answer.limit.saturating_sub(answer.remaining),
            limit: answer.limit,
            at: now,
            until: now.saturating_add(u64::try_from(answer.reset.as_nanos()).unwrap_or(u64::MAX)),
        };
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        let table = table_of(&mut tables, limiter, policy);
        let (kept, cut) = cut(key);
        if answered.held(now) == 0 {
            table.keys.remove(&(Box::from(kept), cut));
            return;
        }
        if let Some(entry) = table.keys.get_mut(&(Box::from(kept), cut)) {
            *entry = answered;
            return;
        }
        if table.capacity == 0 {
            return;
        }
        if table.keys.len() >= table.capacity {
            let least = table
                .keys
                .iter()
                .min_by_key(|(_, a)| a.held(now))
                .map(|(k, a)| (k.clone(), a.held(now)));
            match least {
                Some((k, held)) if held < answered.in_flight => {
                    table.keys.remove(&k);
                }
                _ => return,
            }
        }
        table.keys.insert((Box::from(kept), cut), answered);
    }

    /// The `n` keys of `policy` holding most, highest first (ties by key),
    /// and the capacity; `None` when its top keys are off.
    pub(crate) fn list(
        &self,
        limiter: &Arc<Limiter<AnyBackend>>,
        policy: &str,
        n: usize,
    ) -> Option<(usize, Vec<Holder>)> {
        let now = self.clock.now_nanos();
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        let table = table_of(&mut tables, limiter, policy);
        if table.capacity == 0 {
            return None;
        }
        table.keys.retain(|_, a| a.held(now) > 0);
        let mut keys: Vec<Holder> = table
            .keys
            .iter()
            .map(|((key, cut), a)| Holder {
                key: key.to_vec(),
                cut: *cut,
                in_flight: a.in_flight,
                limit: a.limit,
                age: Duration::from_nanos(now.saturating_sub(a.at)),
                expires_in: Duration::from_nanos(a.until.saturating_sub(now)),
            })
            .collect();
        keys.sort_unstable_by(|a, b| b.in_flight.cmp(&a.in_flight).then_with(|| a.key.cmp(&b.key)));
        keys.truncate(n);
        Some((table.capacity, keys))
    }
}

/// `policy`'s table, made or made again when its limiter changed (a
/// reload): the capacity is its top keys', and the keys go when it
/// changes.
fn table_of<'a>(
    tables: &'a mut HashMap<String, Table>,
    limiter: &Arc<Limiter<AnyBackend>>,
    policy: &str,
) -> &'a mut Table {
    let table = tables.entry(policy.to_owned()).or_insert_with(|| Table {
        limiter: Weak::new(),
        capacity: 0,
        keys: HashMap::new(),
    });
    if !Weak::ptr_eq(&table.limiter, &Arc::downgrade(limiter)) {
        // Asking for no key reads the settings; the limiter's top keys are
        // made at its first decision anyway.
        let capacity = limiter
            .top_keys(TopMetric::Denied, 0)
            .map_or(0, |list| list.capacity);
        if capacity != table.capacity {
            table.keys = HashMap::new();
        }
        table.capacity = capacity;
        table.limiter = Arc::downgrade(limiter);
    }
    table
}

/// `key` as kept, and whether it was cut: its first [`MAX_KEY_BYTES`]
/// bytes or fewer, ending before a UTF-8 continuation byte so that a text
/// key is not cut inside a character.
fn cut(key: &[u8]) -> (&[u8], bool) {
    if key.len() <= MAX_KEY_BYTES {
        return (key, false);
    }
    let mut end = MAX_KEY_BYTES;
    while end > MAX_KEY_BYTES - 3 && key[end] & 0xC0 == 0x80 {
        end -= 1;
    }
    (&key[..end], true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::clock::ManualClock;
    use tollgate::top::TopKeys;

    /// An answer of `in_flight` units of 10, the last expiring in 10 s.
    fn answer(in_flight: u64) -> Decision {
        Decision::new(true, 10, 10 - in_flight, Duration::from_secs(10), None)
    }

    #[test]
    fn a_full_table_keeps_the_keys_holding_most_and_forgets_the_expired() {
        let clock = ManualClock::new(Duration::from_secs(1_000));
        let holders = Holders::new(Arc::new(clock.clone()));
        let limiter = Arc::new(
            Limiter::builder()
                .limit(10)
                .window(Duration::from_secs(10))
                .top_keys(TopKeys::new().capacity(2))
                .backend(AnyBackend::from(tollgate::MemoryBackend::new()))
                .build()
                .unwrap(),
        );
        let listed = |n| -> Vec<(Vec<u8>, u64)> {
            let (capacity, keys) = holders.list(&limiter, "p", n).unwrap();
            assert_eq!(capacity, 2);
            keys.into_iter().map(|h| (h.key, h.in_flight)).collect()
        };
        holders.record(&limiter, "p", b"a", &answer(3));
        holders.record(&limiter, "p", b"b", &answer(1));
        holders.record(&limiter, "p", b"c", &answer(1));
        assert_eq!(
            listed(5),
            vec![(b"a".to_vec(), 3), (b"b".to_vec(), 1)],
            "c holds no more than b"
        );
        holders.record(&limiter, "p", b"d", &answer(2));
        assert_eq!(
            listed(5),
            vec![(b"a".to_vec(), 3), (b"d".to_vec(), 2)],
            "d takes b's place"
        );
        assert_eq!(listed(1), vec![(b"a".to_vec(), 3)]);
        holders.record(&limiter, "p", b"a", &answer(0));
        assert_eq!(listed(5), vec![(b"d".to_vec(), 2)], "a holds nothing");
        clock.advance(Duration::from_secs(10));
        assert_eq!(listed(5), vec![], "d's permits expired");
    }

    #[test]
    fn long_keys_are_cut_at_a_character() {
        assert_eq!(cut(b"short"), (&b"short"[..], false));
        let long = "é".repeat(200);
        let (kept, was_cut) = cut(long.as_bytes());
        assert!(was_cut);
        assert_eq!(kept.len(), MAX_KEY_BYTES);
        assert!(std::str::from_utf8(kept).is_ok());
        let odd = format!("x{long}");
        let (kept, _) = cut(odd.as_bytes());
        assert_eq!(kept.len(), MAX_KEY_BYTES - 1);
        assert!(std::str::from_utf8(kept).is_ok());
    }
}
