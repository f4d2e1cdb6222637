//! The integration tests of the decision service, in one binary: real
//! listeners on loopback, real HTTP and gRPC clients, a real nginx and
//! real redis-server processes.

mod support;

mod browser_safety;
mod combined_permits;
mod connections;
mod dashboard;
mod envoy_grpc;
mod holds;
mod http_api;
mod in_flight;
mod nginx;
mod operations;
mod permits;
mod postgres;
mod redis_shared;
mod reload;
mod top;
mod ui;
