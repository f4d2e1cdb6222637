//! The PostgreSQL backend on a real server: its decisions against the
//! core's pure functions, its schema, its locks under contention, and
//! what it does when the server or the network fails.

mod support;

mod background;
mod bad_network;
mod batch;
mod differential;
mod faults;
mod fixed_window;
mod locks;
mod processes;
mod schema;
mod tls;
mod together;
