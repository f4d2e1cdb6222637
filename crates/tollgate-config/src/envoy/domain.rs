//! A loaded Envoy domain: its descriptor tree and a limiter per limit.

use std::sync::Arc;

use tollgate::{Limiter, Overrides};

use crate::any_backend::AnyBackend;
use crate::envoy::descriptors::Level;
use crate::envoy::file::Rule;

/// One Envoy domain of a [`PolicySet`](crate::PolicySet): its descriptor
/// tree and its limits, each with its limiter.
pub struct Domain {
    /// The file it comes from.
    pub(crate) file: String,
    /// The tree; a node's rule is its index in `rules`.
    pub(crate) root: Level<u32>,
    /// Its limits in file order.
    pub(crate) rules: Vec<DomainRule>,
    /// The limits requests name (a descriptor's `limit`).
    pub(crate) overrides: Arc<Overrides<AnyBackend>>,
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("file", &self.file)
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

impl Domain {
    /// The limit that applies to a descriptor of `entries` (`(key, value)`
    /// pairs in order), if any (see the [module](crate::envoy) for the
    /// matching rules).
    pub fn find<'e>(&self, entries: impl IntoIterator<Item = (&'e str, &'e str)>) -> Option<&DomainRule> {
        let index = *self.root.find(entries)?;
        self.rules.get(index as usize)
    }

    /// [`Self::find`], with the descriptor's limiter key: its values joined
    /// as [`descriptor_key`](crate::envoy::descriptor_key) joins them,
    /// each value a `share_threshold` wildcard matched standing as the
    /// wildcard, so that all the values it matches count as one.
    pub fn find_keyed<'e>(
        &self,
        entries: impl IntoIterator<Item = (&'e str, &'e str)>,
    ) -> Option<(&DomainRule, Vec<u8>)> {
        let (index, key) = self.root.find_keyed(entries)?;
        Some((self.rules.get(*index as usize)?, key))
    }

    /// The file the domain is configured in, as it was given.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Every limit of the domain, in file order.
    pub fn rules(&self) -> &[DomainRule] {
        &self.rules
    }

    /// The limits a request's descriptors name for themselves (a
    /// descriptor's `limit`, as envoyproxy/ratelimit honours it): a fixed
    /// window of `requests_per_unit` per `unit`, whatever the file
    /// configures for the descriptor, keyed by the domain and every entry
    /// of the descriptor, keys and values ([`override_key`]), with the
    /// settings of the domain's limits. A key keeps its count while the
    /// limit changes within a unit; another unit counts apart (see
    /// [`Overrides`]).
    pub fn overrides(&self) -> &Arc<Overrides<AnyBackend>> {
        &self.overrides
    }
}

/// The limiter key of a descriptor that names its own limit: every entry's
/// key and value, escaped and joined as [`descriptor_key`](crate::envoy::descriptor_key)
/// joins values, so that different descriptors never share a key.
pub fn override_key<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<u8> {
    crate::envoy::descriptor_key(entries.into_iter().flat_map(|(key, value)| [key, value]))
}

/// A configured Envoy limit and the limiter that enforces it.
#[derive(Debug)]
pub struct DomainRule {
    pub(crate) rule: Rule,
    pub(crate) limiter: Option<Arc<Limiter<AnyBackend>>>,
}

impl DomainRule {
    /// The limit as configured.
    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// Its limiter, a fixed window of `requests_per_unit` per `unit`, or for
    /// `requests_per_unit: 0` a policy that admits nothing
    /// ([`tollgate::Policy::zero`]: always over the limit until the unit
    /// ends, no state); none for `unlimited: true` (always OK).
    pub fn limiter(&self) -> Option<&Arc<Limiter<AnyBackend>>> {
        self.limiter.as_ref()
    }
}
