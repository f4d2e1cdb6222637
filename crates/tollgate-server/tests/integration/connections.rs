//! The HTTP listener's connections: draining answers every request the
//! service received, within a deadline; slow and idle clients are cut off.
//! Clients speak HTTP/1.1 over raw sockets, so that every byte and every
//! close is seen as it happens.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::support::{self, start};

const POLICIES: &str = "tollgate:
  default: { limit: 1000000000, window: 1h }
";

/// A decision request for `key` on a keep-alive connection.
fn decide_request(key: &str) -> String {
    let body = format!(r#"{{"key": "{key}"}}"#);
    format!(
        "POST /v1/decide HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// One response read off `stream`: its head (lower case) and whether it
/// was whole; `None` when the connection closed before any byte of it.
async fn read_response(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Option<(String, bool)> {
    loop {
        if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while pending.len() < end + 4 + length {
                let mut buf = [0u8; 4096];
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return Some((head, false)),
                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                }
            }
            pending.drain(..end + 4 + length);
            return Some((head, true));
        }
        let mut buf = [0u8; 4096];
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) if pending.is_empty() => return None,
            Ok(0) | Err(_) => return Some((String::from_utf8_lossy(pending).into_owned(), false)),
            Ok(n) => pending.extend_from_slice(&buf[..n]),
        }
    }
}

/// What one client saw: the requests that got no answer (with when they
/// were written), the answers whole and cut, and the last answer's head.
#[derive(Default)]
struct Seen {
    /// Requests that got no response, with when their writing ended.
    unanswered: Vec<Instant>,
    answered: usize,
    partial: usize,
    /// The head of the last response received.
    last_head: Option<String>,
}

/// A client sending requests one after another on one keep-alive
/// connection until the service closes it.
async fn client(addr: SocketAddr, id: usize, seen: Arc<Mutex<Seen>>) {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return;
    };
    let mut pending = Vec::new();
    for i in 0.. {
        if stream
            .write_all(decide_request(&format!("c{id}-{i}")).as_bytes())
            .await
            .is_err()
        {
            return;
        }
        // When the request was whole in the service's socket: taken before
        // the write, a client task descheduled between the two would date
        // a request the service received after it stopped.
        let written = Instant::now();
        let answer = read_response(&mut stream, &mut pending).await;
        let mut seen = seen.lock().await;
        match answer {
            Some((head, true)) => {
                assert!(head.starts_with("http/1.1 200"), "{head}");
                seen.answered += 1;
                seen.last_head = Some(head);
            }
            Some((_, false)) => {
                seen.partial += 1;
                return;
            }
            None => {
                seen.unanswered.push(written);
                return;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_answers_every_request_received_before_the_listener_closed() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    for round in 0..5 {
        let server = start(support::builder(&[&file])).await;
        let addr = server.http;
        let seen: Vec<Arc<Mutex<Seen>>> = (0..64).map(|_| Arc::default()).collect();
        let clients: Vec<_> = seen
            .iter()
            .enumerate()
            .map(|(id, seen)| tokio::spawn(client(addr, id, seen.clone())))
            .collect();
        // Let the clients get going, then stop while they send.
        while seen[63].lock().await.answered < 20 {
            tokio::task::yield_now().await;
        }
        let stopped = Instant::now();
        server.stop().await;
        for client in clients {
            client.await.unwrap();
        }
        let mut answered = 0;
        for (id, seen) in seen.iter().enumerate() {
            let seen = seen.lock().await;
            answered += seen.answered;
            assert_eq!(seen.partial, 0, "round {round}: client {id} got a cut response");
            for written in &seen.unanswered {
                assert!(
                    *written >= stopped,
                    "round {round}: client {id}'s request written {:?} before the stop got no answer",
                    stopped - *written
                );
            }
            // A connection closed after a response the service sent while
            // draining was told so by that response.
            if let (Some(head), true) = (&seen.last_head, seen.unanswered.is_empty()) {
                assert!(
                    head.contains("connection: close"),
                    "round {round}: client {id}: {head}"
                );
            }
        }
        assert!(answered >= 20, "round {round}: {answered} answers");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_ends_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file]).drain_timeout(Duration::from_millis(500))).await;
    // A request whose body never completes.
    let mut stuck = TcpStream::connect(server.http).await.unwrap();
    let head = "POST /v1/decide HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{";
    stuck.write_all(head.as_bytes()).await.unwrap();
    // Let the service read the head before it stops.
    let (status, _) = support::decide(&reqwest::Client::new(), &server, r#"{"key": "k"}"#).await;
    assert_eq!(status, 200);
    let started = Instant::now();
    server.stop().await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500),
        "stopped after {took:?}, before the deadline"
    );
    assert!(took < Duration::from_secs(5), "stopped after {took:?}");
    // The stuck connection was closed.
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), stuck.read(&mut buf))
        .await
        .unwrap();
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
}

/// How far a timeout may seem early: the service times from moments a
/// little before the client's (its last byte sent, its response done).
const SLACK: Duration = Duration::from_millis(50);

/// How long until the service closes `stream`, reading whatever comes.
async fn closed_after(stream: &mut TcpStream, started: Instant, limit: Duration) -> Duration {
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(limit, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
            Err(_) => panic!("still open after {limit:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_idle_connections_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let header = Duration::from_millis(600);
    let idle = Duration::from_millis(1500);
    let server = start(
        support::builder(&[&file])
            .header_read_timeout(header)
            .idle_timeout(idle),
    )
    .await;
    // Ten clients trickling their headers a byte every 50 ms.
    let request = decide_request("slow");
    let mut slow = Vec::new();
    for _ in 0..10 {
        let mut stream = TcpStream::connect(server.http).await.unwrap();
        let request = request.clone();
        slow.push(tokio::spawn(async move {
            let started = Instant::now();
            for byte in request.as_bytes() {
                if stream.write_all(&[*byte]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            closed_after(&mut stream, started, Duration::from_secs(10)).await
        }));
    }
    // A client that connects and sends nothing.
    let started = Instant::now();
    let mut silent = TcpStream::connect(server.http).await.unwrap();
    let silent_closed = closed_after(&mut silent, started, Duration::from_secs(10)).await;
    assert!(
        silent_closed + SLACK >= header && silent_closed < header * 4,
        "{silent_closed:?}"
    );
    for slow in slow {
        let closed = slow.await.unwrap();
        assert!(
            closed + SLACK >= header && closed < header * 4,
            "a slow client was cut off after {closed:?}"
        );
    }
    // A keep-alive connection is served, then closed once idle (not after
    // the header timeout: it sent a whole request).
    let mut stream = TcpStream::connect(server.http).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut pending = Vec::new();
    let (head, whole) = read_response(&mut stream, &mut pending).await.unwrap();
    assert!(whole && head.starts_with("http/1.1 200"), "{head}");
    let answered = Instant::now();
    let closed = closed_after(&mut stream, answered, Duration::from_secs(10)).await;
    assert!(
        closed + SLACK >= idle && closed < idle * 3,
        "idle connection closed after {closed:?}"
    );
    // The service still serves.
    let (status, _) = support::decide(&reqwest::Client::new(), &server, r#"{"key": "k"}"#).await;
    assert_eq!(status, 200);
    server.stop().await;
}

/// An HTTP/2 frame: its 9-byte header (length, type, flags, stream 0) and
/// payload.
fn h2_frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut frame = vec![
        (len >> 16) as u8,
        (len >> 8) as u8,
        len as u8,
        kind,
        0,
        0,
        0,
        0,
        0,
    ];
    frame.extend_from_slice(payload);
    frame
}

/// Opens an HTTP/2 connection to `addr` and sends a PING every 100 ms
/// (reading what comes, acknowledging nothing) until the service closes
/// it: how long that took, at most `limit`.
async fn pings_until_closed(addr: SocketAddr, limit: Duration) -> Duration {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    stream.write_all(&h2_frame(0x4, &[])).await.unwrap();
    let mut buf = [0u8; 4096];
    loop {
        assert!(
            started.elapsed() < limit,
            "still open after {:?}",
            started.elapsed()
        );
        if stream.write_all(&h2_frame(0x6, &[7; 8])).await.is_err() {
            return started.elapsed();
        }
        let read = tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf)).await;
        if let Ok(Ok(0) | Err(_)) = read {
            return started.elapsed();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_that_only_pings_is_closed_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let idle = Duration::from_millis(1_000);
    // This client never acknowledges the service's PING of a graceful
    // close either: it is dropped the header-read timeout later.
    let grace = Duration::from_millis(500);
    let server = start(
        support::builder(&[&file])
            .idle_timeout(idle)
            .header_read_timeout(grace),
    )
    .await;
    let closed = pings_until_closed(server.http, idle * 5).await;
    assert!(
        closed + SLACK >= idle && closed < (idle + grace) * 2,
        "a pinging HTTP/2 client was closed after {closed:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_listener_cuts_off_silent_and_idle_clients_too() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let header = Duration::from_millis(600);
    let idle = Duration::from_millis(1_000);
    let server = start(
        support::builder(&[&file])
            .grpc_listen(support::any_port())
            .header_read_timeout(header)
            .idle_timeout(idle),
    )
    .await;
    let grpc = server.grpc.unwrap();
    // A client that connects and sends nothing.
    let started = Instant::now();
    let mut silent = TcpStream::connect(grpc).await.unwrap();
    let closed = closed_after(&mut silent, started, Duration::from_secs(10)).await;
    assert!(closed + SLACK >= header && closed < header * 4, "{closed:?}");
    // A client that only pings.
    let closed = pings_until_closed(grpc, idle * 5).await;
    assert!(
        closed + SLACK >= idle && closed < (idle + header) * 2,
        "{closed:?}"
    );
    server.stop().await;
}
