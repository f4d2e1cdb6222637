//! A Redis of any kind with a [`FaultProxy`] between its clients and its
//! servers, for bad-network scenarios: one server, Sentinel's primary and
//! replica ([`Sentinel::start_behind_proxies`]), or every node of a
//! 3-primary Cluster with a replica each ([`Cluster::start_behind_proxies`]).

use std::cell::Cell;
use std::net::SocketAddr;
use std::time::Duration;

use super::cluster::Cluster;
use super::sentinel::Sentinel;
use super::RedisServer;
use crate::fault_proxy::{FaultProxy, Faults};

/// Which Redis a scenario runs on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// One server.
    Standalone,
    /// A primary, its replica and a sentinel.
    Sentinel,
    /// Three primaries with a replica each.
    Cluster,
}

/// The servers and their proxies; stopped when dropped.
pub enum BehindProxies {
    /// One server behind one proxy.
    Standalone {
        /// The server.
        server: RedisServer,
        /// Its proxy.
        proxy: FaultProxy,
    },
    /// A primary and a replica, each behind a proxy, and a sentinel that
    /// knows them by their proxies.
    Sentinel {
        /// The servers and the sentinel.
        setup: Box<Sentinel>,
        /// The proxy of the primary the sentinel starts with.
        primary: FaultProxy,
        /// The proxy of its replica.
        replica: FaultProxy,
    },
    /// Every node behind a proxy; `failovers` counts the takeovers made
    /// with [`BehindProxies::take_over`].
    Cluster {
        /// The nodes.
        cluster: Box<Cluster>,
        /// Their proxies, in the order of the nodes.
        proxies: Vec<FaultProxy>,
        /// The takeovers made.
        failovers: Cell<u64>,
    },
}

impl BehindProxies {
    /// Starts a Redis of `kind`, ready.
    pub fn start(kind: Kind) -> Self {
        match kind {
            Kind::Standalone => {
                let server = RedisServer::start();
                let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], server.port())));
                BehindProxies::Standalone { server, proxy }
            }
            Kind::Sentinel => {
                let (setup, primary, replica) = Sentinel::start_behind_proxies();
                BehindProxies::Sentinel {
                    setup: Box::new(setup),
                    primary,
                    replica,
                }
            }
            Kind::Cluster => {
                let (cluster, proxies) = Cluster::start_behind_proxies(3, 1, 2_000);
                BehindProxies::Cluster {
                    cluster: Box::new(cluster),
                    proxies,
                    failovers: Cell::new(0),
                }
            }
        }
    }

    /// The proxies a scenario's faults go on: the server's, Sentinel's
    /// first primary's, or every cluster node's.
    pub fn proxies(&self) -> Vec<&FaultProxy> {
        match self {
            BehindProxies::Standalone { proxy, .. } | BehindProxies::Sentinel { primary: proxy, .. } => {
                vec![proxy]
            }
            BehindProxies::Cluster { proxies, .. } => proxies.iter().collect(),
        }
    }

    /// Puts `faults` in force on [`Self::proxies`].
    pub fn set(&self, faults: Faults) {
        for proxy in self.proxies() {
            proxy.set(faults);
        }
    }

    /// Heals [`Self::proxies`].
    pub fn heal(&self) {
        for proxy in self.proxies() {
            proxy.heal();
        }
    }

    /// How many failovers happened: Sentinel's promotion of the replica,
    /// or the takeovers made in a cluster.
    pub fn failovers(&self) -> u64 {
        match self {
            BehindProxies::Standalone { .. } => 0,
            BehindProxies::Sentinel { setup, primary, .. } => {
                u64::from(setup.primary_port() != Some(primary.addr().port()))
            }
            BehindProxies::Cluster { failovers, .. } => failovers.get(),
        }
    }

    /// In a cluster, has a replica take over its primary's slots
    /// (`CLUSTER FAILOVER TAKEOVER`, over the bus, which no fault crosses)
    /// and waits until it serves them; elsewhere nothing (a sentinel fails
    /// over by itself).
    pub fn take_over(&self) {
        let BehindProxies::Cluster {
            cluster, failovers, ..
        } = self
        else {
            return;
        };
        let primary = cluster.primaries()[0];
        let replica = cluster.replicas_of(primary)[0];
        assert_eq!(
            cluster.node(replica).cli(&["CLUSTER", "FAILOVER", "TAKEOVER"]),
            "OK"
        );
        cluster.wait_until(Duration::from_secs(10), "the replica to take over", |c| {
            c.is_primary(replica)
        });
        failovers.set(failovers.get() + 1);
    }
}
