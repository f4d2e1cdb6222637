//! `simulate --backend redis` against a real `redis-server` started by the
//! test: the same decisions files and summary as the in-memory backend, with
//! the flags' policies and with a policy file's, no keys left behind, and
//! clear errors when the server cannot be used.

use std::path::Path;

use crate::support::*;
use tollgate::Strategy;
use tollgate_test_support::redis::RedisServer;

/// Runs `simulate --strategy all` on `trace`, on Redis at `redis_url` when
/// given; returns the summary and the four decisions files' contents.
fn simulate_all(
    trace: &Path,
    limit: &str,
    window: &str,
    dir: &Path,
    redis_url: Option<&str>,
) -> (String, Vec<String>) {
    let name = if redis_url.is_none() { "memory" } else { "redis" };
    let mut command = Tollgate::simulate()
        .trace(trace)
        .strategy("all")
        .limit(limit)
        .window(window)
        .decisions(dir.join(format!("{name}.csv")));
    if let Some(url) = redis_url {
        command = command.redis(url);
    }
    let summary = command.run_ok();
    let files = Strategy::ALL
        .iter()
        .map(|s| {
            let path = dir.join(format!("{name}.{}.csv", s.name()));
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect();
    (summary, files)
}

/// `calls=N` of one command in `INFO commandstats`.
fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

#[test]
fn redis_replays_decide_exactly_like_memory_and_leave_no_keys() {
    let server = RedisServer::start();
    let url = server.url();
    // Keys that belong to someone else survive the runs' cleanup.
    server.cli(&["SET", "tollgate::fixed_window:10.0.0.40", "app state"]);
    server.cli(&["SET", "tollgate-simulate/1-2::fixed_window:x", "1"]);
    let dir = tempfile::tempdir().unwrap();
    // Policies whose emission interval is a whole number of microseconds,
    // so nanosecond and microsecond arithmetic agree. The sample is sorted;
    // rfc3339.csv is not, and has weighted requests and a peek.
    let cases = [
        ("sample.csv", "10", "10s"),
        ("sample.csv", "20", "1s"),
        ("sample.csv", "3", "1m"),
        ("rfc3339.csv", "4", "1s"),
        ("rfc3339.csv", "2", "2h"),
    ];
    for (trace, limit, window) in cases {
        let case = format!("{trace} --limit {limit} --window {window}");
        let sets_before = calls(&server, "set");
        let case_dir = tempfile::tempdir_in(dir.path()).unwrap();
        let (memory_summary, memory) = simulate_all(&example(trace), limit, window, case_dir.path(), None);
        let (redis_summary, on_redis) =
            simulate_all(&example(trace), limit, window, case_dir.path(), Some(&url));
        assert_eq!(redis_summary, memory_summary, "{case}");
        for ((strategy, m), r) in Strategy::ALL.iter().zip(&memory).zip(&on_redis) {
            assert!(m.lines().count() > 1, "{case}: empty decisions file");
            assert_eq!(r, m, "{case}: {strategy} decisions differ");
        }
        // The scripts stored state on the server, and the run deleted it.
        assert!(
            calls(&server, "set") > sets_before,
            "{case}: nothing was stored on Redis"
        );
        assert_eq!(server.cli(&["DBSIZE"]), "2", "{case}: keys left behind");
    }
    assert!(calls(&server, "scan") >= cases.len() as u64);
    assert_eq!(
        server.cli(&["GET", "tollgate::fixed_window:10.0.0.40"]),
        "app state"
    );
}

#[test]
fn an_unusable_redis_url_fails_naming_the_problem() {
    let trace = example("sample.csv");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.csv");
    let port = tollgate_test_support::redis::free_port().to_string();
    let refused = format!("redis://127.0.0.1:{port}");
    for (url, fragments) in [
        (
            refused.as_str(),
            vec![refused.as_str(), "nothing accepts connections"],
        ),
        (
            "http://127.0.0.1:1",
            vec!["http://127.0.0.1:1", "not a valid Redis URL"],
        ),
        (
            "redis://:hunter2@127.0.0.1:1",
            vec!["redis://:***@127.0.0.1:1", "nothing accepts connections"],
        ),
        (
            "redis://app:hunter2@127.0.0.1:1",
            vec!["redis://app:***@127.0.0.1:1", "nothing accepts connections"],
        ),
    ] {
        let output = Tollgate::simulate()
            .trace(&trace)
            .strategy("token_bucket")
            .limit(10)
            .window("10s")
            .decisions(&out)
            .redis(url)
            .run();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{url}: {stderr}");
        assert!(output.stdout.is_empty(), "{url}");
        assert!(stderr.starts_with("error: --redis-url "), "{stderr}");
        for fragment in fragments {
            assert!(stderr.contains(fragment), "expected {fragment:?} in {stderr}");
        }
        assert!(!stderr.contains("hunter2"), "{stderr}");
        assert!(!out.exists(), "no decisions file after a failure");
    }

    // --backend redis needs a URL; a URL needs --backend redis.
    let base = Tollgate::simulate()
        .trace(&trace)
        .strategy("all")
        .limit(1)
        .window("1s");
    let output = base.clone().arg("--backend").arg("redis").run();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--redis-url"));
    let output = base.arg("--redis-url").arg("redis://127.0.0.1:1").run();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("only used with --backend redis"));
}

#[test]
fn ctrl_c_stops_a_redis_replay_and_still_deletes_its_keys() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // A trace long enough that the replay is still running when interrupted.
    let trace = dir.path().join("long.csv");
    let mut text = String::from("time,key\n");
    for i in 0..200_000u64 {
        text.push_str(&format!("{},k{}\n", 1_714_564_800_000 + i, i % 500));
    }
    std::fs::write(&trace, text).unwrap();
    let out = dir.path().join("out.csv");
    let mut child = Tollgate::simulate()
        .trace(&trace)
        .strategy("all")
        .limit(10)
        .window("10s")
        .decisions(&out)
        .redis(&server.url())
        .spawn();
    // Interrupt once the replay has stored state on the server.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while server.cli(&["DBSIZE"]) == "0" {
        assert!(
            std::time::Instant::now() < deadline,
            "the replay never wrote to Redis"
        );
        assert!(child.try_wait().unwrap().is_none(), "the replay ended early");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert_eq!(stderr.trim(), "error: interrupted");
    assert!(output.stdout.is_empty());
    assert_eq!(
        server.cli(&["DBSIZE"]),
        "0",
        "an interrupted replay left keys behind"
    );
    assert!(!out.exists(), "no decisions file from an interrupted replay");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "only the trace remains");
}

/// Runs `simulate --config` on `trace`, on Redis at `redis_url` when given;
/// returns the summary and the decisions file.
fn simulate_file(trace: &Path, config: &Path, dir: &Path, redis_url: Option<&str>) -> (String, String) {
    let out = dir.join(if redis_url.is_none() {
        "memory.csv"
    } else {
        "redis.csv"
    });
    let mut command = Tollgate::simulate().trace(trace).config(config).decisions(&out);
    if let Some(url) = redis_url {
        command = command.redis(url);
    }
    let summary = command.run_ok();
    let decisions = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    (summary, decisions)
}

/// Replays the sample, its paths as resources, against the policy file
/// `text` in memory and on a fresh server; checks that both decide alike,
/// that the file's policies denied some requests, and that the run stored
/// state on the server and deleted it (and only it) afterwards.
fn file_replays_alike(text: &str) {
    let server = RedisServer::start();
    // Keys of an application and of another run survive the cleanup.
    server.cli(&["SET", "tollgate:/api/login:fixed_window:10.0.0.40", "app state"]);
    server.cli(&["SET", "tollgate-simulate/1-2:/api/login:fixed_window:x", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let trace = sample_with_resources(dir.path());
    let config = write(dir.path(), "policies.yaml", text);
    let (memory_summary, memory) = simulate_file(&trace, &config, dir.path(), None);
    let sets_before = calls(&server, "set") + calls(&server, "fcall") + calls(&server, "evalsha");
    let (redis_summary, on_redis) = simulate_file(&trace, &config, dir.path(), Some(&server.url()));
    assert_eq!(redis_summary, memory_summary);
    assert_eq!(on_redis, memory, "the decisions differ");
    assert!(
        memory.contains(",false,"),
        "the policies should deny some requests"
    );
    assert_eq!(memory.lines().count(), 3_058, "a row per request of the sample");
    assert!(
        calls(&server, "set") + calls(&server, "fcall") + calls(&server, "evalsha") > sets_before,
        "nothing was decided on Redis"
    );
    assert_eq!(server.cli(&["DBSIZE"]), "2", "keys left behind");
    assert_eq!(
        server.cli(&["GET", "tollgate:/api/login:fixed_window:10.0.0.40"]),
        "app state"
    );
}

#[test]
fn a_policy_file_replays_on_redis_exactly_like_memory() {
    // Every strategy, each resource under its own keys; emission intervals
    // (window / limit) are whole microseconds.
    file_replays_alike(
        "tollgate:\n  strategy: token_bucket\n  default: { limit: 10, window: 10s }\n  resources:\n    \
         /api/login: { limit: 4, window: 2s, strategy: fixed_window }\n    \
         /api/search: { limit: 8, window: 2s, strategy: sliding_window }\n    \
         /health: { limit: 5, window: 1s, strategy: leaky_bucket }\n    \
         /api/items: { limit: 2, window: 1s }\n",
    );
}

#[test]
fn exempt_and_deny_lists_and_shadow_mode_replay_on_redis_exactly_like_memory() {
    file_replays_alike(
        "tollgate:\n  exempt: [10.0.1.0/24]\n  default: { limit: 10, window: 10s }\n  resources:\n    \
         /api/login: { limit: 4, window: 2s, strategy: fixed_window, deny: [203.0.113.9, 172.16.0.0/12] }\n    \
         /api/search: { limit: 8, window: 2s, strategy: sliding_window, shadow: true, exempt: [10.0.0.3] }\n",
    );
}

#[test]
fn a_compound_policy_file_replays_on_redis_exactly_like_memory() {
    file_replays_alike(
        "tollgate:\n  default:\n    limits:\n      - { limit: 5, window: 1s, strategy: token_bucket }\n      \
         - { limit: 40, window: 1m, strategy: sliding_window }\n  resources:\n    /api/login:\n      limits:\n        \
         - { limit: 4, window: 2s, strategy: fixed_window }\n        \
         - { limit: 8, window: 1m, strategy: leaky_bucket }\n    \
         /api/search: { limit: 8, window: 2s, strategy: sliding_window }\n",
    );
}

#[test]
fn a_policy_redis_cannot_serve_is_named_by_its_file_and_field() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let trace = sample_with_resources(dir.path());
    let config = write(
        dir.path(),
        "policies.yaml",
        "tollgate:\n  default: { limit: 10, window: 10s }\n  resources:\n    \
         \"huge one\": { limit: 3000000000000000, window: 1s, strategy: token_bucket }\n",
    );
    let out = dir.path().join("out.csv");
    let output = Tollgate::simulate()
        .trace(&trace)
        .config(&config)
        .decisions(&out)
        .redis(&server.url())
        .run();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(output.stdout.is_empty());
    let expected = format!(
        "error: {}: tollgate.resources.\"huge one\".limit: 3000000000000000 exceeds 2^51",
        config.display()
    );
    assert!(stderr.starts_with(&expected), "{stderr}\nexpected: {expected}");
    assert!(!out.exists(), "no decisions file after a failure");
    assert_eq!(server.cli(&["DBSIZE"]), "0");
}
