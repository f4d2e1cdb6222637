//! Awaiting admission on tokio's paused time, which the limiter's clock
//! follows (`TokioClock`): waiters proceed in the order they came, no
//! earlier than the strategy allows, at the limit's rate; deadlines refuse
//! without charging; a dropped waiter charges nothing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::backend::store::StoreBackend;
use tollgate::backend::Backend;
use tollgate::clock::Clock;
use tollgate::clock::ManualClock;
use tollgate::testing::{MapStore, TokioClock};
use tollgate::{Limiter, Strategy};

const EPOCH: Duration = Duration::from_secs(1_700_000_000);

fn limiter(strategy: Strategy, limit: u64, window: Duration) -> Arc<Limiter> {
    Arc::new(
        Limiter::builder()
            .strategy(strategy)
            .limit(limit)
            .window(window)
            .clock(TokioClock::new(EPOCH))
            .build()
            .unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn waiters_proceed_first_come_first_served_at_the_rate() {
    for strategy in Strategy::ALL {
        // 10 per second.
        let limiter = limiter(strategy, 10, Duration::from_secs(1));
        let start = tokio::time::Instant::now();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..64 {
            let (limiter, order) = (limiter.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let decision = limiter.acquire("k").await.unwrap();
                assert!(decision.allowed);
                order.lock().unwrap().push((i, start.elapsed()));
            }));
            // Each task joins the queue before the next is spawned.
            tokio::task::yield_now().await;
        }
        for task in tasks {
            task.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        let indices: Vec<usize> = order.iter().map(|&(i, _)| i).collect();
        assert_eq!(
            indices,
            (0..64).collect::<Vec<_>>(),
            "{strategy:?}: first come, first served"
        );
        let last = order.last().unwrap().1;
        match strategy {
            // A burst of 10, then one every 100 ms: the 64th at 5.4 s.
            Strategy::TokenBucket | Strategy::LeakyBucket => {
                assert_eq!(last, Duration::from_millis(5_400), "{strategy:?}");
            }
            // 10 per window: the 64th in the seventh window, from 6 s.
            _ => assert!(
                last >= Duration::from_secs(6) && last < Duration::from_secs(7),
                "{strategy:?}: {last:?}"
            ),
        }
        // Throughput: 64 admitted over the time the rate needs.
        for (k, &(_, at)) in order.iter().enumerate() {
            let k = k as u64;
            let earliest = match strategy {
                Strategy::TokenBucket | Strategy::LeakyBucket => {
                    Duration::from_millis(100 * k.saturating_sub(9))
                }
                _ => Duration::from_secs(k / 10),
            };
            assert!(
                at >= earliest,
                "{strategy:?}: waiter {k} at {at:?}, before {earliest:?}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_deadline_refuses_without_charging_and_a_dropped_waiter_gives_its_slot_back() {
    let limiter = limiter(Strategy::TokenBucket, 1, Duration::from_secs(1));
    assert!(limiter.acquire("k").await.unwrap().allowed);
    // The next slot is 1 s away: a deadline of 500 ms refuses at once.
    let asked = tokio::time::Instant::now();
    let refused = limiter
        .acquire_n_within("k", 1, Some(Duration::from_millis(500)))
        .await
        .unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, Some(Duration::from_millis(500)));
    assert_eq!(asked.elapsed(), Duration::ZERO, "refused without waiting");
    // A waiter dropped while it waits gives its reservation back.
    let waiting = limiter.clone();
    let task = tokio::spawn(async move { waiting.acquire("k").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    task.abort();
    let _ = task.await;
    let peek = limiter.allow_n("k", 0).await.unwrap();
    assert_eq!(
        peek.reset,
        Duration::from_millis(900),
        "only the first unit is charged"
    );
    let started = tokio::time::Instant::now();
    assert!(limiter.acquire("k").await.unwrap().allowed);
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(900),
        "the slot given back"
    );
    // A cost over the limit can never be admitted: refused at once.
    let never = limiter.acquire_n("k", 2).await.unwrap();
    assert_eq!((never.allowed, never.retry_after), (false, None));
}

/// One waiter of the random traces below: it arrives this many ms after
/// the one before, asks for this cost, with this deadline (ms, if any),
/// and its future is dropped after this long (ms, if at all).
type Waiter = (u64, u64, Option<u64>, Option<u64>);

/// How a waiter ended: admitted at this clock reading, refused, or dropped.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ended {
    Admitted(u64),
    Refused,
    Dropped,
}

/// A policy whose times are whole milliseconds (a bucket's emission
/// interval, a window), so that tokio's millisecond timer wakes each waiter
/// exactly when its turn comes.
fn ms_policy(kind: usize, limit: u64, steps: u64) -> (Strategy, u64, Duration) {
    match kind {
        0 => (
            Strategy::TokenBucket,
            limit,
            Duration::from_millis(100 * steps * limit),
        ),
        1 => (Strategy::FixedWindow, limit, Duration::from_millis(500 * steps)),
        _ => (Strategy::SlidingWindow, limit, Duration::from_millis(500 * steps)),
    }
}

/// Runs `waiters` against one key on tokio's paused time; each waiter's
/// arrival (clock reading) and how it ended, in arrival order.
async fn run_waiters<B: Backend>(
    limiter: &Arc<Limiter<B>>,
    clock: &TokioClock,
    waiters: &[Waiter],
) -> Vec<(u64, Ended)> {
    let ended = Arc::new(Mutex::new(vec![(0, Ended::Dropped); waiters.len()]));
    let mut tasks = Vec::new();
    for (i, &(after, cost, deadline, drop_after)) in waiters.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(after)).await;
        let (limiter, clock, ended) = (limiter.clone(), *clock, ended.clone());
        let arrived = clock.now_nanos();
        tasks.push(tokio::spawn(async move {
            let waiting = limiter.acquire_n_within("k", cost, deadline.map(Duration::from_millis));
            let result = match drop_after {
                Some(ms) => tokio::time::timeout(Duration::from_millis(ms), waiting)
                    .await
                    .ok(),
                None => Some(waiting.await),
            };
            let how = match result.map(Result::unwrap) {
                None => Ended::Dropped,
                Some(decision) if decision.allowed => Ended::Admitted(clock.now_nanos()),
                Some(_) => Ended::Refused,
            };
            ended.lock().unwrap()[i] = (arrived, how);
        }));
        // It asks (or joins the queue) before the next arrives.
        tokio::task::yield_now().await;
    }
    for task in tasks {
        task.await.unwrap();
    }
    let ended = ended.lock().unwrap().clone();
    ended
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 96, ..Default::default() })]

    /// Random arrivals, costs, deadlines and drops, in memory and on the
    /// custom-store adapter (a store whose calls are awaited, here ready
    /// at once, so a dropped waiter's cancel is answered as it is dropped):
    /// admitted
    /// waiters proceed in the order they came, every deadline holds, and
    /// nothing is admitted early: a plain limiter deciding each admitted
    /// request at its admission time admits it. When no waiter was
    /// dropped it also ends in the same state, so no refusal charged
    /// anything; with drops, the limiter has at most the plain one's units
    /// left (a dropped reservation is given back only when nothing was
    /// charged after it, never more). (A sliding window's
    /// turn can fall between two ticks of tokio's millisecond timer, so its
    /// waiters wake up to a millisecond late: for it the order and the
    /// deadlines are checked; its bound is checked on exact times in
    /// `reservations.rs`.)
    #[test]
    fn waiting_charges_what_is_admitted_first_come_first_served(
        kind in 0usize..3,
        limit in 1u64..5,
        steps in 1u64..4,
        on_store: bool,
        waiters in proptest::collection::vec(
            (
                proptest::prop_oneof![2 => 0u64..3, 1 => 0u64..700],
                1u64..3,
                proptest::option::of(0u64..2_500),
                proptest::option::weighted(0.25, 0u64..2_500),
            ),
            1..24,
        ),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let (strategy, limit, window) = ms_policy(kind, limit, steps);
        let (ended, real_peek, end) = rt.block_on(async {
            let clock = TokioClock::new(EPOCH);
            let builder = Limiter::builder().strategy(strategy).limit(limit).window(window).clock(clock);
            if on_store {
                let store = StoreBackend::new(Arc::new(MapStore::new(clock))).clock(clock);
                let limiter = Arc::new(builder.backend(store).build().unwrap());
                let ended = run_waiters(&limiter, &clock, &waiters).await;
                (ended, limiter.allow_n("k", 0).await.unwrap(), clock.now_nanos())
            } else {
                let limiter = Arc::new(builder.build().unwrap());
                let ended = run_waiters(&limiter, &clock, &waiters).await;
                (ended, limiter.check_n("k", 0), clock.now_nanos())
            }
        });
        let admitted: Vec<(usize, u64)> = ended
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e.1 {
                Ended::Admitted(at) => Some((i, at)),
                _ => None,
            })
            .collect();
        for pair in admitted.windows(2) {
            proptest::prop_assert!(pair[0].1 <= pair[1].1, "waiter {} before {}: {:?}", pair[0].0, pair[1].0, ended);
        }
        for (i, &(arrived, how)) in ended.iter().enumerate() {
            let (_, cost, deadline, _) = waiters[i];
            if let (Ended::Admitted(at), Some(d)) = (how, deadline) {
                proptest::prop_assert!(at - arrived <= d * 1_000_000, "waiter {} admitted past its deadline", i);
            }
            if how == Ended::Refused && deadline.is_none() {
                proptest::prop_assert!(cost > limit, "waiter {} refused without a deadline", i);
            }
        }
        if strategy == Strategy::SlidingWindow {
            return Ok(());
        }
        let clock = ManualClock::default();
        let plain = Limiter::builder()
            .strategy(strategy)
            .limit(limit)
            .window(window)
            .clock(clock.clone())
            .build()
            .unwrap();
        for &(i, at) in &admitted {
            clock.set_nanos(at);
            proptest::prop_assert!(plain.check_n("k", waiters[i].1).allowed, "waiter {} admitted early", i);
        }
        clock.set_nanos(end);
        let plain_peek = plain.check_n("k", 0);
        if ended.iter().any(|e| e.1 == Ended::Dropped) {
            proptest::prop_assert!(real_peek.remaining <= plain_peek.remaining, "given back more than charged: {:?}", ended);
            return Ok(());
        }
        proptest::prop_assert_eq!(plain_peek, real_peek, "charged: {:?}", ended);
    }
}

#[tokio::test(start_paused = true)]
async fn jitter_spreads_a_windows_retries_within_its_bound_and_the_deadline() {
    let jittered = |max: Duration| {
        Limiter::builder()
            .strategy(Strategy::FixedWindow)
            .limit(1)
            .window(Duration::from_secs(1))
            .clock(TokioClock::new(EPOCH))
            .acquire_jitter(max)
            .build()
            .unwrap()
    };
    // One per second: each acquisition after the first waits for the next
    // window, then up to 100 ms more.
    let limiter = jittered(Duration::from_millis(100));
    let start = tokio::time::Instant::now();
    assert!(limiter.acquire("k").await.unwrap().allowed);
    let mut extras = Vec::new();
    for window in 1..=12u64 {
        assert!(limiter.acquire("k").await.unwrap().allowed);
        let turned = start + Duration::from_secs(window);
        let extra = tokio::time::Instant::now() - turned;
        assert!(
            extra <= Duration::from_millis(100),
            "window {window}: {extra:?} late"
        );
        extras.push(extra);
    }
    extras.sort_unstable();
    extras.dedup();
    assert!(extras.len() > 1, "the extra waits vary: {extras:?}");
    assert!(
        extras.iter().any(|e| *e >= Duration::from_millis(1)),
        "{extras:?}"
    );

    // The extra never carries a waiter past its deadline: the window turns
    // within a second, the deadline is 1 ms after that, the jitter up to
    // 10 minutes.
    let limiter = jittered(Duration::from_secs(600));
    assert!(limiter.acquire("k").await.unwrap().allowed);
    let asked = tokio::time::Instant::now();
    let within = Duration::from_secs(1) + Duration::from_millis(1);
    let decision = limiter.acquire_n_within("k", 1, Some(within)).await.unwrap();
    assert!(
        decision.allowed,
        "admitted at the deadline, after the window turned"
    );
    assert!(asked.elapsed() <= within, "woken by its deadline at the latest");

    // A jitter longer than an hour is refused, naming the setting.
    let err = Limiter::builder()
        .limit(1)
        .window(Duration::from_secs(1))
        .acquire_jitter(Duration::from_secs(7_200))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("acquire_jitter"), "{err}");
}

/// A limiter of one unit per second on the store adapter, whose calls are
/// awaited (the in-memory backend's are not).
fn awaited_limiter() -> Arc<Limiter<StoreBackend<Arc<MapStore>>>> {
    let clock = TokioClock::new(EPOCH);
    let store = StoreBackend::new(Arc::new(MapStore::new(clock))).clock(clock);
    Arc::new(
        Limiter::builder()
            .strategy(Strategy::TokenBucket)
            .limit(1)
            .window(Duration::from_secs(1))
            .clock(clock)
            .backend(store)
            .build()
            .unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn on_an_awaited_store_a_dropped_waiter_gives_its_slot_back() {
    let limiter = awaited_limiter();
    let start = tokio::time::Instant::now();
    assert!(limiter.acquire("k").await.unwrap().allowed);
    // The waiter reserves the slot at 1 s and is dropped while it waits.
    let dropped = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire("k").await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    // The dropped waiter's cancel gave the reservation back (no unit was
    // charged after it), so the next proceeds in that slot, not in the one
    // after.
    assert!(limiter.acquire("k").await.unwrap().allowed);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn waiters_learn_their_turn_without_waiting_out_the_turns_ahead() {
    let limiter = awaited_limiter();
    let start = tokio::time::Instant::now();
    assert!(limiter.acquire("k").await.unwrap().allowed);
    // Four at once, each willing to wait 2.5 s: the slots at 1 s and 2 s
    // are taken in arrival order, the third and fourth are refused at
    // once, while the first two are still waiting.
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let decision = limiter
                    .acquire_n_within("k", 1, Some(Duration::from_millis(2_500)))
                    .await
                    .unwrap();
                (decision.allowed, start.elapsed())
            })
        })
        .collect();
    let mut ended = Vec::new();
    for waiter in waiters {
        ended.push(waiter.await.unwrap());
    }
    assert_eq!(
        ended,
        [
            (true, Duration::from_secs(1)),
            (true, Duration::from_secs(2)),
            (false, Duration::ZERO),
            (false, Duration::ZERO),
        ]
    );
}
