//! A primary, its replica and a Redis Sentinel watching them, on free
//! ports, with timeouts short enough for a failover within seconds.

use std::time::{Duration, Instant};

use super::RedisServer;

/// The name the sentinel monitors the primary by.
pub const MASTER: &str = "tollgate-primary";

/// A running primary, replica and sentinel; killed when dropped.
pub struct Sentinel {
    /// The primary the sentinel starts with (`None` once killed).
    pub primary: RedisServer,
    /// A replica of the primary, the one a failover promotes.
    pub replica: RedisServer,
    /// The sentinel.
    pub sentinel: RedisServer,
}

impl Sentinel {
    /// Starts the primary and its replica, waits until the replica is in
    /// sync, starts a sentinel (quorum 1, down after 500 ms) and waits
    /// until it could promote the replica.
    pub fn start() -> Self {
        let primary = RedisServer::start();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
        wait_for("the replica to sync", || {
            replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
        });
        let sentinel = RedisServer::start_sentinel(&format!(
            "sentinel monitor {MASTER} 127.0.0.1 {} 1\n\
             sentinel down-after-milliseconds {MASTER} 500\n\
             sentinel failover-timeout {MASTER} 3000\n\
             sentinel parallel-syncs {MASTER} 1\n",
            primary.port()
        ));
        let replica_port = format!("\n{}\n", replica.port());
        // Promotable: the sentinel has the replica's own INFO (its link to
        // the primary is up) and sees it reachable.
        wait_for("the sentinel to know the replica as promotable", || {
            let replicas = sentinel.cli(&["SENTINEL", "REPLICAS", MASTER]);
            replicas.contains(&replica_port)
                && replicas.contains("master-link-status\nok")
                && !replicas.contains("s_down")
                && !replicas.contains("disconnected")
        });
        Self {
            primary,
            replica,
            sentinel,
        }
    }

    /// The sentinel's URL.
    pub fn url(&self) -> String {
        self.sentinel.url()
    }

    /// The port of the server the sentinel names as primary right now.
    pub fn primary_port(&self) -> Option<u16> {
        let reply = self
            .sentinel
            .cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]);
        reply.lines().nth(1).and_then(|port| port.trim().parse().ok())
    }
}

/// Polls `condition` every 20 ms until it holds; panics after 10 s.
pub fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
