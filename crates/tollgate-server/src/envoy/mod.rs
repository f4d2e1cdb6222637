//! Envoy's rate-limit service: its configuration files, the mapping of its
//! descriptors onto tollgate resources and keys, and the gRPC service.

pub(crate) mod config;
pub(crate) mod descriptors;
pub(crate) mod service;
