//! A Redis Cluster of real `redis-server` processes on free ports below
//! 55536, created with `redis-cli --cluster create`, optionally with
//! replicas.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{cli, free_cluster_port, RedisServer};
use crate::fault_proxy::FaultProxy;

/// `count` distinct free ports whose cluster-bus ports are free too.
fn cluster_ports(count: usize) -> Vec<u16> {
    let mut ports: Vec<u16> = Vec::new();
    while ports.len() < count {
        let port = free_cluster_port();
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

/// A running cluster; its processes are killed when it is dropped.
pub struct Cluster {
    /// Every node, primaries first in the order `redis-cli` was given them.
    pub nodes: Vec<RedisServer>,
}

impl Cluster {
    /// Starts `primaries` primaries with `replicas` replicas each, joins
    /// them and waits until every node reports `cluster_state:ok` (and every
    /// replica is in sync with its primary). `node_timeout_ms` is how long a
    /// node may be unreachable before it is considered failed.
    pub fn start(primaries: usize, replicas: usize, node_timeout_ms: u32) -> Self {
        let ports = cluster_ports(primaries * (1 + replicas));
        Self::start_on(&ports, primaries, replicas, node_timeout_ms, |_| Vec::new())
    }

    /// As [`start`](Self::start), with a [`FaultProxy`] in front of every
    /// node, which announces its proxy's address to clients
    /// (`cluster-announce-port`): the clients, seeded with
    /// [`proxy_urls`](Self::proxy_urls), cross the proxies' faults, and the
    /// cluster bus (failure detection, failovers) and the replication do
    /// not. Returns the proxies in the order of [`nodes`](Self::nodes).
    pub fn start_behind_proxies(
        primaries: usize,
        replicas: usize,
        node_timeout_ms: u32,
    ) -> (Self, Vec<FaultProxy>) {
        let ports = cluster_ports(primaries * (1 + replicas));
        let proxies: Vec<FaultProxy> = ports
            .iter()
            .map(|&port| FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], port))))
            .collect();
        let cluster = Self::start_on(&ports, primaries, replicas, node_timeout_ms, |i| {
            vec![
                "--cluster-announce-ip".to_owned(),
                "127.0.0.1".to_owned(),
                "--cluster-announce-port".to_owned(),
                proxies[i].addr().port().to_string(),
                "--cluster-announce-bus-port".to_owned(),
                (ports[i] + 10_000).to_string(),
            ]
        });
        (cluster, proxies)
    }

    /// `redis://` URLs of the proxies, as seeds for a client.
    pub fn proxy_urls(proxies: &[FaultProxy]) -> Vec<String> {
        proxies.iter().map(FaultProxy::redis_url).collect()
    }

    /// Starts a node on each of `ports` with the arguments `extra(i)` for
    /// the i-th besides the cluster's, creates the cluster and waits until
    /// it is ready.
    fn start_on(
        ports: &[u16],
        primaries: usize,
        replicas: usize,
        node_timeout_ms: u32,
        extra: impl Fn(usize) -> Vec<String>,
    ) -> Self {
        let timeout = node_timeout_ms.to_string();
        let nodes: Vec<RedisServer> = ports
            .iter()
            .enumerate()
            .map(|(i, &port)| {
                let mut args: Vec<String> = [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    &timeout,
                ]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
                args.extend(extra(i));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                RedisServer::start_on(port, &args)
            })
            .collect();
        let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = std::process::Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli must be installed to run these tests");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Self { nodes };
        cluster.wait_until(Duration::from_secs(20), "the cluster to become ready", |c| {
            c.nodes
                .iter()
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
                && c.nodes.iter().filter(|n| c.is_primary(n.port())).count() == primaries
                && c.nodes
                    .iter()
                    .filter(|n| !c.is_primary(n.port()))
                    .all(|n| n.cli(&["INFO", "replication"]).contains("master_link_status:up"))
        });
        cluster
    }

    /// Polls `ready` every 50 ms until it holds; panics after `limit`.
    pub fn wait_until(&self, limit: Duration, what: &str, ready: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + limit;
        while !ready(self) {
            assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis://127.0.0.1:PORT` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The node on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .expect("a node on that port")
    }

    /// The node on `port`, mutably (to kill it).
    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .expect("a node on that port")
    }

    /// Whether the node on `port` says it is a primary.
    pub fn is_primary(&self, port: u16) -> bool {
        cli(port, &["ROLE"]).lines().next() == Some("master")
    }

    /// The node id of the node on `port`.
    pub fn id(&self, port: u16) -> String {
        cli(port, &["CLUSTER", "MYID"])
    }

    /// The hash slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        cli(self.nodes[0].port(), &["CLUSTER", "KEYSLOT", key])
            .parse()
            .expect("a slot number")
    }

    /// The port of the primary serving `slot`, as the node on `asker` sees it.
    pub fn owner_seen_by(&self, asker: u16, slot: u16) -> Option<u16> {
        // CLUSTER SHARDS is Redis 7; CLUSTER NODES works everywhere: each
        // line is `id host:port@bus flags master-id ping pong epoch state
        // slots...`, slots as `N` or `A-B`.
        let nodes = cli(asker, &["CLUSTER", "NODES"]);
        nodes.lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 || !fields[2].contains("master") || fields[2].contains("fail") {
                return None;
            }
            let serves = fields[8..].iter().any(|range| {
                if range.starts_with('[') {
                    return false; // a slot being migrated or imported
                }
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                match (a.parse::<u16>(), b.parse::<u16>()) {
                    (Ok(a), Ok(b)) => (a..=b).contains(&slot),
                    _ => false,
                }
            });
            let port = fields[1].split(['@', ':']).nth(1)?.parse().ok()?;
            serves.then_some(port)
        })
    }

    /// The port of the primary serving `slot` (as the first live primary
    /// sees it).
    pub fn owner(&self, slot: u16) -> u16 {
        let asker = self
            .nodes
            .iter()
            .map(RedisServer::port)
            .find(|&p| self.is_primary(p))
            .expect("a primary");
        self.owner_seen_by(asker, slot)
            .expect("a primary serves the slot")
    }

    /// The ports of the replicas of the primary on `port`.
    pub fn replicas_of(&self, port: u16) -> Vec<u16> {
        let id = self.id(port);
        self.nodes
            .iter()
            .map(RedisServer::port)
            .filter(|&p| {
                p != port
                    && cli(p, &["CLUSTER", "NODES"])
                        .lines()
                        .any(|l| l.contains("myself") && l.split_whitespace().nth(3) == Some(id.as_str()))
            })
            .collect()
    }

    /// The ports of the primaries.
    pub fn primaries(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .map(RedisServer::port)
            .filter(|&p| self.is_primary(p))
            .collect()
    }
}
