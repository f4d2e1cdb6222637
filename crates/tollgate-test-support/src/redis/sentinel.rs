//! A primary, its replica and a Redis Sentinel watching them, on free
//! ports, with timeouts short enough for a failover within seconds.

use std::time::{Duration, Instant};

use std::net::SocketAddr;

use super::{free_port, RedisServer};
use crate::fault_proxy::FaultProxy;

/// The name the sentinel monitors the primary by.
pub const MASTER: &str = "tollgate-primary";

/// A running primary, replica and sentinel; killed when dropped.
pub struct Sentinel {
    /// The primary the sentinel starts with.
    pub primary: RedisServer,
    /// A replica of the primary, the one a failover promotes.
    pub replica: RedisServer,
    /// The sentinel.
    pub sentinel: RedisServer,
    /// The primary's and the replica's password, if any.
    password: Option<String>,
    /// The sentinel's own password, if any.
    sentinel_password: Option<String>,
}

impl Sentinel {
    /// Starts the primary and its replica, waits until the replica is in
    /// sync, starts a sentinel (quorum 1, down after 500 ms) and waits
    /// until it could promote the replica.
    pub fn start() -> Self {
        let setup = Self::start_with(None, None);
        setup.wait_until_promotable();
        setup
    }

    /// Waits until the sentinel could promote the replica: it has the
    /// replica's own INFO (its link to the primary is up) and sees it
    /// reachable.
    pub fn wait_until_promotable(&self) {
        let replica_port = format!("\n{}\n", self.replica.port());
        wait_for("the sentinel to know the replica as promotable", || {
            let replicas = self.sentinel_cli(&["SENTINEL", "REPLICAS", MASTER]);
            replicas.contains(&replica_port)
                && replicas.contains("master-link-status\nok")
                && !replicas.contains("s_down")
                && !replicas.contains("disconnected")
        });
    }

    /// As [`start`](Self::start), with `password` required by the primary
    /// and the replica (`requirepass`, `masterauth`, and the sentinel's
    /// `auth-pass`) and `sentinel_password` by the sentinel (`requirepass`
    /// in its configuration), returning once the replica is in sync and the
    /// sentinel sees the primary, without waiting until it could promote
    /// the replica ([`wait_until_promotable`](Self::wait_until_promotable)).
    pub fn start_with(password: Option<&str>, sentinel_password: Option<&str>) -> Self {
        let server_auth: Vec<&str> = match password {
            Some(pw) => vec!["--requirepass", pw, "--masterauth", pw],
            None => vec![],
        };
        // Without a delay before the first sync (5 s by default), the
        // replica is in sync within milliseconds.
        let mut primary_args = vec!["--repl-diskless-sync-delay", "0"];
        primary_args.extend(&server_auth);
        let primary = RedisServer::start_with(&primary_args);
        let primary_port = primary.port().to_string();
        let mut replica_args = vec!["--replicaof", "127.0.0.1", &primary_port];
        replica_args.extend(&server_auth);
        let replica = RedisServer::start_with(&replica_args);
        let mut config = format!(
            "sentinel monitor {MASTER} 127.0.0.1 {} 1\n\
             sentinel down-after-milliseconds {MASTER} 500\n\
             sentinel failover-timeout {MASTER} 3000\n\
             sentinel parallel-syncs {MASTER} 1\n",
            primary.port()
        );
        if let Some(pw) = password {
            config.push_str(&format!("sentinel auth-pass {MASTER} {pw}\n"));
        }
        if let Some(pw) = sentinel_password {
            config.push_str(&format!("requirepass {pw}\n"));
        }
        let sentinel = RedisServer::start_sentinel(&config);
        let setup = Self {
            primary,
            replica,
            sentinel,
            password: password.map(str::to_owned),
            sentinel_password: sentinel_password.map(str::to_owned),
        };
        wait_for("the replica to sync", || {
            setup
                .server_cli(&setup.replica, &["INFO", "replication"])
                .contains("master_link_status:up")
        });
        // The sentinel is logged in to the primary (`auth-pass`) and sees
        // it up.
        wait_for("the sentinel to see the primary", || {
            setup
                .sentinel_cli(&["SENTINEL", "MASTER", MASTER])
                .contains("flags\nmaster\n")
        });
        setup
    }

    /// A primary and its replica, each behind a [`FaultProxy`], and a
    /// sentinel that knows them only by their proxies' addresses (the
    /// primary's in its `sentinel monitor` line, each server's announced as
    /// a replica's), so that the clients Sentinel sends to a primary, and
    /// the sentinel itself, cross the faults of that primary's proxy; the
    /// replication between the servers does not. A fault on the primary's
    /// proxy longer than the sentinel's `down-after-milliseconds` (500 ms)
    /// is a failover during a partition. Returns once the sentinel could
    /// promote the replica, with the primary's proxy and the replica's.
    pub fn start_behind_proxies() -> (Self, FaultProxy, FaultProxy) {
        let (primary_port, replica_port) = (free_port(), free_port());
        let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let (primary_proxy, replica_proxy) = (
            FaultProxy::start(at(primary_port)),
            FaultProxy::start(at(replica_port)),
        );
        let announce = |proxy: &FaultProxy| {
            [
                "--replica-announce-ip".to_owned(),
                "127.0.0.1".to_owned(),
                "--replica-announce-port".to_owned(),
                proxy.addr().port().to_string(),
            ]
        };
        let mut primary_args = vec!["--repl-diskless-sync-delay".to_owned(), "0".to_owned()];
        primary_args.extend(announce(&primary_proxy));
        let primary_args: Vec<&str> = primary_args.iter().map(String::as_str).collect();
        let primary = RedisServer::start_on(primary_port, &primary_args);
        let mut replica_args = vec![
            "--replicaof".to_owned(),
            "127.0.0.1".to_owned(),
            primary_port.to_string(),
        ];
        replica_args.extend(announce(&replica_proxy));
        let replica_args: Vec<&str> = replica_args.iter().map(String::as_str).collect();
        let replica = RedisServer::start_on(replica_port, &replica_args);
        let config = format!(
            "sentinel monitor {MASTER} 127.0.0.1 {} 1\n\
             sentinel down-after-milliseconds {MASTER} 500\n\
             sentinel failover-timeout {MASTER} 3000\n\
             sentinel parallel-syncs {MASTER} 1\n",
            primary_proxy.addr().port()
        );
        let sentinel = RedisServer::start_sentinel(&config);
        let setup = Self {
            primary,
            replica,
            sentinel,
            password: None,
            sentinel_password: None,
        };
        wait_for("the replica to sync", || {
            setup
                .server_cli(&setup.replica, &["INFO", "replication"])
                .contains("master_link_status:up")
        });
        let replica_announced = format!("\n{}\n", replica_proxy.addr().port());
        wait_for("the sentinel to know the replica as promotable", || {
            let replicas = setup.sentinel_cli(&["SENTINEL", "REPLICAS", MASTER]);
            replicas.contains(&replica_announced)
                && replicas.contains("master-link-status\nok")
                && !replicas.contains("s_down")
                && !replicas.contains("disconnected")
        });
        (setup, primary_proxy, replica_proxy)
    }

    /// The sentinel's URL, with its password when it has one.
    pub fn url(&self) -> String {
        match &self.sentinel_password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}", self.sentinel.port()),
            None => self.sentinel.url(),
        }
    }

    /// Runs `redis-cli` against `server` (the primary or the replica),
    /// logged in with their password.
    pub fn server_cli(&self, server: &RedisServer, args: &[&str]) -> String {
        with_password(server, self.password.as_deref(), args)
    }

    /// Runs `redis-cli` against the sentinel, logged in with its password.
    pub fn sentinel_cli(&self, args: &[&str]) -> String {
        with_password(&self.sentinel, self.sentinel_password.as_deref(), args)
    }

    /// The port of the server the sentinel names as primary right now.
    pub fn primary_port(&self) -> Option<u16> {
        let reply = self.sentinel_cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]);
        reply.lines().nth(1).and_then(|port| port.trim().parse().ok())
    }
}

fn with_password(server: &RedisServer, password: Option<&str>, args: &[&str]) -> String {
    match password {
        Some(pw) => {
            let mut all = vec!["--no-auth-warning", "-a", pw];
            all.extend(args);
            server.cli(&all)
        }
        None => server.cli(args),
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
