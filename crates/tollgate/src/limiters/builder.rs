//! The builder of a [`Limiters`] set: a default policy, named
//! resources, and the settings each resource takes in place of the
//! builder's.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::memory::MemoryBackend;
use crate::backend::{Backend, Scope};
use crate::clock::Clock;
use crate::error::{ConfigError, Error};
use crate::keylist::KeyList;
use crate::lease::Lease;
use crate::limiter::{option_setters, validate_prefix, Charge, Limiter, Options, DEFAULT_KEY_PREFIX};
use crate::policy::Policy;
use crate::protection::DenyCache;
use crate::top::TopKeys;

use super::{Limiters, Named};

/// Configures a [`Limiters`] set; made by [`Limiters::builder`].
#[derive(Debug, Clone)]
pub struct LimitersBuilder<B> {
    backend: B,
    default: Option<Policy>,
    resources: Vec<(String, Policy)>,
    options: Options,
    overrides: HashMap<String, Override>,
    prefix: String,
}

/// What one resource sets differently from the builder's defaults.
#[derive(Debug, Clone, Default)]
struct Override {
    fallback: Option<Policy>,
    deny_cache: Option<Option<DenyCache>>,
    shadow: Option<bool>,
    top_keys: Option<Option<TopKeys>>,
    lease: Option<Option<Lease>>,
    charge: Option<Charge>,
    exempt: KeyList,
    deny: KeyList,
}

impl LimitersBuilder<MemoryBackend> {
    /// A builder on a new in-memory backend, with no policy yet.
    pub(super) fn new() -> Self {
        Self {
            backend: MemoryBackend::new(),
            default: None,
            resources: Vec::new(),
            options: Options::default(),
            overrides: HashMap::new(),
            prefix: DEFAULT_KEY_PREFIX.to_owned(),
        }
    }

    /// Runs the in-memory backend on `clock`.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.backend = self.backend.clock(clock);
        self
    }
}

impl<B: Backend> LimitersBuilder<B> {
    /// The policy for resources without an override (required).
    pub fn default_policy(mut self, policy: Policy) -> Self {
        self.default = Some(policy);
        self
    }

    /// A named resource with its own policy.
    pub fn resource(mut self, name: impl Into<String>, policy: Policy) -> Self {
        self.resources.push((name.into(), policy));
        self
    }

    option_setters!(LimitersBuilder);

    /// The fallback policy of resource `name`, in place of the builder's
    /// [`fallback`](Self::fallback). The fail policy must be
    /// [`FailPolicy::Fallback`](crate::FailPolicy::Fallback).
    pub fn resource_fallback(mut self, name: impl Into<String>, policy: Policy) -> Self {
        self.overrides.entry(name.into()).or_default().fallback = Some(policy);
        self
    }

    /// The deny cache of resource `name` (`None`: none), in place of the
    /// builder's [`deny_cache`](Self::deny_cache).
    pub fn resource_deny_cache(mut self, name: impl Into<String>, cache: Option<DenyCache>) -> Self {
        self.overrides.entry(name.into()).or_default().deny_cache = Some(cache);
        self
    }

    /// Shadow mode for resource `name`, in place of the builder's.
    pub fn resource_shadow(mut self, name: impl Into<String>, shadow: bool) -> Self {
        self.overrides.entry(name.into()).or_default().shadow = Some(shadow);
        self
    }

    /// The top keys of resource `name` (`None`: none), in place of the
    /// builder's [`top_keys`](Self::top_keys).
    pub fn resource_top_keys(mut self, name: impl Into<String>, top: Option<TopKeys>) -> Self {
        self.overrides.entry(name.into()).or_default().top_keys = Some(top);
        self
    }

    /// The leases of resource `name` (`None`: none), in place of the
    /// builder's [`lease`](Self::lease).
    pub fn resource_lease(mut self, name: impl Into<String>, lease: Option<Lease>) -> Self {
        self.overrides.entry(name.into()).or_default().lease = Some(lease);
        self
    }

    /// What a request is charged under resource `name`, in place of the
    /// builder's [`charge`](Self::charge).
    pub fn resource_charge(mut self, name: impl Into<String>, charge: Charge) -> Self {
        self.overrides.entry(name.into()).or_default().charge = Some(charge);
        self
    }

    /// Keys exempt under resource `name`, besides the builder's.
    pub fn resource_exempt(mut self, name: impl Into<String>, keys: KeyList) -> Self {
        self.overrides
            .entry(name.into())
            .or_default()
            .exempt
            .extend(&keys);
        self
    }

    /// Keys denied under resource `name`, besides the builder's.
    pub fn resource_deny(mut self, name: impl Into<String>, keys: KeyList) -> Self {
        self.overrides.entry(name.into()).or_default().deny.extend(&keys);
        self
    }

    /// Replaces the backend.
    pub fn backend<C: Backend>(self, backend: C) -> LimitersBuilder<C> {
        LimitersBuilder {
            backend,
            default: self.default,
            resources: self.resources,
            options: self.options,
            overrides: self.overrides,
            prefix: self.prefix,
        }
    }

    /// Validates the configuration and builds the set.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the field: a missing default policy, a
    /// resource name that [`Limiters::check_resource_name`] refuses, a duplicate
    /// resource name, an empty key prefix.
    pub fn build(self) -> Result<Limiters<B>, Error> {
        self.build_after(None).map(Limiters::serving)
    }

    /// Builds a set to take over from `previous` (policies changed at run
    /// time), keeping state as [`Limiters::replace`] does, while `previous`
    /// goes on serving what it serves: for a caller that swaps whole
    /// configurations of its own, of which the set is one part.
    ///
    /// # Errors
    ///
    /// As for [`build`](Self::build); `previous` is left as it was.
    pub fn build_from(self, previous: &Limiters<B>) -> Result<Limiters<B>, Error> {
        self.build_after(Some(&previous.current())).map(Limiters::serving)
    }

    /// Builds the set's limiters to take over from `previous` (policies
    /// changed at run time), keeping state: a resource (or the default)
    /// whose policy and settings are unchanged keeps its limiter as it is;
    /// one whose policy changed keeps the state of every limit whose
    /// strategy and window stay (see [`Backend::rebind`]); anything else
    /// starts fresh. Nothing is kept when the key prefix changed.
    pub(super) fn build_after(self, previous: Option<&Named<B>>) -> Result<Named<B>, Error> {
        validate_prefix(&self.prefix)?;
        let previous = previous.filter(|p| p.prefix.as_deref() == Some(self.prefix.as_str()));
        let default = self
            .default
            .ok_or_else(|| ConfigError::new("default", "a default policy is required"))?;
        if let Some(name) = self
            .overrides
            .keys()
            .find(|name| !self.resources.iter().any(|(n, _)| n == *name))
        {
            return Err(ConfigError::new(
                Limiters::resource_path(name),
                "has settings (fallback, deny cache, shadow, top keys, lease, charge, exempt or deny) but no policy",
            )
            .into());
        }
        let default = self.limiter_for(previous, "", &default, &self.options)?;
        let mut resources = HashMap::with_capacity(self.resources.len());
        for (name, policy) in &self.resources {
            Limiters::check_resource_name(name)?;
            if resources.contains_key(name.as_str()) {
                return Err(ConfigError::new(Limiters::resource_path(name), "is defined twice").into());
            }
            let options = self.options_of(name);
            let limiter = self
                .limiter_for(previous, name, policy, &options)
                .map_err(|e| match e {
                    Error::Config(e) => Error::Config(e.within(Limiters::resource_path(name))),
                    other => other,
                })?;
            resources.insert(name.clone().into_boxed_str(), limiter);
        }
        Ok(Named {
            default,
            resources,
            prefix: Some(self.prefix),
        })
    }

    /// The settings of the resource `name`: the set's, with the ones set
    /// for the resource in their place.
    fn options_of(&self, name: &str) -> Options {
        let mut options = self.options.clone();
        let Some(o) = self.overrides.get(name) else {
            return options;
        };
        if let Some(fallback) = o.fallback {
            options.fallback = Some(fallback);
        }
        if let Some(cache) = o.deny_cache {
            options.deny_cache = cache;
        }
        if let Some(shadow) = o.shadow {
            options.shadow = shadow;
        }
        if let Some(top) = o.top_keys {
            options.top_keys = top;
        }
        if let Some(lease) = o.lease {
            options.lease = lease;
        }
        if let Some(charge) = o.charge {
            options.charge = charge;
        }
        options.exempt.extend(&o.exempt);
        options.deny.extend(&o.deny);
        options
    }

    /// The limiter for `resource` (empty for the default): `previous`'s
    /// when nothing changed, else one bound after it.
    fn limiter_for(
        &self,
        previous: Option<&Named<B>>,
        resource: &str,
        policy: &Policy,
        options: &Options,
    ) -> Result<Arc<Limiter<B>>, Error> {
        let before = previous.and_then(|p| {
            if resource.is_empty() {
                Some(&p.default)
            } else {
                p.resources.get(resource)
            }
        });
        if let Some(before) = before {
            if before.policy() == policy && before.built_with(options) {
                return Ok(before.clone());
            }
        }
        let scope = Scope {
            prefix: &self.prefix,
            resource,
            policy,
        };
        Limiter::bind_after(&self.backend, &scope, options, before.map(|b| &**b), (None, None)).map(Arc::new)
    }
}
