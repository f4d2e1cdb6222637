//! [`Resource`]: what one named resource of a [`Limiters`](crate::Limiters)
//! set differs in from the set.

use crate::keylist::KeyList;
use crate::lease::Lease;
use crate::limiter::{Charge, Options};
use crate::policy::Policy;
use crate::protection::DenyCache;
use crate::top::TopKeys;

/// A named resource of a [`Limiters`](crate::Limiters) set: its policy,
/// and the settings it takes in place of the set's (a fallback policy, a
/// deny cache, shadow mode, top keys, leases, what a request is charged)
/// or besides them (keys exempt or denied). A setting not given here is
/// the set's ([`LimitersBuilder`](crate::LimitersBuilder)'s).
///
/// A [`Policy`] is a resource with no settings of its own, so
/// [`LimitersBuilder::resource`](crate::LimitersBuilder::resource) takes
/// either:
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiters, Policy, Resource, Strategy};
///
/// let login = Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(60))?;
/// let search = Policy::new(Strategy::TokenBucket, 100, Duration::from_secs(60))?;
/// let limiters = Limiters::builder()
///     .default_policy(search)
///     .shadow(true)
///     .resource("login", Resource::new(login).shadow(false))
///     .resource("search", search)
///     .build()?;
/// assert!(!limiters.limiter("login").is_shadow());
/// assert!(limiters.limiter("search").is_shadow());
/// # Ok::<(), tollgate::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Resource {
    pub(super) policy: Policy,
    fallback: Option<Policy>,
    deny_cache: Option<Option<DenyCache>>,
    shadow: Option<bool>,
    top_keys: Option<Option<TopKeys>>,
    lease: Option<Option<Lease>>,
    charge: Option<Charge>,
    exempt: KeyList,
    deny: KeyList,
    pub(super) in_flight: Option<Policy>,
}

impl From<Policy> for Resource {
    fn from(policy: Policy) -> Self {
        Self::new(policy)
    }
}

impl Resource {
    /// A resource deciding under `policy`, with the set's settings.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            fallback: None,
            deny_cache: None,
            shadow: None,
            top_keys: None,
            lease: None,
            charge: None,
            exempt: KeyList::default(),
            deny: KeyList::default(),
            in_flight: None,
        }
    }

    /// A concurrency limit the resource's requests hold while they run,
    /// besides its rate policy ([requests in
    /// flight](crate::_documentation::semantics#requests-in-flight),
    /// several limits): a request needs both. The set builds a second
    /// limiter for it, [`Limiters::in_flight`](crate::Limiters::in_flight),
    /// which acquires the permit; the resource's own limiter decides the
    /// rate. `policy` must be a concurrency limit and the resource's own
    /// policy a rate, or the set is refused, naming `in_flight`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiters, Policy, Resource, Strategy};
    ///
    /// let rate = Policy::new(Strategy::TokenBucket, 10, Duration::from_secs(1))?;
    /// let slots = Policy::new(Strategy::Concurrency, 2, Duration::from_secs(30))?;
    /// let limiters = Limiters::builder()
    ///     .default_policy(rate)
    ///     .resource("export", Resource::new(rate).in_flight(slots))
    ///     .build()?;
    /// assert_eq!(*limiters.in_flight("export").unwrap().policy(), slots);
    /// assert!(limiters.in_flight("search").is_none());
    /// // A rate is not a concurrency limit:
    /// let wrong = Limiters::builder()
    ///     .default_policy(rate)
    ///     .resource("export", Resource::new(rate).in_flight(rate))
    ///     .build();
    /// assert!(wrong.unwrap_err().to_string().contains("in_flight"));
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn in_flight(mut self, policy: Policy) -> Self {
        self.in_flight = Some(policy);
        self
    }

    /// The in-memory policy that decides while the store fails, in place
    /// of the set's [`fallback`](crate::LimitersBuilder::fallback). The
    /// fail policy must be [`FailPolicy::Fallback`](crate::FailPolicy::Fallback).
    pub fn fallback(mut self, policy: Policy) -> Self {
        self.fallback = Some(policy);
        self
    }

    /// The deny cache (`None`: none), in place of the set's
    /// [`deny_cache`](crate::LimitersBuilder::deny_cache).
    pub fn deny_cache(mut self, cache: Option<DenyCache>) -> Self {
        self.deny_cache = Some(cache);
        self
    }

    /// Shadow mode, on or off, in place of the set's.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = Some(shadow);
        self
    }

    /// The top keys (`None`: none), in place of the set's
    /// [`top_keys`](crate::LimitersBuilder::top_keys).
    pub fn top_keys(mut self, top: Option<TopKeys>) -> Self {
        self.top_keys = Some(top);
        self
    }

    /// The leases (`None`: none), in place of the set's
    /// [`lease`](crate::LimitersBuilder::lease).
    pub fn lease(mut self, lease: Option<Lease>) -> Self {
        self.lease = Some(lease);
        self
    }

    /// What a request is charged, in place of the set's
    /// [`charge`](crate::LimitersBuilder::charge).
    pub fn charge(mut self, charge: Charge) -> Self {
        self.charge = Some(charge);
        self
    }

    /// Keys exempt under this resource, besides the set's.
    pub fn exempt(mut self, keys: KeyList) -> Self {
        self.exempt.extend(&keys);
        self
    }

    /// Keys denied under this resource, besides the set's.
    pub fn deny(mut self, keys: KeyList) -> Self {
        self.deny.extend(&keys);
        self
    }

    /// The settings of this resource: the set's `options`, with this
    /// resource's in their place (exempt and deny keys added). A
    /// concurrency limit leaves out the set's deny cache, leases and
    /// `charge: always`, which are for rates; given on the resource itself
    /// they are refused when its limiter is built.
    pub(super) fn options(&self, options: &Options) -> Options {
        let mut options = options.inherited_by(&self.policy);
        if let Some(fallback) = self.fallback {
            options.fallback = Some(fallback);
        }
        if let Some(cache) = self.deny_cache {
            options.deny_cache = cache;
        }
        if let Some(shadow) = self.shadow {
            options.shadow = shadow;
        }
        if let Some(top) = self.top_keys {
            options.top_keys = top;
        }
        if let Some(lease) = self.lease {
            options.lease = lease;
        }
        if let Some(charge) = self.charge {
            options.charge = charge;
        }
        options.exempt.extend(&self.exempt);
        options.deny.extend(&self.deny);
        options
    }
}
