//! Test support shared by the tollgate crates' integration tests and
//! benchmarks, so that none of them includes another crate's files:
//!
//! - [`redis`]: real `redis-server` processes on free ports (standalone,
//!   TLS, unix socket, a Redis Cluster, a primary and replica watched by a
//!   Sentinel), killed when their handles are dropped;
//! - [`postgres`]: a private PostgreSQL server (`initdb` and `pg_ctl` in
//!   a temporary directory, on a free port) for the tests that restart,
//!   stop or start it, stopped and removed when dropped;
//! - [`postgres_databases`]: databases of a test's own on the PostgreSQL server the
//!   tests use, and roles without rights;
//! - [`bench`](mod@bench): the benchmarks' settings from the environment, and
//!   medians;
//! - [`counting_alloc`]: a global allocator that counts live heap bytes,
//!   for memory tests and benchmarks;
//! - [`envoy_files`]: large Envoy rate-limit files for the service's
//!   memory and reload measurements;
//! - [`fault_proxy`]: a TCP proxy that injects network faults (latency,
//!   bandwidth, stalls, dropped and half-open connections, black holes,
//!   lost replies) between clients and a Redis;
//! - [`operation_traces`]: random traces of decisions and per-key
//!   operations, and the decisions the pure strategy functions give for
//!   them, which every backend must match;
//! - [`in_flight_model`]: the permits of "Requests in flight" in
//!   SEMANTICS.md, a model to check the backends' concurrency limits
//!   against;
//! - [`together_model`]: the decisions and states a request of several
//!   parts must give ([`tollgate::together`]), from the pure functions;
//! - [`workers`]: worker processes for the tests across operating-system
//!   processes (the test binary re-run as an ignored test), and the tagged
//!   lines they print;
//! - [`worker_admissions`]: the work of the tests of exact limits across
//!   processes: each worker's concurrent requests, and what all of them
//!   admitted;
//! - [`sources`]: the workspace's production sources, for the tests that
//!   check rules of its layout.
//!
//! Not published: a dev-dependency of the workspace's crates only.

// `pub` means reachable from outside the crate: an item that is not says
// `pub(crate)`.
#![warn(unreachable_pub)]

pub mod bench;
pub mod counting_alloc;
pub mod envoy_files;
pub mod fault_proxy;
pub mod in_flight_model;
pub mod operation_traces;
pub mod postgres;
pub mod postgres_databases;
pub mod process_cpu;
pub mod redis;
pub mod sources;
pub mod together_model;
pub mod worker_admissions;
pub mod workers;
