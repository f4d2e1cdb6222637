//! [`AnyBackend`]: the backend a policy file selects, chosen at run time
//! without boxing.

use tollgate::backend::memory::MemoryBinding;
use tollgate::backend::BackendError;
use tollgate::backend::{Answer, Backend, Binding, BindingPart, Call, Capabilities, Scope};
use tollgate::{Error, MemoryBackend, Policy};
#[cfg(feature = "postgres")]
use tollgate_postgres::{PostgresBackend, PostgresBinding};
#[cfg(feature = "redis")]
use tollgate_redis::{RedisBackend, RedisBinding};

/// In-memory, Redis or PostgreSQL state, decided when the policy file is
/// read.
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
    /// State in a PostgreSQL database.
    #[cfg(feature = "postgres")]
    Postgres(PostgresBackend),
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

#[cfg(feature = "postgres")]
impl From<PostgresBackend> for AnyBackend {
    fn from(backend: PostgresBackend) -> Self {
        AnyBackend::Postgres(backend)
    }
}

impl Backend for AnyBackend {
    type Binding = AnyBinding;

    fn bind(&self, scope: &Scope<'_>) -> Result<AnyBinding, Error> {
        match self {
            AnyBackend::Memory(backend) => backend.bind(scope).map(AnyBinding::Memory),
            #[cfg(feature = "redis")]
            AnyBackend::Redis(backend) => backend
                .bind(scope)
                .map(|b| AnyBinding::Shared(SharedBinding::Redis(b))),
            #[cfg(feature = "postgres")]
            AnyBackend::Postgres(backend) => backend
                .bind(scope)
                .map(|b| AnyBinding::Shared(SharedBinding::Postgres(b))),
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
            (AnyBackend::Redis(backend), AnyBinding::Shared(SharedBinding::Redis(previous))) => backend
                .rebind(scope, previous, previous_policy)
                .map(|b| AnyBinding::Shared(SharedBinding::Redis(b))),
            #[cfg(feature = "postgres")]
            (AnyBackend::Postgres(backend), AnyBinding::Shared(SharedBinding::Postgres(previous))) => backend
                .rebind(scope, previous, previous_policy)
                .map(|b| AnyBinding::Shared(SharedBinding::Postgres(b))),
            #[cfg(any(feature = "redis", feature = "postgres"))]
            _ => self.bind(scope),
        }
    }

    /// The chosen backend's: in memory, decisions at once (so a policy
    /// file's in-memory limiter decides without waiting,
    /// [`Limiter::decide_now`](tollgate::Limiter::decide_now)) and no
    /// leases (a policy's `lease` applies on Redis and PostgreSQL); on
    /// Redis, every call, awaited; on PostgreSQL, decisions, reports,
    /// operations, reservations and leases, awaited.
    fn capabilities(&self) -> Capabilities {
        match self {
            AnyBackend::Memory(backend) => backend.capabilities(),
            #[cfg(feature = "redis")]
            AnyBackend::Redis(backend) => backend.capabilities(),
            #[cfg(feature = "postgres")]
            AnyBackend::Postgres(backend) => backend.capabilities(),
        }
    }
}

/// One policy served by an [`AnyBackend`]: in this process, or in a store
/// the fleet shares.
///
/// Two variants, so that the tag fits in the in-memory binding's spare
/// bits: a service keeps one per limiter, tens of thousands of them.
#[non_exhaustive]
pub enum AnyBinding {
    /// A policy's in-memory state.
    Memory(MemoryBinding),
    /// A policy served by a store the fleet shares (Redis or PostgreSQL).
    #[cfg(any(feature = "redis", feature = "postgres"))]
    Shared(SharedBinding),
}

/// One policy served by a store the fleet shares.
#[cfg(any(feature = "redis", feature = "postgres"))]
#[non_exhaustive]
pub enum SharedBinding {
    /// A policy served by Redis.
    #[cfg(feature = "redis")]
    Redis(RedisBinding),
    /// A policy served by PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(PostgresBinding),
}

impl std::fmt::Debug for AnyBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnyBinding::Memory(binding) => f.debug_tuple("Memory").field(binding).finish(),
            #[cfg(feature = "redis")]
            AnyBinding::Shared(SharedBinding::Redis(binding)) => {
                f.debug_tuple("Redis").field(binding).finish()
            }
            #[cfg(feature = "postgres")]
            AnyBinding::Shared(SharedBinding::Postgres(binding)) => {
                f.debug_tuple("Postgres").field(binding).finish()
            }
        }
    }
}

impl Binding for AnyBinding {
    /// The chosen binding's answer. Several parts go to Redis together
    /// when they are all Redis's (see [`RedisBinding`]'s own); otherwise
    /// they are decided apart.
    async fn call(&self, call: Call<'_, Self>) -> Result<Answer, BackendError> {
        match self {
            AnyBinding::Memory(binding) => match call.for_binding() {
                Ok(call) => binding.call(call).await,
                Err(parts) => together(parts).await,
            },
            #[cfg(feature = "redis")]
            AnyBinding::Shared(SharedBinding::Redis(binding)) => match call.for_binding() {
                Ok(call) => binding.call(call).await,
                Err(parts) => together(parts).await,
            },
            // PostgreSQL does not answer several parts in one call: the
            // limiter decides them one by one.
            #[cfg(feature = "postgres")]
            AnyBinding::Shared(SharedBinding::Postgres(binding)) => match call.for_binding() {
                Ok(call) => binding.call(call).await,
                Err(_) => Ok(Answer::Apart),
            },
        }
    }

    /// In memory, the in-memory binding's answer; on Redis and PostgreSQL,
    /// `None`.
    #[inline]
    fn call_now(&self, call: Call<'_, Self>) -> Option<Result<Answer, BackendError>> {
        match self {
            AnyBinding::Memory(binding) => binding.call_now(call.for_binding().ok()?),
            #[cfg(any(feature = "redis", feature = "postgres"))]
            AnyBinding::Shared(_) => None,
        }
    }
}

/// Several parts in one call of Redis when every part is Redis's;
/// [`Answer::Apart`] otherwise.
async fn together(parts: &[BindingPart<'_, AnyBinding>]) -> Result<Answer, BackendError> {
    #[cfg(feature = "redis")]
    {
        let redis: Option<Vec<BindingPart<'_, RedisBinding>>> = parts
            .iter()
            .map(|p| match p.binding {
                AnyBinding::Shared(SharedBinding::Redis(binding)) => Some(BindingPart {
                    binding,
                    key: p.key,
                    cost: p.cost,
                    decisive: p.decisive,
                }),
                _ => None,
            })
            .collect();
        match redis {
            Some(redis) => redis[0].binding.call(Call::Together(&redis)).await,
            None => Ok(Answer::Apart),
        }
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = parts;
        Ok(Answer::Apart)
    }
}
