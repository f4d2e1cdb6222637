//! [`AnyBackend`]: the backend a policy file selects, chosen at run time
//! without boxing.

use std::time::Duration;

use tollgate::backend::memory::MemoryBinding;
use tollgate::backend::BackendError;
use tollgate::backend::{Backend, Binding, BindingPart, LeaseAsk, Leased, Receipt, Reserved, Scope};
use tollgate::{Decision, Error, MemoryBackend, Operation, Policy};
#[cfg(feature = "redis")]
use tollgate_redis::{RedisBackend, RedisBinding};

/// In-memory or Redis state, decided when the policy file is read.
///
/// A plain enum: each decision is one `match`, with no boxing or dynamic
/// dispatch. Build one with [`PolicyFile::backend`](crate::PolicyFile::backend),
/// or from either backend with `From`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AnyBackend {
    /// State in this process.
    Memory(MemoryBackend),
    /// State in a Redis server or Redis Cluster.
    #[cfg(feature = "redis")]
    Redis(RedisBackend),
}

impl From<MemoryBackend> for AnyBackend {
    fn from(backend: MemoryBackend) -> Self {
        AnyBackend::Memory(backend)
    }
}

#[cfg(feature = "redis")]
impl From<RedisBackend> for AnyBackend {
    fn from(backend: RedisBackend) -> Self {
        AnyBackend::Redis(backend)
    }
}

impl Backend for AnyBackend {
    type Binding = AnyBinding;

    fn bind(&self, scope: &Scope<'_>) -> Result<AnyBinding, Error> {
        match self {
            AnyBackend::Memory(backend) => backend.bind(scope).map(AnyBinding::Memory),
            #[cfg(feature = "redis")]
            AnyBackend::Redis(backend) => backend.bind(scope).map(AnyBinding::Redis),
        }
    }

    /// Rebinds on the same kind of backend, keeping what that backend keeps
    /// (in memory, the state of every limit whose strategy and window
    /// stay); binds afresh on another kind.
    fn rebind(
        &self,
        scope: &Scope<'_>,
        previous: &AnyBinding,
        previous_policy: &Policy,
    ) -> Result<AnyBinding, Error> {
        match (self, previous) {
            (AnyBackend::Memory(backend), AnyBinding::Memory(previous)) => backend
                .rebind(scope, previous, previous_policy)
                .map(AnyBinding::Memory),
            #[cfg(feature = "redis")]
            (AnyBackend::Redis(backend), AnyBinding::Redis(previous)) => backend
                .rebind(scope, previous, previous_policy)
                .map(AnyBinding::Redis),
            #[cfg(feature = "redis")]
            _ => self.bind(scope),
        }
    }

    /// In memory, yes (as [`MemoryBackend`]); on Redis, no. So a policy
    /// file's in-memory limiter decides without waiting
    /// ([`Limiter::decide_now`](tollgate::Limiter::decide_now)).
    fn decides_now(&self) -> bool {
        match self {
            AnyBackend::Memory(backend) => backend.decides_now(),
            #[cfg(feature = "redis")]
            AnyBackend::Redis(backend) => backend.decides_now(),
        }
    }

    /// On Redis, yes (as [`RedisBackend`]); in memory, no: a policy's
    /// `lease` only applies on Redis.
    fn leases(&self) -> bool {
        match self {
            AnyBackend::Memory(backend) => backend.leases(),
            #[cfg(feature = "redis")]
            AnyBackend::Redis(backend) => backend.leases(),
        }
    }
}

/// One policy served by an [`AnyBackend`].
#[non_exhaustive]
pub enum AnyBinding {
    /// A policy's in-memory state.
    Memory(MemoryBinding),
    /// A policy served by Redis.
    #[cfg(feature = "redis")]
    Redis(RedisBinding),
}

impl std::fmt::Debug for AnyBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnyBinding::Memory(binding) => f.debug_struct("Memory").field("keys", &binding.len()).finish(),
            #[cfg(feature = "redis")]
            AnyBinding::Redis(binding) => f.debug_tuple("Redis").field(binding).finish(),
        }
    }
}

impl Binding for AnyBinding {
    async fn apply(&self, key: &[u8], cost: u64) -> Result<Decision, BackendError> {
        match self {
            AnyBinding::Memory(binding) => Ok(binding.check(key, cost)),
            #[cfg(feature = "redis")]
            AnyBinding::Redis(binding) => binding.apply(key, cost).await,
        }
    }

    /// In memory, the in-memory binding's answer; on Redis, `None`.
    #[inline]
    fn apply_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, BackendError>> {
        match self {
            AnyBinding::Memory(binding) => binding.apply_now(key, cost),
            #[cfg(feature = "redis")]
            AnyBinding::Redis(binding) => binding.apply_now(key, cost),
        }
    }

    /// In memory, the in-memory binding's answer; on Redis, `None`.
    fn operate_now(&self, key: &[u8], op: Operation) -> Option<Result<(), BackendError>> {
        match self {
            AnyBinding::Memory(binding) => Binding::operate_now(binding, key, op),
            #[cfg(feature = "redis")]
            AnyBinding::Redis(binding) => binding.operate_now(key, op),
        }
    }

    async fn charge(&self, key: &[u8], cost: u64) -> Result<Decision, BackendError> {
        match self {
            AnyBinding::Memory(binding) => binding.charge(key, cost).await,
            #[cfg(feature = "redis")]
            AnyBinding::Redis(binding) => binding.charge(key, cost).await,
        }
    }

    fn charge_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, BackendError>> {
        match self {
            AnyBinding::Memory(binding) => binding.charge_now(key, cost),
            #[cfg(feature = "redis")]
            AnyBinding::Redis(_) => None,
        }
    }

    async fn operate(&self, key: &[u8], op: Operation) -> Result<(), BackendError> {
        match self {
            AnyBinding::Memory(binding) => binding.operate(key, op).await,
            #[cfg(feature = "redis")]
            AnyBinding::Redis(binding) => binding.operate(key, op).await,
        }
    }

    async fn lease(&self, key: &[u8], ask: LeaseAsk) -> Option<Result<Leased, BackendError>> {
        match self {
            // In memory decisions are local already: nothing to lease.
            AnyBinding::Memory(_) => {
                let _ = (key, ask);
                None
            }
            #[cfg(feature = "redis")]
            AnyBinding::Redis(binding) => binding.lease(key, ask).await,
        }
    }

    async fn reserve(
        &self,
        key: &[u8],
        cost: u64,
        max_delay: Duration,
    ) -> Option<Result<Reserved, BackendError>> {
        match self {
            AnyBinding::Memory(binding) => binding.reserve(key, cost, max_delay).await,
            #[cfg(feature = "redis")]
            AnyBinding::Redis(binding) => binding.reserve(key, cost, max_delay).await,
        }
    }

    async fn cancel(&self, key: &[u8], receipt: &Receipt) -> Option<Result<bool, BackendError>> {
        match self {
            AnyBinding::Memory(binding) => binding.cancel(key, receipt).await,
            #[cfg(feature = "redis")]
            AnyBinding::Redis(binding) => binding.cancel(key, receipt).await,
        }
    }

    async fn reconnect(&self) -> Result<(), BackendError> {
        match self {
            AnyBinding::Memory(_) => Ok(()),
            #[cfg(feature = "redis")]
            AnyBinding::Redis(binding) => binding.reconnect().await,
        }
    }

    /// Redis decides the parts together when they are all Redis's (see
    /// [`RedisBinding`]'s own); in memory, one by one.
    async fn apply_together(parts: &[BindingPart<'_, Self>]) -> Option<Result<Vec<Decision>, BackendError>> {
        #[cfg(feature = "redis")]
        {
            let redis: Option<Vec<BindingPart<'_, RedisBinding>>> = parts
                .iter()
                .map(|p| match p.binding {
                    AnyBinding::Redis(binding) => Some(BindingPart {
                        binding,
                        key: p.key,
                        cost: p.cost,
                        decisive: p.decisive,
                    }),
                    AnyBinding::Memory(_) => None,
                })
                .collect();
            RedisBinding::apply_together(&redis?).await
        }
        #[cfg(not(feature = "redis"))]
        {
            let _ = parts;
            None
        }
    }
}
