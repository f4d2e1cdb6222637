//! The model of "Requests in flight" against what SEMANTICS.md promises a
//! holder, checked from outside it: on random operations over a few keys
//! (time moving on, sometimes stepping back, a key's time kept while it
//! holds a permit and forgotten when it holds none), the intervals holders see
//! (from an admitted acquire to their release, their permit's expiry or
//! the loss an extend reports) never hold more than `L` units of a key at
//! once; a release frees once; a denial's `retry_after` is exactly when
//! the units fit by expiries alone.

use proptest::prelude::*;
use tollgate_test_support::in_flight_model::PermitsModel;

#[derive(Clone, Debug)]
enum Op {
    /// After this many ticks (or this many back, when negative), key, cost.
    Acquire(i64, usize, u64),
    /// Release the n-th permit made (modulo), after this many ticks.
    Release(i64, usize),
    /// Extend the n-th permit made (modulo), after this many ticks.
    Extend(i64, usize),
}

fn op() -> impl Strategy<Value = Op> {
    let step = prop_oneof![8 => 0i64..20, 1 => -10i64..0];
    prop_oneof![
        3 => (step.clone(), 0usize..3, 0u64..5).prop_map(|(t, k, c)| Op::Acquire(t, k, c)),
        2 => (step.clone(), 0usize..64).prop_map(|(t, n)| Op::Release(t, n)),
        1 => (step, 0usize..64).prop_map(|(t, n)| Op::Extend(t, n)),
    ]
}

/// A permit as its holder sees it: held from `from` to `to` (exclusive).
struct Held {
    key: usize,
    cost: u64,
    from: u64,
    to: u64,
    id: u64,
}

const KEYS: [&[u8]; 3] = [b"a", b"b", b"c"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn holders_never_overlap_above_the_limit(limit in 1u64..5, ttl in 1u64..40, ops in proptest::collection::vec(op(), 1..80)) {
        let mut model = PermitsModel::new(limit, ttl);
        let mut now = 1_000u64;
        // Each key's clock: the latest time an operation on it used.
        let mut seen = [0u64; 3];
        let mut held: Vec<Held> = Vec::new();
        for op in ops {
            let step = match op { Op::Acquire(t, ..) | Op::Release(t, _) | Op::Extend(t, _) => t };
            now = now.saturating_add_signed(step);
            let key = match op {
                Op::Acquire(_, key, _) => key,
                Op::Release(_, n) | Op::Extend(_, n) if !held.is_empty() => held[n % held.len()].key,
                _ => continue,
            };
            // The store's clock for a key never goes back while the key
            // holds a permit; a key holding none is absent, its time
            // forgotten (and what its holders held over, in the store's
            // eyes, from then on).
            let holds = held.iter().any(|h| h.key == key && h.to > seen[key].max(now));
            if holds {
                seen[key] = seen[key].max(now);
            } else {
                seen[key] = now;
                for h in held.iter_mut().filter(|h| h.key == key) {
                    h.to = h.to.min(now);
                }
            }
            let latest = seen[key];
            match op {
                Op::Acquire(_, key, cost) => {
                    let answer = model.acquire(KEYS[key], cost, now);
                    prop_assert_eq!(answer.remaining, limit - answer.in_flight);
                    if cost > limit {
                        prop_assert!(!answer.allowed && answer.retry_after.is_none());
                    }
                    if let Some(permit) = answer.permit {
                        prop_assert_eq!(permit.cost, cost);
                        held.push(Held { key, cost, from: latest, to: permit.expires, id: permit.id });
                    }
                    if let Some(wait) = answer.retry_after {
                        // Exactly then, and not a tick before, the units fit.
                        let mut later = model.clone();
                        prop_assert!(later.acquire(KEYS[key], cost.max(1), latest + wait).allowed);
                        if wait > 1 {
                            let mut sooner = model.clone();
                            prop_assert!(!sooner.acquire(KEYS[key], cost.max(1), latest + wait - 1).allowed);
                        }
                    }
                }
                Op::Release(_, n) => {
                    let at = n % held.len();
                    let h = &mut held[at];
                    let (released, _) = model.release(KEYS[h.key], h.id, now);
                    prop_assert_eq!(released, h.to > latest, "a release frees a held permit, and only one");
                    let (again, _) = model.release(KEYS[h.key], h.id, now);
                    prop_assert!(!again, "a second release frees nothing");
                    h.to = h.to.min(latest);
                }
                Op::Extend(_, n) => {
                    let at = n % held.len();
                    let h = &mut held[at];
                    let extended = model.extend(KEYS[h.key], h.id, now);
                    prop_assert_eq!(extended.is_some(), h.to > latest, "only a permit still held is extended");
                    if let Some(expires) = extended {
                        prop_assert_eq!(expires, latest + ttl);
                        h.to = expires;
                    }
                }
            }
            // Every instant from now on that a holder believes held: the
            // permits covering it hold at most L units per key.
            for key in 0..KEYS.len() {
                let mut edges: Vec<u64> = held.iter().map(|h| h.from).filter(|&t| t >= seen[key]).collect();
                edges.push(seen[key]);
                for t in edges {
                    let units: u64 = held.iter().filter(|h| h.key == key && h.from <= t && t < h.to).map(|h| h.cost).sum();
                    prop_assert!(units <= limit, "{} units of key {} held at {}", units, key, t);
                    prop_assert_eq!(units, model.held(KEYS[key], t), "the model's count at {}", t);
                }
            }
        }
    }
}
