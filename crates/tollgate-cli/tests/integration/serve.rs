//! The `tollgate serve` process: it starts on free ports, answers, and on
//! SIGTERM finishes the requests in flight and exits with 0; it refuses to
//! open the admin routes to the network without a token.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tollgate_test_support::redis::free_port;

use crate::support::{get, Serve};

const POLICIES: &str = "tollgate:
  default: { limit: 100, window: 1m }
  resources:
    login: { limit: 5, window: 1m, strategy: fixed_window }
";

#[test]
fn serve_answers_and_drains_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.yaml");
    std::fs::write(&file, POLICIES).unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut serve = Serve::start(&["--config", file.to_str().unwrap(), "--listen", &listen]);
    serve.wait_for_log("serving HTTP on");
    assert!(get(port, "/healthz").starts_with("HTTP/1.1 200"));
    // A request in flight: its head and half its body sent.
    let body = r#"{"resource": "login", "key": "drained"}"#;
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "POST /v1/decide HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&body.as_bytes()[..10]).unwrap();
    stream.flush().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    serve.signal("TERM");
    serve.wait_for_log("SIGTERM: draining");
    // New connections are refused once the listener is closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(Instant::now() < deadline, "the listener stayed open");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The request in flight still gets its whole answer.
    stream.write_all(&body.as_bytes()[10..]).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""remaining":4"#), "{answer}");
    let status = serve.wait_exit();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn serve_refuses_open_admin_routes_on_a_public_address() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.yaml");
    std::fs::write(&file, POLICIES).unwrap();
    let listen = format!("0.0.0.0:{}", free_port());
    let mut serve = Serve::start(&["--config", file.to_str().unwrap(), "--listen", &listen]);
    let line = serve.wait_for_log("error:");
    assert_eq!(
        line,
        format!(
            "error: refusing to serve the admin routes (GET /v1/policies, GET /v1/top, POST /v1/reset, POST /v1/block, \
             POST /v1/refund, POST /v1/penalty) on {listen}, which is not a \
             loopback address, without a token: give --admin-token-file FILE (clients then send \
             `Authorization: Bearer <token>`), turn them off with --no-admin, or listen on a \
             loopback address such as 127.0.0.1"
        )
    );
    assert_eq!(serve.wait_exit().code(), Some(1));
    // With the admin routes off it starts: decisions are answered, the
    // admin routes are not.
    let port = free_port();
    let open = format!("0.0.0.0:{port}");
    let mut serve = Serve::start(&[
        "--config",
        file.to_str().unwrap(),
        "--listen",
        &open,
        "--no-admin",
    ]);
    serve.wait_for_log("serving HTTP on");
    assert!(get(port, "/healthz").starts_with("HTTP/1.1 200"));
    let policies = get(port, "/v1/policies");
    assert!(policies.starts_with("HTTP/1.1 404"), "{policies}");
    assert!(policies.contains("--no-admin"), "{policies}");
    serve.signal("TERM");
    assert_eq!(serve.wait_exit().code(), Some(0));
    // With a token it starts.
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let mut serve = Serve::start(&[
        "--config",
        file.to_str().unwrap(),
        "--listen",
        &listen,
        "--admin-token-file",
        token.to_str().unwrap(),
    ]);
    serve.wait_for_log("serving HTTP on");
    serve.signal("TERM");
    assert_eq!(serve.wait_exit().code(), Some(0));
}

#[test]
fn serve_reports_a_mistake_with_its_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rl.yaml");
    std::fs::write(
        &file,
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n",
    )
    .unwrap();
    let mut serve = Serve::start(&["--config", file.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    let line = serve.wait_for_log("error:");
    assert_eq!(
        line,
        format!(
            "error: {}:3: descriptors[0].rate_limit.unit: \"fortnight\" is not a unit: second, minute, hour, \
             day, week, month or year",
            file.display()
        )
    );
    assert_eq!(serve.wait_exit().code(), Some(1));
}

#[test]
fn a_second_sigterm_exits_without_waiting_for_the_drain() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.yaml");
    std::fs::write(&file, POLICIES).unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut serve = Serve::start(&[
        "--config",
        file.to_str().unwrap(),
        "--listen",
        &listen,
        "--drain-timeout",
        "1h",
    ]);
    serve.wait_for_log("serving HTTP on");
    // A request whose body never completes keeps the drain waiting.
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = "POST /v1/decide HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{";
    stream.write_all(head.as_bytes()).unwrap();
    assert!(get(port, "/healthz").starts_with("HTTP/1.1 200"));
    serve.signal("TERM");
    serve.wait_for_log("draining its connections");
    let second = Instant::now();
    serve.signal("TERM");
    serve.wait_for_log("second signal: exiting without draining");
    assert_eq!(serve.wait_exit().code(), Some(1));
    assert!(second.elapsed() < Duration::from_secs(10));
}

#[test]
fn the_connection_cap_pauses_accepting_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.yaml");
    std::fs::write(&file, POLICIES).unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let serve = Serve::start(&[
        "--config",
        file.to_str().unwrap(),
        "--listen",
        &listen,
        "--max-connections",
        "2",
    ]);
    serve.wait_for_log("serving HTTP on");
    let keep_alive = "GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n";
    let mut open: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream.write_all(keep_alive.as_bytes()).unwrap();
            let mut buf = [0u8; 12];
            stream.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"HTTP/1.1 200");
            stream
        })
        .collect();
    // The third waits in the backlog, unanswered, and the log says why.
    let mut third = TcpStream::connect(("127.0.0.1", port)).unwrap();
    third.write_all(keep_alive.as_bytes()).unwrap();
    let line = serve.wait_for_log("--max-connections");
    assert!(
        line.contains("2 connections are open, the most --max-connections allows"),
        "{line}"
    );
    third.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut buf = [0u8; 12];
    assert!(third.read_exact(&mut buf).is_err(), "answered over the cap");
    // One closes: the third is accepted and answered.
    drop(open.pop());
    third.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    third.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"HTTP/1.1 200");
}
