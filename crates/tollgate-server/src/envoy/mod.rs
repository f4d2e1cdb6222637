//! Envoy's rate-limit service over gRPC. Its configuration files and the
//! mapping of its descriptors onto tollgate resources and keys are
//! `tollgate-config`'s ([`tollgate_config::envoy`]).

pub(crate) mod service;
