//! A limiter with a default policy and named per-resource policies.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::memory::MemoryBackend;
use crate::backend::{Backend, Scope};
use crate::clock::Clock;
use crate::error::{ConfigError, Error};
use crate::keylist::KeyList;
use crate::lease::Lease;
use crate::limiter::{option_setters, validate_prefix, Limiter, Options, DEFAULT_KEY_PREFIX};
use crate::policy::Policy;
use crate::protection::DenyCache;
use crate::top::TopKeys;

/// Enforces a default policy plus named per-resource overrides.
///
/// State of different resources never collides, even for equal keys.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Policy, ResourceLimiter, Strategy};
///
/// let limiter = ResourceLimiter::builder()
///     .default_policy(Policy::new(Strategy::SlidingWindow, 100, Duration::from_secs(60))?)
///     .resource("login", Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(60))?)
///     .build()?;
/// assert_eq!(limiter.limiter("login").check("alice").remaining, 4);
/// assert_eq!(limiter.limiter("search").check("alice").remaining, 99);
/// # Ok::<(), tollgate::Error>(())
/// ```
pub struct ResourceLimiter<B: Backend = MemoryBackend> {
    default: Arc<Limiter<B>>,
    resources: HashMap<Box<str>, Arc<Limiter<B>>>,
    prefix: String,
}

impl<B: Backend> std::fmt::Debug for ResourceLimiter<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceLimiter")
            .field("default", &self.default)
            .field("resources", &self.resources)
            .finish()
    }
}

impl ResourceLimiter {
    /// A builder for an in-memory resource-scoped limiter.
    pub fn builder() -> ResourceLimiterBuilder<MemoryBackend> {
        ResourceLimiterBuilder {
            backend: MemoryBackend::new(),
            default: None,
            resources: Vec::new(),
            options: Options::default(),
            overrides: HashMap::new(),
            prefix: DEFAULT_KEY_PREFIX.to_owned(),
        }
    }
}

impl<B: Backend> ResourceLimiter<B> {
    /// The limiter for `resource`, or the default one.
    ///
    /// A caller decides and applies operations with its methods:
    /// `limiter.limiter("login").check(ip)`.
    pub fn limiter(&self, resource: &str) -> &Limiter<B> {
        self.shared_limiter(resource)
    }

    /// [`Self::limiter`] as the [`Arc`] it is kept in.
    pub(crate) fn shared_limiter(&self, resource: &str) -> &Arc<Limiter<B>> {
        self.resources.get(resource).unwrap_or(&self.default)
    }

    /// The policy applied to `resource`.
    pub fn policy(&self, resource: &str) -> &Policy {
        self.limiter(resource).policy()
    }

    /// The default limiter.
    pub fn default_limiter(&self) -> &Limiter<B> {
        &self.default
    }

    /// The named resources and their limiters.
    pub fn resources(&self) -> impl Iterator<Item = (&str, &Limiter<B>)> {
        self.resources.iter().map(|(name, l)| (&**name, &**l))
    }

    /// Ends the leases of every limiter (the default policy's and each
    /// resource's) and gives their unspent units back, as
    /// [`Limiter::end_leases`] does. Returns the units given back.
    ///
    /// # Errors
    ///
    /// The first limiter's error, after every limiter was tried.
    pub async fn end_leases(&self) -> Result<u64, Error> {
        let limiters: Vec<&Limiter<B>> = std::iter::once(&*self.default)
            .chain(self.resources.values().map(|l| &**l))
            .collect();
        crate::limiter::end_leases(limiters).await
    }
}

impl ResourceLimiter<MemoryBackend> {}

/// Configures a [`ResourceLimiter`].
#[derive(Debug, Clone)]
pub struct ResourceLimiterBuilder<B> {
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
    exempt: KeyList,
    deny: KeyList,
}

impl ResourceLimiterBuilder<MemoryBackend> {
    /// Runs the in-memory backend on `clock`.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.backend = self.backend.clock(clock);
        self
    }
}

impl<B: Backend> ResourceLimiterBuilder<B> {
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

    option_setters!(ResourceLimiterBuilder);

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
    pub fn backend<C: Backend>(self, backend: C) -> ResourceLimiterBuilder<C> {
        ResourceLimiterBuilder {
            backend,
            default: self.default,
            resources: self.resources,
            options: self.options,
            overrides: self.overrides,
            prefix: self.prefix,
        }
    }

    /// Validates the configuration and builds the limiter.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the field: a missing default policy, a
    /// resource name that [`check_resource_name`] refuses, a duplicate
    /// resource name, an empty key prefix.
    pub fn build(self) -> Result<ResourceLimiter<B>, Error> {
        self.build_after(None)
    }

    /// Builds the limiter to take over from `previous` (policies changed at
    /// run time), keeping state: a resource (or the default) whose policy and
    /// settings are unchanged keeps its limiter as it is; one whose policy
    /// changed keeps the state of every limit whose strategy and window stay
    /// (see [`Backend::rebind`]); anything else starts fresh. Nothing is kept
    /// when the key prefix changed. Swap the result in with a
    /// [`LiveLimiter`](crate::LiveLimiter).
    ///
    /// # Errors
    ///
    /// As for [`build`](Self::build); `previous` is left as it was.
    pub fn build_from(self, previous: &ResourceLimiter<B>) -> Result<ResourceLimiter<B>, Error> {
        self.build_after(Some(previous))
    }

    fn build_after(self, previous: Option<&ResourceLimiter<B>>) -> Result<ResourceLimiter<B>, Error> {
        validate_prefix(&self.prefix)?;
        let previous = previous.filter(|p| p.prefix == self.prefix);
        let default = self
            .default
            .ok_or_else(|| ConfigError::new("default", "a default policy is required"))?;
        if let Some(name) = self
            .overrides
            .keys()
            .find(|name| !self.resources.iter().any(|(n, _)| n == *name))
        {
            return Err(ConfigError::new(
                resource_path(name),
                "has settings (fallback, deny cache, shadow, top keys, lease, exempt or deny) but no policy",
            )
            .into());
        }
        let options_of = |name: &str| -> Options {
            let mut options = self.options.clone();
            if let Some(o) = self.overrides.get(name) {
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
                options.exempt.extend(&o.exempt);
                options.deny.extend(&o.deny);
            }
            options
        };
        // The limiter for `resource`: the previous one when nothing changed,
        // else one bound after it.
        let limiter_for =
            |resource: &str, policy: &Policy, options: &Options| -> Result<Arc<Limiter<B>>, Error> {
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
                Limiter::bind_after(&self.backend, &scope, options, before.map(|b| &**b), (None, None))
                    .map(Arc::new)
            };
        let default = limiter_for("", &default, &self.options)?;
        let mut resources = HashMap::with_capacity(self.resources.len());
        for (name, policy) in &self.resources {
            check_resource_name(name)?;
            if resources.contains_key(name.as_str()) {
                return Err(ConfigError::new(resource_path(name), "is defined twice").into());
            }
            let limiter = limiter_for(name, policy, &options_of(name)).map_err(|e| match e {
                Error::Config(e) => Error::Config(e.within(resource_path(name))),
                other => other,
            })?;
            resources.insert(name.clone().into_boxed_str(), limiter);
        }
        Ok(ResourceLimiter {
            default,
            resources,
            prefix: self.prefix,
        })
    }
}

/// Checks that `name` can name a resource: it must not be empty (the empty
/// name is the default policy's) and must not contain control characters
/// (`char::is_control`: line breaks, tabs, escape sequences and the like),
/// which would corrupt logs, metrics labels and error messages that show it.
///
/// Every other string is accepted; backends escape names in their keys.
/// [`ResourceLimiterBuilder::build`] applies this rule, and so should any
/// reader of resource names (policy files, traces) to refuse the same names.
///
/// # Errors
///
/// A [`ConfigError`] whose field is `resources.NAME`, the name written as in
/// [`resource_path`], e.g. `resources.""` or `resources."log\nin"`.
///
/// ```
/// assert!(tollgate::check_resource_name("login").is_ok());
/// let err = tollgate::check_resource_name("log\nin").unwrap_err();
/// assert_eq!(err.field(), r#"resources."log\nin""#);
/// assert!(tollgate::check_resource_name("").is_err());
/// ```
pub fn check_resource_name(name: &str) -> Result<(), ConfigError> {
    if name.is_empty() {
        return Err(ConfigError::new(
            resource_path(name),
            "a resource name must not be empty (the empty name is the default policy's)",
        ));
    }
    if let Some((at, c)) = name.char_indices().find(|(_, c)| c.is_control()) {
        return Err(ConfigError::new(
            resource_path(name),
            format!(
                "a resource name must not contain control characters; found U+{:04X} at byte {at}",
                u32::from(c)
            ),
        ));
    }
    Ok(())
}

/// The field path of resource `name` in error messages: `resources.login`
/// for names of letters, digits, `_` and `-`, otherwise the name quoted and
/// escaped as Rust's `Debug` writes it (`resources."api:v1"`,
/// `resources."log\nin"`), so no name can inject line breaks or fake a
/// nested field.
pub fn resource_path(name: &str) -> String {
    let plain = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("resources.{name}")
    } else {
        format!("resources.{name:?}")
    }
}
