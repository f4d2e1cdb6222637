//! From a policy file to a running limiter: connecting its storage and
//! binding every policy.

use tollgate::backend::{Backend, Scope};
use tollgate::{ConfigError, Error, Limiters, LimitersBuilder, MemoryBackend};

use crate::any_backend::AnyBackend;
use crate::policy_file::{PolicyFile, Storage, Target};

impl PolicyFile {
    /// Connects the file's storage and builds a limiter enforcing its
    /// policies: the default policy, one policy per resource, with the
    /// file's fail policy, key prefix and settings (`exempt`, `deny`,
    /// `shadow`, `deny_cache`, `fallback`).
    ///
    /// With `fail_open: true` or a `fallback`, Redis (or PostgreSQL) is
    /// connected in the background
    /// ([`RedisBackendBuilder::connect_in_background`](tollgate_redis::RedisBackendBuilder::connect_in_background)):
    /// the limiter is built even while Redis is down, admits requests (and
    /// counts them as fail-open events), or decides them by the fallback
    /// policy, until Redis answers, and decides on Redis from then on.
    /// Otherwise (fail closed) Redis must answer now, so that a wrong
    /// address or password stops start-up with a clear error. PostgreSQL
    /// is the same: in the background its first decision that reaches the
    /// database installs the schema; failing closed, the login must be
    /// taken and the schema installed now.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let file = tollgate_config::PolicyFile::load("policies.yaml")?;
    /// let limiter = file.build().await?;
    /// if !limiter.limiter("login").allow("203.0.113.7").await?.allowed {
    ///     // answer 429
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when Redis cannot be reached or does not answer
    /// and the file fails closed (the message names the address, never the
    /// password);
    /// [`Error::Config`] when the storage cannot serve a policy, naming its
    /// field (for example `tollgate.resources.login.limit` above the Redis
    /// backend's exact range), or when the file names Redis and this build
    /// has no Redis support; [`Error::Config`] too when PostgreSQL cannot
    /// be used and the file fails closed, naming `tollgate.postgres_url`
    /// (a URL that does not parse, a server that does not answer, a
    /// refused login, a missing database) or `tollgate.postgres.schema`
    /// (a role without the rights to create it), and saying what to do.
    pub async fn build(&self) -> Result<Limiters<AnyBackend>, Error> {
        let backend = self.backend().await?;
        self.build_on(backend)
    }

    /// Builds the limiter on `backend` (as [`PolicyFile::build`] does once
    /// connected).
    pub(crate) fn build_on(&self, backend: AnyBackend) -> Result<Limiters<AnyBackend>, Error> {
        self.check_backend(&backend)?;
        self.limiters_builder(backend).build()
    }

    /// Checks that `backend` can serve every policy, naming the field of
    /// one it cannot; every policy of the file fits in memory.
    pub(crate) fn check_backend(&self, backend: &AnyBackend) -> Result<(), Error> {
        if matches!(backend, AnyBackend::Memory(_)) {
            return Ok(());
        }
        self.check_bindings(backend)
    }

    /// The backend the file names: in memory, a Redis server or cluster,
    /// or a PostgreSQL database. A file that fails closed connects now
    /// (Redis must answer `PING` within the connect timeout; PostgreSQL
    /// must take the login, and the schema is installed); one that fails
    /// open or has a fallback connects in the background (see
    /// [`PolicyFile::build`]).
    ///
    /// # Errors
    ///
    /// As for [`PolicyFile::build`].
    pub async fn backend(&self) -> Result<AnyBackend, Error> {
        // Boxed: each store's connect future is a deep type, and callers'
        // futures would otherwise nest them all.
        Box::pin(self.connect_backend(false)).await
    }

    /// [`PolicyFile::backend`]; with `postgres_while_down`, a PostgreSQL
    /// database that does not answer yet is connected in the background
    /// whatever the fail policy (one that answers and refuses is still an
    /// error).
    pub(crate) async fn connect_backend(&self, postgres_while_down: bool) -> Result<AnyBackend, Error> {
        let in_background = self.fail_policy() != tollgate::FailPolicy::Closed;
        let storage = self.storage();
        // The field that names the store, for errors.
        let field = storage.field().unwrap_or("tollgate");
        match storage {
            Storage::Memory => Ok(AnyBackend::Memory(MemoryBackend::new())),
            #[cfg(feature = "postgres")]
            Storage::Postgres(postgres) => {
                let start = match (in_background, postgres_while_down) {
                    (true, _) => crate::postgres_storage::Start::InBackground,
                    (false, true) => crate::postgres_storage::Start::NowUnlessDown,
                    (false, false) => crate::postgres_storage::Start::Now,
                };
                // Boxed: the pool's and the schema's futures are deep
                // types, which callers' futures would otherwise nest.
                Box::pin(postgres.connect(start)).await.map(AnyBackend::Postgres)
            }
            #[cfg(not(feature = "postgres"))]
            Storage::Postgres(_) => {
                let _ = (in_background, postgres_while_down);
                Err(ConfigError::new(
                    field,
                    "this build has no PostgreSQL support: enable the `postgres` feature of \
                     tollgate-config",
                )
                .into())
            }
            #[cfg(feature = "redis")]
            Storage::Redis(url) => {
                let builder = tollgate_redis::RedisBackend::builder();
                let backend = if in_background {
                    builder.connect_in_background(url)
                } else {
                    builder.connect(url).await
                };
                backend
                    .map(AnyBackend::Redis)
                    .map_err(|err| connect_error(err, field))
            }
            #[cfg(feature = "redis")]
            Storage::RedisCluster(seeds) => {
                let builder = tollgate_redis::RedisBackend::builder();
                let backend = if in_background {
                    builder.connect_cluster_in_background(seeds)
                } else {
                    builder.connect_cluster(seeds).await
                };
                backend
                    .map(AnyBackend::Redis)
                    .map_err(|err| connect_error(err, field))
            }
            #[cfg(feature = "redis")]
            Storage::RedisSentinel {
                master,
                urls,
                username,
                password,
                db,
            } => {
                let mut builder = tollgate_redis::RedisBackend::builder().sentinel_primary_db(*db);
                if let Some(password) = password {
                    builder = builder.sentinel_primary_auth(username.as_deref(), password);
                }
                let backend = if in_background {
                    builder.connect_sentinel_in_background(master, urls)
                } else {
                    builder.connect_sentinel(master, urls).await
                };
                backend
                    .map(AnyBackend::Redis)
                    .map_err(|err| connect_error(err, field))
            }
            #[cfg(not(feature = "redis"))]
            Storage::Redis(_) | Storage::RedisSentinel { .. } | Storage::RedisCluster(_) => {
                Err(no_redis(field))
            }
        }
    }

    /// A limiter builder on `backend` with the file's policies, fail policy,
    /// key prefix and settings, for backends configured in code (a
    /// [`MemoryBackend`] on a [`tollgate::clock::ManualClock`], a custom store),
    /// or for replacing the policies of running
    /// [`Limiters`] ([`Limiters::replace`]).
    pub fn limiters_builder<B: Backend>(&self, backend: B) -> LimitersBuilder<B> {
        let mut builder = Limiters::builder()
            .backend(backend)
            .default_policy(*self.default_policy())
            .fail_policy(self.fail_policy())
            .key_prefix(self.key_prefix());
        builder = self.file_wide_settings().apply(builder);
        for (name, policy) in self.resources() {
            let mut resource = match self.own_settings_of(name) {
                Some(own) => own.resource(*policy),
                None => tollgate::Resource::new(*policy),
            };
            if let Some(slots) = self.in_flight(name) {
                resource = resource.in_flight(*slots);
            }
            builder = builder.resource(name, resource);
        }
        builder
    }

    /// Binds every policy once so that a policy the backend cannot serve is
    /// reported under its field path.
    fn check_bindings<B: Backend>(&self, backend: &B) -> Result<(), Error> {
        let in_flight = self
            .in_flight_limits()
            .map(|(name, p)| (Target::Resource(name), *p));
        for (target, policy) in self.effective_policies().into_iter().chain(in_flight) {
            let (resource, path) = match target {
                Target::Default => ("", "tollgate.default".to_owned()),
                Target::Resource(name) => (name, format!("tollgate.resources.{name}")),
            };
            let scope = Scope {
                prefix: self.key_prefix(),
                resource,
                policy: &policy,
            };
            backend.bind(&scope).map_err(|err| match err {
                Error::Config(err) => Error::Config(err.within(&path)),
                other => other,
            })?;
        }
        Ok(())
    }
}

/// A connection failure as a [`tollgate::Error`]; an invalid URL names the
/// file's field.
#[cfg(feature = "redis")]
fn connect_error(err: tollgate_redis::ConnectError, field: &'static str) -> Error {
    match Error::from(err) {
        Error::Config(err) => ConfigError::new(field, err.reason().to_owned()).into(),
        other => other,
    }
}

#[cfg(not(feature = "redis"))]
fn no_redis(field: &'static str) -> Error {
    ConfigError::new(
        field,
        "this build has no Redis support: enable the `redis` feature of tollgate-config",
    )
    .into()
}
