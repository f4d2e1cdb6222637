//! The contract of SEMANTICS.md's "Requests in flight", written as plainly
//! as it reads, to check implementations against: each key a list of
//! permits with their costs and expiries, scanned whole on every
//! operation. Times are integers on the store's clock (any unit); the model
//! makes the permits' identifiers itself, counting up, so an
//! implementation is compared on what it answers, not on its identifiers.

use std::collections::HashMap;

/// One permit of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permit {
    /// Unique within the model, never reused.
    pub id: u64,
    /// The units it holds, `1 <= cost <= L`.
    pub cost: u64,
    /// When it expires (it is expired at and after this time).
    pub expires: u64,
}

/// What an acquisition answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired {
    /// Whether the units are held (or, for a peek, whether a unit fits).
    pub allowed: bool,
    /// The permit made, when admitted with a cost of at least 1.
    pub permit: Option<Permit>,
    /// The units held after the operation.
    pub in_flight: u64,
    /// `L - in_flight`.
    pub remaining: u64,
    /// Until the last unexpired permit expires (0 with none).
    pub reset: u64,
    /// When denied: until enough permits expire for the cost to fit, were
    /// nothing else to happen; `None` when admitted or never possible.
    pub retry_after: Option<u64>,
}

/// The permits of one key.
#[derive(Clone, Debug, Default)]
struct Key {
    /// The latest time an operation on the key used.
    seen: u64,
    /// Every permit made and not released (expired ones included: the
    /// operations skip them).
    permits: Vec<Permit>,
}

impl Key {
    /// The time an operation at `now` uses: never earlier than one before
    /// while the key holds an unexpired permit (at that time); a key that
    /// holds none is absent, its time forgotten.
    fn at(&mut self, now: u64) -> u64 {
        let latest = self.seen.max(now);
        if self.live(latest).next().is_none() {
            self.permits.clear();
            self.seen = now;
        } else {
            self.seen = latest;
        }
        self.seen
    }

    fn live(&self, now: u64) -> impl Iterator<Item = &Permit> {
        self.permits.iter().filter(move |p| p.expires > now)
    }

    fn held(&self, now: u64) -> u64 {
        self.live(now).map(|p| p.cost).sum()
    }

    fn reset(&self, now: u64) -> u64 {
        self.live(now).map(|p| p.expires - now).max().unwrap_or(0)
    }

    /// The wait until `cost` units fit by expiries alone.
    fn wait_for(&self, cost: u64, limit: u64, now: u64) -> u64 {
        let mut live: Vec<&Permit> = self.live(now).collect();
        live.sort_by_key(|p| p.expires);
        let mut held = self.held(now);
        for permit in live {
            if held + cost <= limit {
                break;
            }
            held -= permit.cost;
            if held + cost <= limit {
                return permit.expires - now;
            }
        }
        0
    }
}

/// Every key's permits under one limit `L` and `ttl`.
#[derive(Clone, Debug)]
pub struct PermitsModel {
    limit: u64,
    ttl: u64,
    keys: HashMap<Vec<u8>, Key>,
    next_id: u64,
}

impl PermitsModel {
    /// Keys of limit `limit` whose permits last `ttl`.
    pub fn new(limit: u64, ttl: u64) -> Self {
        assert!(limit >= 1 && ttl >= 1, "a limit and a ttl of at least 1");
        Self {
            limit,
            ttl,
            keys: HashMap::new(),
            next_id: 0,
        }
    }

    /// The units `key` holds at `now` (the store's view, no operation).
    pub fn held(&self, key: &[u8], now: u64) -> u64 {
        self.keys.get(key).map_or(0, |k| k.held(now.max(k.seen)))
    }

    /// `acquire(key, cost)` at `now`.
    pub fn acquire(&mut self, key: &[u8], cost: u64, now: u64) -> Acquired {
        let (limit, ttl) = (self.limit, self.ttl);
        let k = self.keys.entry(key.to_vec()).or_default();
        let now = k.at(now);
        let held = k.held(now);
        let fits = held + cost.max(1) <= limit;
        let permit = (fits && cost >= 1).then(|| Permit {
            id: self.next_id,
            cost,
            expires: now + ttl,
        });
        if let Some(permit) = permit {
            self.next_id += 1;
            k.permits.push(permit);
        }
        let in_flight = k.held(now);
        Acquired {
            allowed: fits,
            permit,
            in_flight,
            remaining: limit - in_flight,
            reset: k.reset(now),
            retry_after: (!fits && cost <= limit).then(|| k.wait_for(cost.max(1), limit, now)),
        }
    }

    /// `release(key, permit)` at `now`: whether it freed the units, and the
    /// units held after.
    pub fn release(&mut self, key: &[u8], id: u64, now: u64) -> (bool, u64) {
        let k = self.keys.entry(key.to_vec()).or_default();
        let now = k.at(now);
        let live = k.permits.iter().position(|p| p.id == id && p.expires > now);
        if let Some(at) = live {
            k.permits.remove(at);
        }
        (live.is_some(), k.held(now))
    }

    /// `extend(key, permit)` at `now`: its new expiry, or `None` when it
    /// was not extended (expired, released or unknown).
    pub fn extend(&mut self, key: &[u8], id: u64, now: u64) -> Option<u64> {
        let ttl = self.ttl;
        let k = self.keys.entry(key.to_vec()).or_default();
        let now = k.at(now);
        let permit = k.permits.iter_mut().find(|p| p.id == id && p.expires > now)?;
        permit.expires = now + ttl;
        Some(permit.expires)
    }
}
