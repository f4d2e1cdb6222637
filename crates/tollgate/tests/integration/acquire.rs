//! Awaiting admission on tokio's paused time, which the limiter's clock
//! follows (`TokioClock`): waiters proceed in the order they came, no
//! earlier than the strategy allows, at the limit's rate; deadlines refuse
//! without charging; a dropped waiter charges nothing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::testing::TokioClock;
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
