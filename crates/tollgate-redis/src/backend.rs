//! [`RedisBackend`]: the connection that a policy's bindings share, and
//! the [`Backend`] implementation that binds policies to it.

use std::sync::Arc;
use std::time::Duration;

use redis::cluster_routing::Slot;
use tollgate::backend::{Backend, Batcher, Capabilities, Scope};
use tollgate::Error;

use crate::binding::{Batched, Options, RedisBinding};
use crate::connection::Connection;
use crate::scripts::Functions;

/// Rate-limit state in Redis, shared by every process and host that uses the
/// same server or cluster.
///
/// Each decision is one atomic Lua script in one round trip (decisions that
/// arrive while calls are in flight go out together, each decided alone:
/// [`RedisBackendBuilder::batch_calls`](crate::RedisBackendBuilder::batch_calls));
/// each rate-limit key's whole state is one Redis key with an expiry per
/// limit of the policy (one, or several all in one hash slot). Cloning is cheap and
/// clones share the connection. See the [crate documentation](crate) for the
/// time source, key layout, limits and failure behaviour.
#[derive(Clone)]
pub struct RedisBackend {
    conn: Connection,
    options: Options,
    /// Whether decisions call the function library (see
    /// [`RedisBackend::uses_functions`]).
    functions: Arc<Functions>,
    /// The lanes of batched calls, shared by every binding.
    batcher: Arc<Batcher<Batched, Slot>>,
}

/// How many calls of one lane (a standalone server or Sentinel's primary;
/// in a Cluster, a hash slot) may be in flight before decisions wait to go
/// out together. Two: one in flight makes batches larger but saves the
/// server no measurable CPU per decision, and costs a third of the
/// throughput (`benches/batching.rs`).
const MAX_IN_FLIGHT: usize = 2;

/// The most decisions one batched call carries; more wait for the next.
const MAX_BATCH: usize = 64;

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field(
                "mode",
                &if self.conn.is_cluster() {
                    "cluster"
                } else if self.conn.is_sentinel() {
                    "sentinel"
                } else {
                    "standalone"
                },
            )
            .field("connected", &self.conn.is_connected())
            .field("timeout", &self.options.timeout)
            .field("caller_clock", &self.options.clock.is_some())
            .field("expiry_grace", &self.options.expiry_grace)
            .field("functions", &self.functions.enabled())
            .field("batch_calls", &self.options.batch)
            .finish()
    }
}

impl RedisBackend {
    /// Whether decisions can be sent: always for a backend from
    /// [`connect`](Self::connect), [`connect_cluster`](Self::connect_cluster)
    /// or [`connect_sentinel`](Self::connect_sentinel);
    /// for one [connecting in the background](crate::RedisBackendBuilder::connect_in_background),
    /// once an attempt has succeeded. A connection, once made, may still be
    /// lost and is then re-established by the next decision.
    pub fn is_connected(&self) -> bool {
        self.conn.is_connected()
    }

    /// The time a decision may take before it fails as timed out.
    pub fn timeout(&self) -> Duration {
        self.options.timeout
    }

    /// Whether the backend is (or, connecting in the background, will be)
    /// connected to a cluster.
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// Whether the backend is (or, connecting in the background, will be)
    /// connected to the primary that Redis Sentinel names.
    pub fn is_sentinel(&self) -> bool {
        self.conn.is_sentinel()
    }

    /// Whether decisions call the function library that the backend loads
    /// on Redis 7 and later (`FCALL`): true until a decision finds that the
    /// server has no functions, or that its ACL refuses `FCALL` or
    /// `FUNCTION LOAD` to this user; from then on, for good, decisions run
    /// as scripts (`EVALSHA`), which decide alike at a higher cost on the
    /// server. See the
    /// [function library](crate::_documentation::operations#scripts-and-the-function-library).
    pub fn uses_functions(&self) -> bool {
        self.functions.enabled()
    }

    /// A backend on `conn` with `options`, which has not yet found out
    /// whether the server has functions.
    pub(crate) fn new(conn: Connection, options: Options) -> Self {
        Self {
            conn,
            options,
            functions: Arc::new(Functions::new()),
            batcher: Arc::new(Batcher::new(MAX_IN_FLIGHT, MAX_BATCH)),
        }
    }
}

impl Backend for RedisBackend {
    type Binding = RedisBinding;

    fn bind(&self, scope: &Scope<'_>) -> Result<RedisBinding, Error> {
        RedisBinding::new(&self.conn, &self.functions, &self.batcher, &self.options, scope)
    }

    /// Every call, awaited. A lease is one function call (or script) on
    /// every limit of a policy, giving back an ended lease's units in the
    /// same call; each operation on a concurrency limit's permits is one
    /// call too, and so is each hold (an estimate decided and recorded
    /// beside the key's state, in its hash slot) and each settle.
    fn capabilities(&self) -> Capabilities {
        Capabilities::all(false)
    }
}
