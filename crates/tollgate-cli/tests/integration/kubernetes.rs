//! `tollgate serve` as a Kubernetes pod runs it (deploy/kubernetes/): a
//! policy file mounted from a ConfigMap, changed the way the kubelet
//! changes it, and SIGTERM under load with a drain delay, the way the
//! kubelet stops a pod while its Service forgets it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate_test_support::redis::free_port;

use crate::support::{get, post, post_request, Serve};

/// The policies with the limit of `login`.
fn policies(login: u64) -> String {
    format!("tollgate:\n  default: {{ limit: 100, window: 1m }}\n  resources:\n    login: {{ limit: {login}, window: 1m }}\n")
}

/// Writes `text` as the ConfigMap volume `dir` holds it after the kubelet's
/// update number `generation`: the file in a new timestamped folder,
/// `..data` moved onto that folder by renaming a new link over it, the
/// file itself a link through `..data`, and the folder before removed.
fn write_configmap(dir: &Path, generation: u32, text: &str) {
    let folder = format!("..2026_12_07_10_00_00.{generation}");
    std::fs::create_dir(dir.join(&folder)).unwrap();
    std::fs::write(dir.join(&folder).join("policies.yaml"), text).unwrap();
    symlink(&folder, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    if generation == 0 {
        symlink("..data/policies.yaml", dir.join("policies.yaml")).unwrap();
    } else {
        std::fs::remove_dir_all(dir.join(format!("..2026_12_07_10_00_00.{}", generation - 1))).unwrap();
    }
}

/// The `login` limit a decision for a key never used before reports.
fn login_limit(port: u16, key: &str) -> String {
    let body = format!(r#"{{"resource": "login", "key": "{key}"}}"#);
    let answer = post(port, "/v1/decide", &body);
    let at = answer.find("\"limit\":").unwrap_or_else(|| panic!("{answer}"));
    answer[at + 8..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect()
}

#[test]
fn a_configmap_update_applies_within_5_s_and_a_broken_one_keeps_the_policies() {
    let dir = tempfile::tempdir().unwrap();
    write_configmap(dir.path(), 0, &policies(5));
    let port = free_port();
    let (file, listen) = (dir.path().join("policies.yaml"), format!("127.0.0.1:{port}"));
    let serve = Serve::start(&["--config", file.to_str().unwrap(), "--listen", &listen]);
    serve.wait_for_log("serving HTTP on");
    assert_eq!(login_limit(port, "before"), "5");

    write_configmap(dir.path(), 1, &policies(7));
    let swapped = Instant::now();
    let mut n = 0;
    while login_limit(port, &format!("after-{n}")) != "7" {
        assert!(
            swapped.elapsed() < Duration::from_secs(5),
            "the new limit took over 5 s"
        );
        n += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    serve.wait_for_log("configuration reloaded");
    eprintln!("the ConfigMap's update applied after {:?}", swapped.elapsed());

    write_configmap(
        dir.path(),
        2,
        "tollgate:\n  default: { limit: many, window: 1m }\n",
    );
    let line = serve.wait_for_log("configuration not reloaded");
    assert!(
        line.contains("policies.yaml:2"),
        "the error names the file and line: {line}"
    );
    assert!(line.contains("limit"), "the error names the field: {line}");
    assert_eq!(
        login_limit(port, "after-broken"),
        "7",
        "the policies in effect stay"
    );
}

/// What the load of [`sigterm_under_load`] saw.
#[derive(Default)]
struct Seen {
    /// Requests answered with a decision.
    answered: AtomicU64,
    /// Requests answered after the signal.
    answered_after_term: AtomicU64,
    /// Requests that got no answer: what the test must never see.
    lost: Mutex<Vec<String>>,
}

/// One decision on a new connection, as a client behind a Service sends
/// it; a failure to connect, write or read is a lost request.
fn decide_once(port: u16, n: u64) -> Result<(), String> {
    let body = format!(r#"{{"key": "client-{}"}}"#, n % 50);
    let request = post_request("/v1/decide", &body);
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    if answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.1 429") {
        Ok(())
    } else {
        Err(format!("answer: {answer}"))
    }
}

#[test]
fn sigterm_under_load_loses_no_request_and_readiness_turns_first() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.yaml");
    std::fs::write(&file, policies(5)).unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut serve = Serve::start(&[
        "--config",
        file.to_str().unwrap(),
        "--listen",
        &listen,
        "--drain-delay",
        "3s",
    ]);
    serve.wait_for_log("serving HTTP on");

    // Four clients, and an endpoint controller that stops sending them to
    // the pod once it is not ready (a Service forgets a stopping pod).
    let (seen, routed, termed) = (
        Arc::new(Seen::default()),
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicBool::new(false)),
    );
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (seen, routed, termed) = (seen.clone(), routed.clone(), termed.clone());
            std::thread::spawn(move || {
                let mut n = c;
                while routed.load(Ordering::SeqCst) {
                    let after_term = termed.load(Ordering::SeqCst);
                    match decide_once(port, n) {
                        Ok(()) => {
                            seen.answered.fetch_add(1, Ordering::SeqCst);
                            if after_term {
                                seen.answered_after_term.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Err(err) => seen.lost.lock().unwrap().push(err),
                    }
                    n += 4;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    serve.signal("TERM");
    termed.store(true, Ordering::SeqCst);
    let signalled = Instant::now();
    while get(port, "/readyz").starts_with("HTTP/1.1 200") {
        assert!(
            signalled.elapsed() < Duration::from_secs(2),
            "/readyz stayed ready"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let not_ready = signalled.elapsed();
    // The controller takes a moment to stop routing; the pod serves on.
    std::thread::sleep(Duration::from_millis(300));
    routed.store(false, Ordering::SeqCst);
    for client in clients {
        client.join().unwrap();
    }
    assert_eq!(serve.wait_exit().code(), Some(0));
    let lost = seen.lost.lock().unwrap();
    assert!(
        lost.is_empty(),
        "{} requests lost: {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    let after = seen.answered_after_term.load(Ordering::SeqCst);
    assert!(after > 0, "requests after SIGTERM were answered while not ready");
    eprintln!(
        "{} decisions, {after} of them after SIGTERM; /readyz said 503 {not_ready:?} after it",
        seen.answered.load(Ordering::SeqCst)
    );
}
