//! The Redis backend's integration tests, in one binary: each module starts the
//! redis-server processes it needs (standalone, TLS, a three-primary cluster) on
//! free ports and stops them when it ends.

mod support;

mod bad_network;
mod batch;
mod bind;
mod calendar;
mod cluster;
mod cluster_faults;
mod compound;
mod connect;
mod differential;
mod faults;
mod fleet_faults;
mod holds;
mod leases;
mod operations;
mod overrides;
mod permit_batches;
mod permit_faults;
mod permit_processes;
mod permits;
mod processes;
mod protection;
mod reports;
mod reservations;
mod sentinel;
mod shared_limit;
mod tcp;
mod tls;
mod together;
