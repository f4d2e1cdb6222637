//! The middleware end to end, in one binary: real listeners on loopback (axum,
//! actix-web, plain hyper, tonic), real HTTP and gRPC clients, and Redis-backed
//! limiters on redis-server processes the tests start themselves.

mod support;

mod combined;
mod compound;
mod cost;
mod delay;
mod grpc;
mod handlers;
mod headers;
mod hyper_server;
mod in_flight;
mod limits;
mod redis_backend;
mod response_cost;
mod skip;
mod trusted_proxies;
mod watched_file;
