//! `decide_fixed_window`, the one-statement-loop decision of a policy of
//! one fixed window, against the general `decide` (which the differential
//! tests hold to the core's pure functions): on random calls of several
//! requests (keys repeated within a call, costs of 0 and over the limit,
//! the caller's clock going back, blocks set and lifted, rows reset), each
//! call's replies and the rows it leaves are the same in two schemas, one
//! decided by each function.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tokio_postgres::Client;
use tollgate_postgres::PostgresBackend;

use crate::support::TestDatabase;

/// The arguments both functions take, after the limits.
const CALL: &str =
    "(ARRAY[1]::int2[], ARRAY[$1]::int8[], ARRAY[$2]::int8[], ARRAY[greatest($2 / $1, 1)]::int8[], \
                    ARRAY[0, 0, 0, 0]::int8[], $3::bytea[], $4::int8[], NULL, 1000000, $5)";

/// One step of a trace: a call of several requests, or an operation on a
/// key, `dt` microseconds after the step before (negative: the caller's
/// clock went back).
#[derive(Clone, Debug)]
enum Step {
    Decide { dt: i64, requests: Vec<(u8, i64)> },
    Block { dt: i64, key: u8, micros: i64 },
    Reset { key: u8 },
}

fn step(limit: i64) -> impl proptest::strategy::Strategy<Value = Step> {
    let dt = prop_oneof![6 => 0i64..2_000_000, 1 => -1_500_000i64..0];
    let request = (
        0u8..4,
        prop_oneof![1 => Just(0i64), 8 => 1i64..=limit, 1 => limit..=limit + 2],
    );
    prop_oneof![
        8 => (dt.clone(), proptest::collection::vec(request, 1..8))
            .prop_map(|(dt, requests)| Step::Decide { dt, requests }),
        1 => (dt, 0u8..4, prop_oneof![Just(0i64), 1i64..3_000_000])
            .prop_map(|(dt, key, micros)| Step::Block { dt, key, micros }),
        1 => (0u8..4).prop_map(|key| Step::Reset { key }),
    ]
}

fn trace() -> impl proptest::strategy::Strategy<Value = (i64, i64, Vec<Step>)> {
    (1i64..6, 1i64..3_000_000).prop_flat_map(|(limit, window)| {
        proptest::collection::vec(step(limit), 1..30).prop_map(move |steps| (limit, window, steps))
    })
}

/// The rows of `schema`: key, state, block, in key order (`expires` left
/// out: it is on the database's clock, which moves between the two calls).
async fn rows(
    client: &Client,
    schema: &str,
) -> Vec<(Vec<u8>, Option<i64>, Option<i64>, Option<i64>, Option<i64>)> {
    client
        .query(
            &format!("SELECT key, a, b, c, blocked FROM {schema}.state ORDER BY key"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

/// Applies `step` at `at` to `schema`, deciding with `function`; returns
/// a decision's replies (none for an operation).
async fn apply(
    client: &Client,
    schema: &str,
    function: &str,
    limits: (i64, i64),
    at: i64,
    step: &Step,
) -> Vec<i64> {
    let (limit, window) = limits;
    match step {
        Step::Decide { dt, requests } => {
            let keys: Vec<Vec<u8>> = requests.iter().map(|r| vec![b'k', r.0]).collect();
            let costs: Vec<i64> = requests.iter().map(|r| r.1).collect();
            let sql = format!("SELECT {schema}.{function}{CALL}");
            let row = client
                .query_one(&sql, &[&limit, &window, &keys, &costs, &(at + dt)])
                .await
                .unwrap();
            row.get(0)
        }
        Step::Block { dt, key, micros } => {
            let sql = format!(
                "SELECT {schema}.operate(ARRAY[1]::int2[], ARRAY[$1]::int8[], ARRAY[$2]::int8[], \
                 ARRAY[1]::int8[], ARRAY[0, 0, 0, 0]::int8[], ARRAY[$3]::bytea[], 'block', $4, 1000000, $5)"
            );
            let key = vec![b'k', *key];
            client
                .execute(&sql, &[&limit, &window, &key, micros, &(at + dt)])
                .await
                .unwrap();
            Vec::new()
        }
        Step::Reset { key } => {
            let sql = format!("DELETE FROM {schema}.state WHERE key = $1");
            client.execute(&sql, &[&vec![b'k', *key]]).await.unwrap();
            Vec::new()
        }
    }
}

/// Runs `steps` on both schemas, failing at the first step whose replies
/// or rows differ.
async fn same_on_both(client: &Client, limits: (i64, i64), steps: &[Step]) -> Result<(), TestCaseError> {
    client
        .batch_execute("TRUNCATE general.state; TRUNCATE fast.state")
        .await
        .unwrap();
    let mut at = 1_700_000_000_000_000i64;
    for (i, step) in steps.iter().enumerate() {
        let general = apply(client, "general", "decide", limits, at, step).await;
        let fast = apply(client, "fast", "decide_fixed_window", limits, at, step).await;
        prop_assert_eq!(fast, general, "step {} ({:?}): replies differ", i, step);
        let (fast, general) = (rows(client, "fast").await, rows(client, "general").await);
        prop_assert_eq!(fast, general, "step {} ({:?}): rows differ", i, step);
        if let Step::Decide { dt, .. } | Step::Block { dt, .. } = step {
            at += dt;
        }
    }
    Ok(())
}

#[test]
fn decide_fixed_window_answers_and_writes_as_decide_does() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(TestDatabase::create());
    let client = runtime.block_on(async {
        for schema in ["general", "fast"] {
            PostgresBackend::builder(db.url())
                .schema(schema)
                .connect()
                .await
                .unwrap();
        }
        db.client().await
    });
    let mut runner = TestRunner::new(Config {
        cases: 96,
        ..Config::default()
    });
    runner
        .run(&trace(), |(limit, window, steps)| {
            runtime.block_on(same_on_both(&client, (limit, window), &steps))
        })
        .unwrap();
}
