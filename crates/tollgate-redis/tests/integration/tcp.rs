//! TCP settings reach the sockets: keepalive and `TCP_USER_TIMEOUT`, read
//! back with `getsockopt` on this process's own connections to a test
//! server, for one server, a cluster and Sentinel; and, where iptables may
//! add a rule (root), a connection whose packets are dropped is closed
//! after the user timeout and replaced.

use std::os::fd::{BorrowedFd, RawFd};
use std::process::Command;
use std::time::{Duration, Instant};

use tollgate::backend::BackendErrorKind;
use tollgate::{Error, Limiter, Strategy};
use tollgate_redis::redis::io::tcp::socket2::SockRef;
use tollgate_redis::{
    ConnectErrorKind, RedisBackend, RedisBackendBuilder, DEFAULT_TCP_KEEPALIVE,
    DEFAULT_TCP_KEEPALIVE_INTERVAL, DEFAULT_TCP_KEEPALIVE_RETRIES, DEFAULT_TCP_USER_TIMEOUT,
};
use tollgate_test_support::redis::cluster::Cluster;
use tollgate_test_support::redis::sentinel::{Sentinel, MASTER};
use tollgate_test_support::redis::RedisServer;

/// The options a socket carries.
#[derive(Debug, PartialEq, Eq)]
struct Options {
    keepalive: bool,
    idle: Duration,
    interval: Duration,
    retries: u32,
    user_timeout: Option<Duration>,
}

/// The options of every TCP socket of this process connected to
/// `127.0.0.1:port`.
fn sockets_to(port: u16) -> Vec<Options> {
    connections_to(port)
        .into_iter()
        .map(|(_, options)| options)
        .collect()
}

/// The local port and options of every TCP socket of this process
/// connected to `127.0.0.1:port`.
fn connections_to(port: u16) -> Vec<(u16, Options)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
        let Some(fd) = entry
            .ok()
            .and_then(|e| e.file_name().to_str().and_then(|n| n.parse::<RawFd>().ok()))
        else {
            continue;
        };
        // SAFETY: only read through while this function runs; a descriptor
        // closed meanwhile by another test makes the calls fail (or read
        // another socket, whose peer port will not match).
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = SockRef::from(&fd);
        let Some(peer) = socket.peer_addr().ok().and_then(|a| a.as_socket()) else {
            continue;
        };
        if peer.port() != port || !peer.ip().is_loopback() {
            continue;
        }
        let Some(local) = socket.local_addr().ok().and_then(|a| a.as_socket()) else {
            continue;
        };
        let options = Options {
            keepalive: socket.keepalive().unwrap(),
            idle: socket.tcp_keepalive_time().unwrap(),
            interval: socket.tcp_keepalive_interval().unwrap(),
            retries: socket.tcp_keepalive_retries().unwrap(),
            user_timeout: socket.tcp_user_timeout().unwrap(),
        };
        found.push((local.port(), options));
    }
    found
}

fn configured() -> RedisBackendBuilder {
    RedisBackend::builder()
        .tcp_keepalive(Duration::from_secs(7))
        .tcp_keepalive_interval(Duration::from_millis(2_500))
        .tcp_keepalive_retries(4)
        .tcp_user_timeout(Duration::from_millis(1_500))
}

const CONFIGURED: Options = Options {
    keepalive: true,
    idle: Duration::from_secs(7),
    interval: Duration::from_secs(3),
    retries: 4,
    user_timeout: Some(Duration::from_millis(1_500)),
};

async fn decide(backend: &RedisBackend) {
    let limiter = Limiter::builder()
        .backend(backend.clone())
        .strategy(Strategy::TokenBucket)
        .limit(10)
        .window(Duration::from_secs(60))
        .build()
        .unwrap();
    assert!(limiter.allow("k").await.unwrap().allowed);
}

fn assert_all(port: u16, expected: &Options, what: &str) {
    let sockets = sockets_to(port);
    assert!(!sockets.is_empty(), "no connection to {what} on port {port}");
    for socket in &sockets {
        assert_eq!(socket, expected, "a connection to {what}");
    }
}

#[tokio::test]
async fn a_servers_connection_carries_the_defaults_or_the_configured_settings() {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url()).await.unwrap();
    decide(&backend).await;
    let defaults = Options {
        keepalive: true,
        idle: DEFAULT_TCP_KEEPALIVE,
        interval: DEFAULT_TCP_KEEPALIVE_INTERVAL,
        retries: DEFAULT_TCP_KEEPALIVE_RETRIES,
        user_timeout: Some(DEFAULT_TCP_USER_TIMEOUT),
    };
    assert_all(server.port(), &defaults, "the server (defaults)");
    drop(backend);

    let other = RedisServer::start();
    let backend = configured().connect(&other.url()).await.unwrap();
    decide(&backend).await;
    assert_all(other.port(), &CONFIGURED, "the server");
    drop(backend);

    // Zero turns both off.
    let third = RedisServer::start();
    let backend = RedisBackend::builder()
        .tcp_keepalive(Duration::ZERO)
        .tcp_user_timeout(Duration::ZERO)
        .connect(&third.url())
        .await
        .unwrap();
    decide(&backend).await;
    let sockets = sockets_to(third.port());
    assert!(!sockets.is_empty());
    for socket in sockets {
        assert!(!socket.keepalive && socket.user_timeout.is_none(), "{socket:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_and_sentinel_connections_carry_the_settings() {
    let cluster = Cluster::start(3, 0, 2_000);
    let seeds: Vec<String> = cluster.nodes.iter().map(RedisServer::url).collect();
    let backend = configured().connect_cluster(&seeds).await.unwrap();
    decide(&backend).await;
    for node in &cluster.nodes {
        assert_all(node.port(), &CONFIGURED, "a cluster node");
    }
    drop(backend);

    let setup = Sentinel::start();
    let backend = configured()
        .connect_sentinel(MASTER, &[setup.url()])
        .await
        .unwrap();
    decide(&backend).await;
    assert_all(setup.sentinel.port(), &CONFIGURED, "the sentinel");
    assert_all(setup.primary.port(), &CONFIGURED, "the primary");
}

#[tokio::test]
async fn settings_the_kernel_refuses_are_named_before_connecting() {
    let err = RedisBackend::builder()
        .tcp_keepalive_retries(0)
        .connect("redis://127.0.0.1:1")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::InvalidSetting);
    assert_eq!(err.target(), "tcp_keepalive_retries");
    let err = tollgate::Error::from(err);
    assert!(err.to_string().contains("tcp_keepalive_retries"), "{err}");
}

/// Drops every packet sent to a port on the loopback interface while it
/// lives: an iptables rule in the `OUTPUT` chain, deleted on drop.
struct Blackhole {
    rule: Vec<String>,
}

impl Blackhole {
    fn start(port: u16) -> Self {
        let rule: Vec<String> = [
            "OUTPUT",
            "-o",
            "lo",
            "-p",
            "tcp",
            "--dport",
            &port.to_string(),
            "-j",
            "DROP",
        ]
        .map(str::to_owned)
        .to_vec();
        let out = Command::new("iptables")
            .arg("-A")
            .args(&rule)
            .output()
            .expect("iptables must be installed to run this test");
        assert!(
            out.status.success(),
            "iptables -A failed (this test needs root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { rule }
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        let _ = Command::new("iptables").arg("-D").args(&self.rule).output();
    }
}

/// Polls `condition` every 20 ms; panics with `what` after `limit`.
async fn within(limit: Duration, what: &str, mut condition: impl AsyncFnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !condition().await {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

/// Runs only where iptables may add a rule (as root; it drops packets to
/// the test server's port on the loopback interface for about a second):
/// `cargo test -p tollgate-redis --test integration -- --ignored dropped`. Without the user timeout the dropped connection would stay
/// open for the ~15 minutes TCP retransmits, and the test would fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and iptables: adds a firewall rule for the test server's port"]
async fn a_connection_whose_packets_are_dropped_is_replaced_after_the_user_timeout() {
    let server = RedisServer::start();
    let backend = RedisBackend::builder()
        .connect_timeout(Duration::from_millis(500))
        .tcp_user_timeout(Duration::from_secs(1))
        .connect(&server.url())
        .await
        .unwrap();
    let limiter = Limiter::builder()
        .backend(backend)
        .strategy(Strategy::TokenBucket)
        .limit(1_000)
        .window(Duration::from_secs(60))
        .build()
        .unwrap();
    assert!(limiter.allow("k").await.unwrap().allowed);
    let before: Vec<u16> = connections_to(server.port()).iter().map(|(p, _)| *p).collect();
    assert_eq!(before.len(), 1, "one multiplexed connection");

    let blackhole = Blackhole::start(server.port());
    match limiter.allow("k").await {
        Err(Error::Backend(err)) => assert_eq!(err.kind(), BackendErrorKind::Timeout, "{err}"),
        other => panic!("a decision on a dropped connection must time out: {other:?}"),
    }
    // The kernel gives up on the unacknowledged data after the user
    // timeout, and the connection is closed.
    let closed = within(
        Duration::from_secs(10),
        "the dropped connection is closed",
        async || {
            !connections_to(server.port())
                .iter()
                .any(|(p, _)| before.contains(p))
        },
    )
    .await;
    eprintln!("the dropped connection was closed {closed:?} after the blackhole started");
    drop(blackhole);

    // The next decisions connect again, on a new connection.
    within(Duration::from_secs(5), "a decision succeeds again", async || {
        limiter.allow("k").await.is_ok()
    })
    .await;
    let after: Vec<u16> = connections_to(server.port()).iter().map(|(p, _)| *p).collect();
    assert!(
        !after.is_empty() && after.iter().all(|p| !before.contains(p)),
        "{before:?} then {after:?}"
    );
}
