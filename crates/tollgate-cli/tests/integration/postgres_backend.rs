//! `simulate --backend postgres` against a database of the test's own: the
//! same decisions files and summary as the in-memory backend, no schema
//! left behind, and clear errors when the database cannot be used.

use std::path::Path;

use crate::support::*;
use tollgate::Strategy;
use tollgate_test_support::postgres_databases::TestDatabase;

/// Runs `simulate --strategy STRATEGY` on `trace`, on PostgreSQL at `url`
/// when given; returns the summary and the decisions file.
fn simulate(
    trace: &Path,
    strategy: Strategy,
    limit: &str,
    window: &str,
    dir: &Path,
    url: Option<&str>,
) -> (String, String) {
    let name = if url.is_none() { "memory" } else { "postgres" };
    let out = dir.join(format!("{name}.csv"));
    let mut command = Tollgate::simulate()
        .trace(trace)
        .strategy(strategy.name())
        .limit(limit)
        .window(window)
        .decisions(&out);
    if let Some(url) = url {
        command = command.postgres(url);
    }
    let summary = command.run_ok();
    let decisions = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    (summary, decisions)
}

/// The schemas of the database besides PostgreSQL's own.
fn schemas(db: &TestDatabase) -> String {
    db.sql(
        "SELECT string_agg(nspname, ',' ORDER BY nspname) FROM pg_namespace \
         WHERE nspname NOT LIKE 'pg_%' AND nspname <> 'information_schema'",
    )
}

#[test]
fn postgres_replays_decide_exactly_like_memory_and_leave_no_schema() {
    let db = TestDatabase::create();
    let dir = tempfile::tempdir().unwrap();
    let before = schemas(&db);
    for (trace, strategy, limit, window) in [
        ("sample.csv", Strategy::FixedWindow, "10", "10s"),
        ("sample.csv", Strategy::FixedWindow, "3", "1m"),
        ("sample.csv", Strategy::TokenBucket, "20", "1s"),
        ("rfc3339.csv", Strategy::SlidingWindow, "2", "2h"),
    ] {
        let case = format!("{trace} {} --limit {limit} --window {window}", strategy.name());
        let case_dir = tempfile::tempdir_in(dir.path()).unwrap();
        let (memory_summary, memory) =
            simulate(&example(trace), strategy, limit, window, case_dir.path(), None);
        let (summary, decisions) = simulate(
            &example(trace),
            strategy,
            limit,
            window,
            case_dir.path(),
            Some(&db.url()),
        );
        assert_eq!(summary, memory_summary, "{case}");
        assert!(memory.lines().count() > 1, "{case}: empty decisions file");
        assert_eq!(decisions, memory, "{case}: decisions differ");
        assert!(memory.contains(",false,"), "{case}: nothing was denied");
        assert_eq!(schemas(&db), before, "{case}: the run's schema was left behind");
    }
}

#[test]
fn an_unusable_postgres_url_fails_naming_the_problem() {
    let trace = example("sample.csv");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.csv");
    let db = TestDatabase::create();
    let port = tollgate_test_support::redis::free_port();
    let refused = format!("postgres://app:hunter2@127.0.0.1:{port}/app");
    let nobody = db.url_as("tollgate_nobody", "hunter2");
    for (url, fragment) in [
        (refused.as_str(), "could not connect"),
        (
            "postgres://app:hunter2@127.0.0.1:notaport/app",
            "is not a PostgreSQL connection URL",
        ),
        (
            nobody.as_str(),
            "the server refused the login: check the user and password",
        ),
    ] {
        let output = Tollgate::simulate()
            .trace(&trace)
            .strategy("token_bucket")
            .limit(10)
            .window("10s")
            .decisions(&out)
            .postgres(url)
            .run();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{url}: {stderr}");
        assert!(stderr.starts_with("error: --postgres-url"), "{stderr}");
        assert!(stderr.contains(fragment), "expected {fragment:?} in {stderr}");
        assert!(!stderr.contains("hunter2"), "{stderr}");
        assert!(!out.exists(), "no decisions file after a failure");
    }
    // --backend postgres needs a URL; a URL needs --backend postgres.
    let base = Tollgate::simulate()
        .trace(&trace)
        .strategy("all")
        .limit(1)
        .window("1s");
    let output = base.clone().arg("--backend").arg("postgres").run();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--postgres-url"));
    let output = base.arg("--postgres-url").arg("postgres://127.0.0.1:1/x").run();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("only used with --backend postgres"));
}
