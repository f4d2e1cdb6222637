//! The settings beside the policies, file-wide (under `tollgate`, where
//! they also apply to the default policy) and per resource: `exempt`,
//! `deny`, `shadow`, `deny_cache`, `top_keys`, `lease`, `charge` and
//! `fallback`.

use serde::de::MapAccess;
use tollgate::protection::DenyCache;
use tollgate::protection::Lease;
use tollgate::top::TopKeys;
use tollgate::{Charge, ConfigError, KeyList, LimiterBuilder, LimitersBuilder, Policy, Resource, Strategy};

use crate::fallback_policy::FallbackPolicy;
use crate::fields::next;
use crate::setting_field::SettingField;
use crate::setting_values::{DenyCacheSetting, KeyEntries, LeaseSetting, TopKeysSetting};
use crate::values::{ChargeSetting, Flag};

/// The settings of the `tollgate` section or of one resource, as written.
#[derive(Default)]
pub(crate) struct RawSettings {
    exempt: Option<KeyEntries>,
    deny: Option<KeyEntries>,
    shadow: Option<Flag>,
    deny_cache: Option<DenyCacheSetting>,
    top_keys: Option<TopKeysSetting>,
    lease: Option<LeaseSetting>,
    charge: Option<ChargeSetting>,
    pub(crate) fallback: Option<FallbackPolicy>,
}

impl RawSettings {
    /// Reads the value of `field` from `map`; a setting given twice is an
    /// error at the value, and so is a `fallback` when `fallback_conflict`
    /// gives the message of a field it conflicts with.
    pub(crate) fn read<'de, A: MapAccess<'de>>(
        &mut self,
        field: SettingField,
        map: &mut A,
        fallback_conflict: Option<String>,
    ) -> Result<(), A::Error> {
        match field {
            SettingField::Exempt => self.exempt = Some(next(map, &self.exempt, |_| None)?),
            SettingField::Deny => self.deny = Some(next(map, &self.deny, |_| None)?),
            SettingField::Shadow => self.shadow = Some(next(map, &self.shadow, |_| None)?),
            SettingField::DenyCache => self.deny_cache = Some(next(map, &self.deny_cache, |_| None)?),
            SettingField::TopKeys => self.top_keys = Some(next(map, &self.top_keys, |_| None)?),
            SettingField::Lease => self.lease = Some(next(map, &self.lease, |_| None)?),
            SettingField::Charge => self.charge = Some(next(map, &self.charge, |_| None)?),
            SettingField::Fallback => {
                self.fallback = Some(next(map, &self.fallback, move |_| fallback_conflict)?);
            }
        }
        Ok(())
    }

    /// The settings with their values resolved: the lists parsed, the
    /// fallback policy's limits without `strategy` taking `strategy`.
    /// `path` is the field path of the section or resource, for errors.
    ///
    /// # Errors
    ///
    /// The core's [`ConfigError`] under `path`: a fallback whose limits
    /// repeat one another once `strategy` fills in (everything else was
    /// checked, with its line, as the file was read).
    pub(crate) fn resolve(&self, strategy: Strategy, path: &str) -> Result<Own, ConfigError> {
        let list = |entries: &Option<KeyEntries>, name: &str| match entries {
            Some(KeyEntries(entries)) => KeyList::parse(&format!("{path}.{name}"), entries),
            None => Ok(KeyList::new()),
        };
        let fallback = match &self.fallback {
            Some(FallbackPolicy(raw)) => Some(
                raw.policy(strategy)
                    .map_err(|e| e.within(format!("{path}.fallback")))?,
            ),
            None => None,
        };
        Ok(Own {
            shadow: self.shadow.as_ref().map(|f| f.0),
            exempt: list(&self.exempt, "exempt")?,
            deny: list(&self.deny, "deny")?,
            deny_cache: self.deny_cache.as_ref().map(|c| c.0),
            top_keys: self.top_keys.as_ref().map(|t| t.0),
            lease: self.lease.as_ref().map(|l| l.0),
            charge: self.charge.as_ref().map(|c| c.0),
            fallback,
        })
    }
}

/// What a policy file sets beside the policies, for the default policy or
/// for one resource: the settings under `tollgate`, with a resource's own
/// on top (see [`PolicyFile::settings`](crate::PolicyFile::settings)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settings {
    /// Shadow mode (`shadow`): every request is allowed, and the decisions
    /// enforcement would deny are marked
    /// [`shadow_denied`](tollgate::Decision::shadow_denied).
    pub shadow: bool,
    /// Keys always allowed, neither charged nor stored (`exempt`): the
    /// file-wide entries and the resource's.
    pub exempt: KeyList,
    /// Keys always denied (`deny`), winning over `exempt`: the file-wide
    /// entries and the resource's.
    pub deny: KeyList,
    /// The local cache of denied keys (`deny_cache`), if any.
    pub deny_cache: Option<DenyCache>,
    /// The in-memory policy that decides while the store fails
    /// (`fallback`), if any.
    pub fallback: Option<Policy>,
    /// The keys with the most denied requests, admitted units and
    /// shadow-denied requests over the last minute (`top_keys`), if kept.
    /// A policy file keeps them unless it says `top_keys: false`.
    pub top_keys: Option<TopKeys>,
    /// Leases of hot keys' units from the shared store (`lease`), if any:
    /// they apply when state lives in Redis.
    pub lease: Option<Lease>,
    /// What a request is charged (`charge`): only when admitted (the
    /// default), or `always`, for usage reported after the fact.
    pub charge: Charge,
}

/// The settings one resource (or the `tollgate` section) gives itself:
/// what it leaves out comes from the section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Own {
    shadow: Option<bool>,
    exempt: KeyList,
    deny: KeyList,
    deny_cache: Option<Option<DenyCache>>,
    top_keys: Option<Option<TopKeys>>,
    lease: Option<Option<Lease>>,
    charge: Option<Charge>,
    fallback: Option<Policy>,
}

impl Own {
    /// Whether nothing is set.
    pub(crate) fn is_empty(&self) -> bool {
        *self == Own::default()
    }

    /// Turns the deny cache on, of [`DenyCache::new`]'s size, unless
    /// `deny_cache` is given.
    pub(crate) fn deny_cache_by_default(&mut self) {
        if self.deny_cache.is_none() {
            self.deny_cache = Some(Some(DenyCache::new()));
        }
    }

    /// The section's settings: what the file leaves out is off (the deny
    /// cache: see [`Own::deny_cache_by_default`]), but top keys, kept of
    /// [`TopKeys::new`]'s capacity unless `top_keys: false`: they change
    /// no decision and answer who is limited.
    pub(crate) fn file_wide(self) -> Settings {
        Settings {
            shadow: self.shadow.unwrap_or(false),
            exempt: self.exempt,
            deny: self.deny,
            deny_cache: self.deny_cache.flatten(),
            fallback: self.fallback,
            top_keys: self.top_keys.unwrap_or(Some(TopKeys::new())),
            lease: self.lease.flatten(),
            charge: self.charge.unwrap_or_default(),
        }
    }

    /// Resource `policy` with these settings, on top of the file-wide
    /// ones.
    pub(crate) fn resource(&self, policy: Policy) -> Resource {
        let mut resource = Resource::new(policy);
        if let Some(shadow) = self.shadow {
            resource = resource.shadow(shadow);
        }
        if !self.exempt.is_empty() {
            resource = resource.exempt(self.exempt.clone());
        }
        if !self.deny.is_empty() {
            resource = resource.deny(self.deny.clone());
        }
        if let Some(cache) = self.deny_cache {
            resource = resource.deny_cache(cache);
        }
        if let Some(fallback) = self.fallback {
            resource = resource.fallback(fallback);
        }
        if let Some(top) = self.top_keys {
            resource = resource.top_keys(top);
        }
        if let Some(lease) = self.lease {
            resource = resource.lease(lease);
        }
        if let Some(charge) = self.charge {
            resource = resource.charge(charge);
        }
        resource
    }
}

impl Settings {
    /// These settings with a resource's `own` on top: its lists added to
    /// these, its other settings in place of these where it gives them.
    pub(crate) fn with(&self, own: &Own) -> Settings {
        let mut settings = self.clone();
        settings.shadow = own.shadow.unwrap_or(self.shadow);
        settings.exempt.extend(&own.exempt);
        settings.deny.extend(&own.deny);
        settings.deny_cache = own.deny_cache.unwrap_or(self.deny_cache);
        settings.fallback = own.fallback.or(self.fallback);
        settings.top_keys = own.top_keys.unwrap_or(self.top_keys);
        settings.lease = own.lease.unwrap_or(self.lease);
        settings.charge = own.charge.unwrap_or(self.charge);
        settings
    }

    /// Sets these settings on the builder of one limiter: shadow mode,
    /// the exempt and deny lists, the deny cache, the fallback, the top
    /// keys, the leases and what a request is charged. This is
    /// how a set's Envoy limits and `tollgate simulate` take a policy
    /// file's settings.
    ///
    /// ```
    /// # fn demo(file: &tollgate_config::PolicyFile) -> Result<(), tollgate::Error> {
    /// use tollgate_config::Target;
    ///
    /// let settings = file.settings(Target::Resource("login"));
    /// let limiter = settings
    ///     .configure(tollgate::Limiter::builder())
    ///     .policy(*file.policy("login"))
    ///     .build()?;
    /// # let _ = limiter;
    /// # Ok(())
    /// # }
    /// ```
    pub fn configure<B: tollgate::backend::Backend>(&self, builder: LimiterBuilder<B>) -> LimiterBuilder<B> {
        self.set_on(builder)
    }

    /// Adds these settings, as the file-wide ones, to `builder`.
    pub(crate) fn apply<B>(&self, builder: LimitersBuilder<B>) -> LimitersBuilder<B>
    where
        B: tollgate::backend::Backend,
    {
        self.set_on(builder)
    }

    /// The one mapping of these settings onto a builder's setters.
    fn set_on<T: Configurable>(&self, mut builder: T) -> T {
        builder = builder
            .shadow(self.shadow)
            .exempt(self.exempt.clone())
            .deny(self.deny.clone())
            .charge(self.charge);
        if let Some(cache) = self.deny_cache {
            builder = builder.deny_cache(cache);
        }
        if let Some(fallback) = self.fallback {
            builder = builder.fallback(fallback);
        }
        if let Some(top) = self.top_keys {
            builder = builder.top_keys(top);
        }
        if let Some(lease) = self.lease {
            builder = builder.lease(lease);
        }
        builder
    }
}

/// A builder with the core's option setters (both builders have the same).
trait Configurable: Sized {
    fn shadow(self, shadow: bool) -> Self;
    fn exempt(self, keys: KeyList) -> Self;
    fn deny(self, keys: KeyList) -> Self;
    fn deny_cache(self, cache: DenyCache) -> Self;
    fn fallback(self, policy: Policy) -> Self;
    fn top_keys(self, top: TopKeys) -> Self;
    fn lease(self, lease: Lease) -> Self;
    fn charge(self, charge: Charge) -> Self;
}

/// Implements [`Configurable`] by the builder's own setters.
macro_rules! configurable {
    ($builder:ident) => {
        impl<B: tollgate::backend::Backend> Configurable for $builder<B> {
            fn shadow(self, shadow: bool) -> Self {
                $builder::shadow(self, shadow)
            }
            fn exempt(self, keys: KeyList) -> Self {
                $builder::exempt(self, keys)
            }
            fn deny(self, keys: KeyList) -> Self {
                $builder::deny(self, keys)
            }
            fn deny_cache(self, cache: DenyCache) -> Self {
                $builder::deny_cache(self, cache)
            }
            fn fallback(self, policy: Policy) -> Self {
                $builder::fallback(self, policy)
            }
            fn top_keys(self, top: TopKeys) -> Self {
                $builder::top_keys(self, top)
            }
            fn lease(self, lease: Lease) -> Self {
                $builder::lease(self, lease)
            }
            fn charge(self, charge: Charge) -> Self {
                $builder::charge(self, charge)
            }
        }
    };
}

configurable!(LimiterBuilder);
configurable!(LimitersBuilder);

/// The message of a resource's `fallback` in a file without a file-wide
/// one.
pub(crate) fn fallback_without_file_wide(resource: &str) -> String {
    format!(
        "`{}.fallback` is given but `fallback` is not: a resource's fallback takes the place of \
         the file-wide one, which gives the whole file the fail policy `fallback`; give \
         `fallback` under `tollgate` too",
        tollgate::Limiters::resource_path(resource)
    )
}

/// The message of `fail_open: true` beside `fallback`.
pub(crate) fn fail_open_and_fallback() -> String {
    "`fail_open: true` and `fallback` are mutually exclusive: with a fallback, the requests the \
     store cannot decide are decided by the fallback policy in this process instead of being \
     admitted; remove `fail_open` (or set it to false) or `fallback`"
        .to_owned()
}
