//! `RateLimit::delay`: a request over the rate is held for its turn and
//! then passed on, and one whose turn is further away than the longest
//! hold is refused as before, through real listeners on real time (the
//! limiter's system clock and the server's timers; the holds are checked
//! against lower bounds).

use crate::on_both_stacks;
use crate::support;

use std::time::{Duration, Instant};

use support::apps::{start, Stack};
use support::{client, header, url};
use tollgate::{Limiter, Strategy};
use tollgate_http::RateLimit;

async fn requests_are_held_for_their_turn(stack: Stack) {
    // One request every 300 ms, held up to one second.
    let limiter = Limiter::builder()
        .strategy(Strategy::TokenBucket)
        .limit(1)
        .window(Duration::from_millis(300))
        .build()
        .unwrap();
    let server = start(stack, RateLimit::new(limiter).delay(Duration::from_secs(1))).await;
    let c = client();
    let first = c.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let started = Instant::now();
    let second = c.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(second.status(), 200, "held, then passed on");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "held {:?}",
        started.elapsed()
    );
    assert_eq!(header(&second, "ratelimit-remaining").as_deref(), Some("0"));
    // Four at once: the next three slots are within the second, the
    // fourth is not.
    let started = Instant::now();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (c, u) = (c.clone(), url(server.addr, "/"));
            tokio::spawn(async move {
                let res = c.get(u).send().await.unwrap();
                (res.status().as_u16(), header(&res, "retry-after"), Instant::now())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers.sort_by_key(|a| a.2);
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    assert_eq!(statuses, [429, 200, 200, 200], "{answers:?}");
    assert!(answers[0].1.is_some(), "the refusal says when to come back");
    assert!(
        answers[3].2 - started >= Duration::from_millis(800),
        "the third held request waited its turn: {:?}",
        answers[3].2 - started
    );
}

on_both_stacks!(requests_are_held_for_their_turn);
