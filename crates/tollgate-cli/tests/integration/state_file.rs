//! `tollgate serve --state-file`: in-memory counts go on across a restart
//! under load, exactly after SIGTERM and within one interval after SIGKILL;
//! a damaged file stops the start unless the operator said to discard it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate_test_support::redis::free_port;

use crate::support::Serve;

/// 10,000 an hour per tenant: nobody is denied, so what each was charged
/// shows exactly in `remaining`.
const POLICIES: &str = "tollgate:
  default: { limit: 10000, window: 1h, strategy: fixed_window }
";
const LIMIT: u64 = 10_000;
const TENANTS: usize = 20;

fn start(dir: &Path, port: u16, extra: &[&str]) -> Serve {
    let file = dir.join("p.yaml");
    std::fs::write(&file, POLICIES).unwrap();
    let state = dir.join("state");
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec![
        "--config",
        file.to_str().unwrap(),
        "--listen",
        &listen,
        "--state-file",
        state.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    Serve::start(&args)
}

/// `POST /v1/decide` for `tenant` with `cost`: `Some(remaining)` when
/// answered, `None` when the service did not answer (stopped).
fn decide(port: u16, tenant: usize, cost: u64) -> Option<u64> {
    let body = format!(r#"{{"key": "t{tenant}", "cost": {cost}}}"#);
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let request = format!(
        "POST /v1/decide HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    if !answer.starts_with("HTTP/1.1 200") {
        return None;
    }
    assert!(answer.contains(r#""allowed":true"#), "{answer}");
    let at = answer.find(r#""remaining":"#)? + r#""remaining":"#.len();
    answer[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Load on every tenant from 4 threads until `stop`: the units each
/// tenant was answered as charged.
fn load(port: u16, stop: Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<Vec<u64>>> {
    (0..4)
        .map(|thread| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut charged = vec![0u64; TENANTS];
                let mut i = thread;
                while !stop.load(Ordering::Relaxed) {
                    let tenant = i % TENANTS;
                    if decide(port, tenant, 1).is_some() {
                        charged[tenant] += 1;
                    }
                    i += 4;
                }
                charged
            })
        })
        .collect()
}

fn total(threads: Vec<std::thread::JoinHandle<Vec<u64>>>) -> Vec<u64> {
    let mut total = vec![0u64; TENANTS];
    for thread in threads {
        for (t, n) in thread.join().unwrap().into_iter().enumerate() {
            total[t] += n;
        }
    }
    total
}

/// What each tenant has spent, read with peeks (cost 0 charges nothing).
fn spent(port: u16) -> Vec<u64> {
    (0..TENANTS)
        .map(|tenant| LIMIT - decide(port, tenant, 0).expect("a peek is answered"))
        .collect()
}

#[test]
fn counts_go_on_exactly_across_a_sigterm_restart_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut serve = start(dir.path(), port, &[]);
    serve.wait_for_log("serving HTTP on");
    let stop = Arc::new(AtomicBool::new(false));
    let threads = load(port, stop.clone());
    // Under load: stop, and the load runs into the closed listener.
    while spent(port).iter().sum::<u64>() < 400 {}
    serve.signal("TERM");
    assert_eq!(serve.wait_exit().code(), Some(0));
    stop.store(true, Ordering::Relaxed);
    let charged = total(threads);
    assert!(charged.iter().all(|&n| n > 0), "{charged:?}");

    let mut again = start(dir.path(), port, &[]);
    again.wait_for_log("restored");
    again.wait_for_log("serving HTTP on");
    // Nothing lost, nothing doubled: every answered charge, once.
    assert_eq!(spent(port), charged);
    again.signal("TERM");
    assert_eq!(again.wait_exit().code(), Some(0));
}

#[test]
fn after_sigkill_at_most_one_interval_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let state = dir.path().join("state");
    let mut serve = start(dir.path(), port, &["--state-interval", "1s"]);
    serve.wait_for_log("serving HTTP on");
    for tenant in 0..TENANTS {
        decide(port, tenant, 7).unwrap();
    }
    // Held by the next save: wait for a file written after them, then
    // spend more.
    let charged = std::time::SystemTime::now();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::metadata(&state)
        .and_then(|m| m.modified())
        .map_or(true, |written| written <= charged)
    {
        assert!(std::time::Instant::now() < deadline, "no state file written");
        std::thread::yield_now();
    }
    let saved_by_then = [7u64; TENANTS];
    for tenant in 0..TENANTS {
        decide(port, tenant, 3).unwrap();
    }
    serve.signal("KILL");
    serve.wait_exit();

    let mut again = start(dir.path(), port, &[]);
    again.wait_for_log("serving HTTP on");
    // Each tenant's count is what a save held: 7 (the 3 after it lost), or
    // 10 if a save came between; never less than the save before, never
    // more than was charged.
    for (tenant, spent) in spent(port).into_iter().enumerate() {
        assert!(
            (saved_by_then[tenant]..=10).contains(&spent),
            "tenant {tenant} restored with {spent} spent"
        );
    }
    again.signal("TERM");
    assert_eq!(again.wait_exit().code(), Some(0));
}

#[test]
fn a_damaged_state_file_stops_the_start_unless_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::write(&state, b"PK\x03\x04 not a state file").unwrap();
    let port = free_port();
    let mut refused = start(dir.path(), port, &[]);
    let line = refused.wait_for_log("not a tollgate state file");
    assert!(line.contains("--discard-invalid-state"), "{line}");
    assert_ne!(refused.wait_exit().code(), Some(0));
    assert!(state.exists(), "a refused file is left as it was");

    let mut started = start(dir.path(), port, &["--discard-invalid-state"]);
    started.wait_for_log("starting empty as --discard-invalid-state says");
    started.wait_for_log("serving HTTP on");
    assert!(dir.path().join("state.invalid").exists());
    assert_eq!(decide(port, 0, 1), Some(LIMIT - 1));
    started.signal("TERM");
    assert_eq!(started.wait_exit().code(), Some(0));
}
