//! The PostgreSQL backend on a real server: its decisions against the
//! core's pure functions, its schema, and its locks under contention.

mod support;

mod background;
mod batch;
mod differential;
mod faults;
mod locks;
mod processes;
mod schema;
mod tls;
