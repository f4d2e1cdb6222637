//! The work of the tests of exact limits across processes: each worker
//! ([`crate::workers`]) hammers the same keys of the same limiters from
//! many tasks at once and says what each task admitted; the test adds up
//! what all the workers admitted per limiter and key.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tollgate::backend::Backend;
use tollgate::Limiter;

use crate::workers::{fields, WorkerTest};

/// In a worker: for each limiter (by name) and each key with its cost,
/// `tasks` concurrent tasks each ask `requests` times for the cost; says
/// `<name> <key> <units admitted>` for each task, then `done`.
///
/// # Panics
///
/// If a decision fails, or the decisions take longer than `within` in
/// all (so that a worker never outlives a stuck test for long).
pub async fn admit_and_say<B: Backend>(
    worker: &WorkerTest,
    limiters: &[(String, Arc<Limiter<B>>)],
    keys: &[(&'static str, u64)],
    tasks: usize,
    requests: usize,
    within: Duration,
) {
    let deadline = tokio::time::Instant::now() + within;
    let mut spawned = Vec::new();
    for (name, limiter) in limiters {
        for &(key, cost) in keys {
            for _ in 0..tasks {
                let (name, limiter) = (name.clone(), limiter.clone());
                spawned.push(tokio::spawn(async move {
                    let mut admitted = 0;
                    for _ in 0..requests {
                        if limiter.allow_n(key, cost).await.expect("a decision").allowed {
                            admitted += cost;
                        }
                    }
                    (name, key, admitted)
                }));
            }
        }
    }
    for task in spawned {
        let (name, key, admitted) = tokio::time::timeout_at(deadline, task)
            .await
            .unwrap_or_else(|_| panic!("the worker's decisions took over {within:?}"))
            .expect("a worker's task");
        worker.say(format_args!("{name} {key} {admitted}"));
    }
    worker.done();
}

/// In the test: the units every worker admitted, added up per limiter
/// name and key, from the lines of [`admit_and_say`] that
/// [`crate::workers::Workers::finish`] returns.
///
/// # Panics
///
/// If a line is not `<name> <key> <units>`, quoting it.
pub fn admitted(outputs: &[Vec<String>]) -> HashMap<(String, String), u64> {
    let mut admitted = HashMap::new();
    for line in outputs.iter().flatten() {
        let [name, key, units] = fields(line);
        let units: u64 = units
            .parse()
            .unwrap_or_else(|err| panic!("worker line {line:?}: units {units:?}: {err}"));
        *admitted.entry((name.to_owned(), key.to_owned())).or_default() += units;
    }
    admitted
}
