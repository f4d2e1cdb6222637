//! The builder of a [`Limiters`] set: a default policy, named
//! resources, and the settings each resource takes in place of the
//! builder's.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::memory::MemoryBackend;
use crate::backend::{Backend, Scope};
use crate::clock::Clock;
use crate::error::{ConfigError, Error};
use crate::limiter::{option_setters, validate_prefix, Limiter, Options, DEFAULT_KEY_PREFIX};
use crate::policy::Policy;

use super::{Limiters, Named, Resource};

/// Configures a [`Limiters`] set; made by [`Limiters::builder`].
#[derive(Debug, Clone)]
pub struct LimitersBuilder<B> {
    backend: B,
    default: Option<Policy>,
    resources: Vec<(String, Resource)>,
    options: Options,
    prefix: String,
}

impl LimitersBuilder<MemoryBackend> {
    /// A builder on a new in-memory backend, with no policy yet.
    pub(super) fn new() -> Self {
        Self {
            backend: MemoryBackend::new(),
            default: None,
            resources: Vec::new(),
            options: Options::default(),
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

    /// A named resource: its own policy, and the settings it takes in
    /// place of the set's or besides them (a [`Resource`], or a
    /// [`Policy`] with the set's settings).
    pub fn resource(mut self, name: impl Into<String>, resource: impl Into<Resource>) -> Self {
        self.resources.push((name.into(), resource.into()));
        self
    }

    option_setters!(LimitersBuilder);

    /// Replaces the backend.
    pub fn backend<C: Backend>(self, backend: C) -> LimitersBuilder<C> {
        LimitersBuilder {
            backend,
            default: self.default,
            resources: self.resources,
            options: self.options,
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
        let default = self.limiter_for(previous, "", &default, &self.options.inherited_by(&default))?;
        let mut resources = HashMap::with_capacity(self.resources.len());
        let mut in_flight = HashMap::new();
        for (name, resource) in &self.resources {
            Limiters::check_resource_name(name)?;
            if resources.contains_key(name.as_str()) {
                return Err(ConfigError::new(Limiters::resource_path(name), "is defined twice").into());
            }
            let options = resource.options(&self.options);
            let within = |e| match e {
                Error::Config(e) => Error::Config(e.within(Limiters::resource_path(name))),
                other => other,
            };
            let limiter = self
                .limiter_for(previous, name, &resource.policy, &options)
                .map_err(within)?;
            if let Some(slots) = &resource.in_flight {
                let slots = self.in_flight_for(previous, name, &resource.policy, slots, &options);
                in_flight.insert(name.clone().into_boxed_str(), slots.map_err(within)?);
            }
            resources.insert(name.clone().into_boxed_str(), limiter);
        }
        Ok(Named {
            default,
            resources,
            in_flight,
            prefix: Some(self.prefix),
        })
    }

    /// The concurrency limiter `resource` combines with its rate policy
    /// `rates` ([`Resource::in_flight`]): `previous`'s when nothing
    /// changed, else one bound after it, with the resource's `options` as
    /// a concurrency limit inherits them (no deny cache, leases or `charge:
    /// always`, which are the rates').
    fn in_flight_for(
        &self,
        previous: Option<&Named<B>>,
        resource: &str,
        rates: &Policy,
        slots: &Policy,
        options: &Options,
    ) -> Result<Arc<Limiter<B>>, Error> {
        let refused = if !slots.limits()[0].strategy().is_concurrency() {
            Some(format!("{slots} is not a concurrency limit"))
        } else if rates.limits().iter().any(|l| l.strategy().is_concurrency()) {
            Some("the resource's own policy is a concurrency limit: it takes rates here".to_owned())
        } else {
            None
        };
        if let Some(reason) = refused {
            return Err(ConfigError::new("in_flight", reason).into());
        }
        let before = previous.and_then(|p| p.in_flight.get(resource));
        self.bind_limiter(before, resource, slots, &options.inherited_by(slots))
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
        self.bind_limiter(before, resource, policy, options)
    }

    /// `before` when its policy and options are these, else a limiter of
    /// `policy` bound after it (keeping the state [`Backend::rebind`]
    /// keeps).
    fn bind_limiter(
        &self,
        before: Option<&Arc<Limiter<B>>>,
        resource: &str,
        policy: &Policy,
        options: &Options,
    ) -> Result<Arc<Limiter<B>>, Error> {
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
