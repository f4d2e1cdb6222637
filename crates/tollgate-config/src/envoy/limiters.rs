//! The limiters of a set's Envoy limits: built on the set's backend with
//! fewer in-memory shards, sharing metrics handles per label, and kept or
//! rebuilt after the previous set's by resource.

use std::collections::HashMap;
use std::sync::Arc;

use tollgate::clock::SharedClock;

use tollgate::{Charge, FailPolicy, Limiter, Overrides, Policy, Strategy};

use crate::any_backend::AnyBackend;
use crate::envoy::domain::Domain;
use crate::envoy::file::{EnvoyFile, Rule};
use crate::settings::Settings;

/// About how many shards the in-memory tables of all Envoy limits hold
/// together, once there are more than `ENVOY_SHARDS / FEW_SHARDS` limits
/// (each table keeps at least one).
const ENVOY_SHARDS: usize = 16_384;

/// The fewest shards [`tollgate::MemoryBackend::new`] gives a table: below this, an
/// Envoy limit's table gets fewer.
const FEW_SHARDS: usize = 64;

/// What identifies an Envoy limiter's state and how it reports: a reload
/// keeps the limiter of an identity that is still configured.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Identity {
    prefix: String,
    resource: String,
    policy: Policy,
    fail: FailPolicy,
    charge: Charge,
    /// The metrics label, where it is not the resource.
    label: Option<String>,
}

/// What the previous set's Envoy limits were built with.
pub(crate) struct Previous<'a> {
    /// Its domains.
    pub(crate) domains: &'a HashMap<String, Domain>,
    /// Its key prefix (the policy file's).
    pub(crate) prefix: &'a str,
    /// Its fail policy.
    pub(crate) fail: FailPolicy,
    /// The settings its Envoy limits had.
    pub(crate) settings: &'a Settings,
}

/// Every Envoy limiter of the previous set by identity.
fn kept(set: &Previous<'_>) -> HashMap<Identity, Arc<Limiter<AnyBackend>>> {
    let mut out = HashMap::new();
    let envoy_prefix = envoy_prefix(set.prefix);
    for (name, domain) in set.domains {
        let base = domain.overrides.base();
        out.insert(
            Identity {
                prefix: envoy_prefix.clone(),
                resource: overrides_resource(name),
                policy: *base.policy(),
                fail: set.fail,
                charge: base.charges(),
                label: Some(format!("envoy:{name}")),
            },
            base.clone(),
        );
        for rule in &domain.rules {
            if let Some(limiter) = &rule.limiter {
                let identity = Identity {
                    prefix: envoy_prefix.clone(),
                    resource: rule.rule.resource.clone(),
                    policy: *limiter.policy(),
                    fail: set.fail,
                    charge: limiter.charges(),
                    label: envoy_label(name, &rule.rule),
                };
                out.insert(identity, limiter.clone());
            }
        }
    }
    out
}

/// The Envoy limiters of a set being built, and what they are built after.
pub(crate) struct EnvoyLimits<'a> {
    /// The previous set's Envoy limiters by identity.
    kept: HashMap<Identity, Arc<Limiter<AnyBackend>>>,
    /// The previous limiter of each place, whatever its policy: a changed
    /// policy is bound after it and keeps the state its limits allow.
    before: HashMap<(String, String), Arc<Limiter<AnyBackend>>>,
    /// Whether the previous set's Envoy limits had these settings.
    unchanged: bool,
    settings: &'a Arc<Settings>,
    fail: FailPolicy,
    backend: AnyBackend,
    /// The first limiter built with each metrics label.
    counted_as: HashMap<String, Arc<Limiter<AnyBackend>>>,
    /// The clock of in-memory state, read by a limit of 0 requests per
    /// unit for the end of its unit (the system clock without one).
    clock: Option<SharedClock>,
}

impl<'a> EnvoyLimits<'a> {
    pub(crate) fn new(
        backend: &AnyBackend,
        envoy: &[(String, EnvoyFile)],
        previous: Option<Previous<'_>>,
        settings: &'a Arc<Settings>,
        fail: FailPolicy,
        clock: Option<SharedClock>,
    ) -> Self {
        let kept = previous.as_ref().map(kept).unwrap_or_default();
        let before = kept
            .iter()
            .map(|(identity, limiter)| {
                (
                    (identity.prefix.clone(), identity.resource.clone()),
                    limiter.clone(),
                )
            })
            .collect();
        // Envoy files may configure tens of thousands of limits, each with
        // its own in-memory table: their tables get fewer shards, so that
        // all of them together hold about ENVOY_SHARDS.
        let limits: usize = envoy.iter().map(|(_, file)| file.rules.len()).sum();
        let backend = match backend {
            AnyBackend::Memory(memory) => {
                let shards = (ENVOY_SHARDS / limits.max(1)).max(1);
                // A few limits keep the backend's own shard count.
                AnyBackend::Memory(if shards < FEW_SHARDS {
                    memory.clone().shards(shards)
                } else {
                    memory.clone()
                })
            }
            #[allow(
                unreachable_patterns,
                reason = "without the redis feature, memory is the only backend"
            )]
            other => other.clone(),
        };
        Self {
            kept,
            before,
            unchanged: previous.is_some_and(|p| *p.settings == **settings),
            settings,
            fail,
            backend,
            counted_as: HashMap::new(),
            clock,
        }
    }

    /// The limiter of the Envoy limit `resource`, charging as `charge`
    /// says: the previous one when nothing changed, else one built after
    /// it. Limits counted under one metrics `label` share their metrics
    /// handles.
    pub(crate) fn limiter(
        &mut self,
        resource: &str,
        (policy, charge): (Policy, Charge),
        prefix: &str,
        label: &str,
    ) -> Result<Arc<Limiter<AnyBackend>>, tollgate::Error> {
        let identity = Identity {
            prefix: prefix.to_owned(),
            resource: resource.to_owned(),
            policy,
            fail: self.fail,
            charge,
            label: (label != resource).then(|| label.to_owned()),
        };
        let shared = identity.label.is_some();
        if let (Some(limiter), true) = (self.kept.get(&identity), self.unchanged) {
            return Ok(limiter.clone());
        }
        let mut builder = self.builder(resource, policy, prefix).charge(charge);
        if let (true, Some(clock)) = (policy.admits_nothing(), &self.clock) {
            builder = builder.local_clock(Arc::clone(clock));
        }
        if shared {
            builder = builder.metrics_resource(label);
            // The limits counted as one share their metrics handles.
            if let Some(first) = self.counted_as.get(label) {
                builder = builder.share_metrics(first);
            }
        }
        let built = match self.before.get(&(identity.prefix, identity.resource)) {
            Some(previous) => builder.build_from(previous),
            None => builder.build(),
        }
        .map(Arc::new)?;
        if shared {
            self.counted_as
                .entry(label.to_owned())
                .or_insert_with(|| Arc::clone(&built));
        }
        Ok(built)
    }
}

/// The resource of the limits that requests of `domain` name for
/// themselves: the escaped domain followed by `=limit`, which no
/// configured limit's resource is (an escaped domain is followed by `.` or
/// nothing).
pub(crate) fn overrides_resource(domain: &str) -> String {
    let mut resource = crate::envoy::descriptors::resource_name(domain, &[]);
    resource.push_str("=limit");
    resource
}

impl EnvoyLimits<'_> {
    /// The limits requests of `domain` name for themselves, under `prefix`:
    /// `previous`, the previous set's, when its base limiter is kept (the
    /// settings unchanged), so that a reload keeps their state.
    pub(crate) fn overrides(
        &mut self,
        domain: &str,
        prefix: &str,
        previous: Option<&Arc<Overrides<AnyBackend>>>,
    ) -> Result<Arc<Overrides<AnyBackend>>, tollgate::Error> {
        let resource = overrides_resource(domain);
        let label = format!("envoy:{domain}");
        // Any one limit: a request's own replaces it. Per second, the
        // shortest unit; the other units' state is their own.
        let base_policy = Policy::new(Strategy::FixedWindow, 1, std::time::Duration::from_secs(1))?;
        let base = self.limiter(&resource, (base_policy, Charge::Admitted), prefix, &label)?;
        if let Some(previous) = previous.filter(|p| Arc::ptr_eq(p.base(), &base)) {
            return Ok(Arc::clone(previous));
        }
        let mut builder = self
            .builder(&resource, base_policy, prefix)
            .metrics_resource(&label);
        if let Some(clock) = &self.clock {
            // A limit of 0 reads its unit's end on it.
            builder = builder.local_clock(Arc::clone(clock));
        }
        // Envoy's requests_per_unit is 32 bits.
        Ok(Arc::new(
            Overrides::over(base, builder)?.ceiling(u64::from(u32::MAX)),
        ))
    }

    /// A builder of an Envoy limiter of `policy` at `resource` under
    /// `prefix`: the set's backend, the Envoy settings and fail policy.
    fn builder(&self, resource: &str, policy: Policy, prefix: &str) -> tollgate::LimiterBuilder<AnyBackend> {
        self.settings
            .configure(Limiter::builder().backend(self.backend.clone()))
            .policy(policy)
            .fail_policy(self.fail)
            .key_prefix(prefix)
            .resource(resource)
    }
}

/// The metrics label of an Envoy limit of `domain` when it is not the
/// limit's own resource: the domain's (`envoy:DOMAIN`), unless the limit
/// asks for `detailed_metric`.
pub(crate) fn envoy_label(domain: &str, rule: &Rule) -> Option<String> {
    (!rule.detailed_metric).then(|| format!("envoy:{domain}"))
}

/// The key prefix of Envoy limits: the policy file's, followed by
/// `:envoy` (escaped in keys), so that no resource of a policy file shares
/// their state.
pub(crate) fn envoy_prefix(prefix: &str) -> String {
    format!("{prefix}:envoy")
}
