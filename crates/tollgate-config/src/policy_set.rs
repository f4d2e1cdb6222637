//! [`PolicySet`]: everything a set of configuration files configures (at
//! most one tollgate policy file and any number of Envoy files), with a
//! limiter per policy, built by the code that builds a library user's
//! limiter.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tollgate::clock::SharedClock;
use tollgate::{FailPolicy, Limiter, Limiters, MemoryBackend, Overrides, Policy, Strategy};

use crate::any_backend::AnyBackend;
use crate::envoy::limiters::{envoy_label, envoy_prefix, EnvoyLimits, Previous};
use crate::envoy::{Domain, DomainRule, EnvoyFile, RateLimit, Rule};
use crate::error::ConfigFileError;
use crate::policy_file::{PolicyFile, Storage, Target};
use crate::reload_error::ReloadError;
use crate::set_files::{self, read_off_runtime, ConfigFile, Read};
use crate::settings::Settings;

/// The policies of a set of configuration files, ready to decide: the
/// tollgate policy file's as [`Limiters`] (built as
/// [`PolicyFile::build`] builds it), and every Envoy domain with a
/// fixed-window limiter per limit, all on the storage the policy file names
/// (in memory without one).
///
/// `tollgate serve` runs on one; a [`PolicySetWatcher`](crate::PolicySetWatcher)
/// keeps one up to date with its files. Envoy limits take the policy file's
/// key prefix followed by `:envoy` (so that no resource of the policy file
/// shares their state), its fail policy, and its file-wide `fallback`,
/// `deny_cache`, `top_keys` (kept without a policy file too) and `lease`;
/// nothing else of its settings.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let set = tollgate_config::PolicySet::load(&["policies.yaml", "envoy.yaml"]).await?;
/// if let Some(policies) = set.policies() {
///     let decision = policies.limiter("login").allow("203.0.113.7").await?;
/// #   let _ = decision;
/// }
/// # Ok(())
/// # }
/// ```
pub struct PolicySet {
    storage: Storage,
    backend: AnyBackend,
    /// The key prefix and fail policy of every limiter (the policy file's).
    prefix: String,
    fail: FailPolicy,
    file: Option<Arc<PolicyFile>>,
    policies: Option<Arc<Limiters<AnyBackend>>>,
    domains: HashMap<String, Domain>,
    /// The settings every Envoy limit was built with, so that a reload
    /// keeps an Envoy limiter only when they are unchanged too.
    envoy_settings: Arc<Settings>,
    /// The policy file's limits chosen per request, by resource (`""` for
    /// the default policy), made at their first use.
    overrides: Mutex<HashMap<Box<str>, Arc<Overrides<AnyBackend>>>>,
}

impl std::fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicySet")
            .field("storage", &self.storage)
            .field("file", &self.file.as_ref().map(|f| f.origin()))
            .field("domains", &self.domains.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// How a set is loaded: what it takes over from, and where its state
/// lives when no file says.
#[derive(Clone, Default)]
pub(crate) struct LoadOptions {
    /// The clock of in-memory state.
    pub(crate) clock: Option<SharedClock>,
    /// The backend every set is built on, whatever the files name (a
    /// change of the files' storage is then refused).
    pub(crate) backend: Option<AnyBackend>,
    /// The in-memory backend of sets whose files keep state in memory (a
    /// new one otherwise).
    pub(crate) memory: Option<MemoryBackend>,
    /// Whether a change of the files' storage is refused rather than
    /// connected.
    pub(crate) keep_storage: bool,
    /// Whether the files must be one tollgate policy file.
    pub(crate) policy_file_only: bool,
    /// Whether a PostgreSQL database that does not answer yet is connected
    /// in the background whatever the fail policy.
    pub(crate) postgres_while_down: bool,
}

impl PolicySet {
    /// Reads every file (off the async runtime, within [`READ_TIMEOUT`](crate::READ_TIMEOUT)),
    /// connects the storage the policy file names and builds the limiters.
    ///
    /// At most one file may be a tollgate policy file; a file whose top
    /// level has `domain` is an Envoy file, and no two Envoy files may
    /// configure one domain.
    ///
    /// # Errors
    ///
    /// A [`ConfigFileError`] naming the file, and where known the line and
    /// field, of the first mistake; one of kind
    /// [`ErrorKind::Unservable`](crate::ErrorKind::Unservable) when the
    /// files are valid but cannot be served (a store that does not answer,
    /// a policy it cannot hold).
    pub async fn load(files: &[impl AsRef<Path>]) -> Result<PolicySet, ConfigFileError> {
        let paths: Vec<PathBuf> = files.iter().map(|f| f.as_ref().to_owned()).collect();
        let read = read_off_runtime(paths).await?;
        match Self::load_read(&read, None, &LoadOptions::default()).await {
            Ok(set) => Ok(set),
            Err(ReloadError::File(err)) => Err(err),
            // Without a previous set, no storage changes; nothing is watched.
            Err(other) => Err(ConfigFileError::at(
                &first_origin(&read),
                None,
                "",
                other.to_string(),
            )),
        }
    }

    /// Builds the set of the files `read`, taking over from `previous`:
    /// see [`PolicySet::build`]. A backend whose storage is unchanged is
    /// kept (no reconnect); only connecting a new store is done on the
    /// caller's task, the rest on a blocking thread.
    pub(crate) async fn load_read(
        read: &[Read],
        previous: Option<Arc<PolicySet>>,
        options: &LoadOptions,
    ) -> Result<PolicySet, ReloadError> {
        let parsed = parse_all(read, options)?;
        let backend = match Self::reusable_backend(&parsed, previous.as_deref(), options)? {
            Some(backend) => backend,
            // Boxed: the connect futures of every store are deep types, and
            // callers' futures would otherwise nest them all.
            None => Box::pin(connect(&parsed, options.postgres_while_down)).await?,
        };
        let clock = options.clock.clone();
        let build =
            tokio::task::spawn_blocking(move || Self::build(parsed, backend, previous.as_deref(), clock));
        let built = build.await.map_err(|join| {
            ConfigFileError::at(
                &first_origin(read),
                None,
                "",
                format!("building the limiters failed: {join}"),
            )
        })?;
        Ok(built?)
    }

    /// Builds the set of the files `read` without waiting on anything but
    /// the files' bytes: `None` when the files name a store that must be
    /// connected first.
    #[cfg(feature = "watch")]
    pub(crate) fn load_read_blocking(
        read: &[Read],
        previous: Option<&PolicySet>,
        options: &LoadOptions,
    ) -> Result<Option<PolicySet>, ReloadError> {
        let parsed = parse_all(read, options)?;
        match Self::reusable_backend(&parsed, previous, options)? {
            Some(backend) => Ok(Some(Self::build(
                parsed,
                backend,
                previous,
                options.clock.clone(),
            )?)),
            None => Ok(None),
        }
    }

    /// The backend to build on without connecting: the one of `options`
    /// (when the files' storage is the one it was made for), the previous
    /// set's when its storage is unchanged, a new in-memory one; `None`
    /// when a store must be connected.
    fn reusable_backend(
        parsed: &ParsedSet,
        previous: Option<&PolicySet>,
        options: &LoadOptions,
    ) -> Result<Option<AnyBackend>, ReloadError> {
        let storage = parsed.storage();
        if let Some(backend) = &options.backend {
            return match previous {
                Some(previous) if previous.storage != storage => Err(storage_changed(parsed, Some(previous))),
                _ => Ok(Some(backend.clone())),
            };
        }
        Ok(match previous {
            Some(previous) if previous.storage == storage => Some(previous.backend.clone()),
            Some(previous) if options.keep_storage => return Err(storage_changed(parsed, Some(previous))),
            _ if storage == Storage::Memory => {
                Some(AnyBackend::Memory(match (&options.memory, &options.clock) {
                    (Some(memory), _) => memory.clone(),
                    (None, Some(clock)) => MemoryBackend::new().shared_clock(clock.clone()),
                    (None, None) => MemoryBackend::new(),
                }))
            }
            _ => None,
        })
    }

    /// Builds the limiters of `parsed` on `backend`. The policy file's
    /// policies are built after `previous`'s as
    /// [`LimitersBuilder::build_from`](tollgate::LimitersBuilder::build_from)
    /// does (a policy whose settings and limits are unchanged keeps its
    /// limiter; a changed one keeps the state of every limit whose strategy
    /// and window stay); so are Envoy limits, by resource. An Envoy limit
    /// of 0 requests per unit reads `clock` (the clock of in-memory state)
    /// for the end of its unit, else the system clock.
    fn build(
        parsed: ParsedSet,
        backend: AnyBackend,
        previous: Option<&PolicySet>,
        clock: Option<SharedClock>,
    ) -> Result<PolicySet, ConfigFileError> {
        let ParsedSet { policy_file, envoy } = parsed;
        let storage = policy_file
            .as_ref()
            .map_or(Storage::Memory, |f| f.storage().clone());
        let fail = policy_file
            .as_ref()
            .map_or(FailPolicy::Closed, |f| f.fail_policy());
        let prefix = policy_file
            .as_ref()
            .map_or(tollgate::Limiter::DEFAULT_KEY_PREFIX, |f| f.key_prefix())
            .to_owned();
        let policies = match &policy_file {
            Some(file) => Some(Self::build_policies(file, &backend, previous)?),
            None => None,
        };
        let envoy_settings = Arc::new(envoy_settings(policy_file.as_ref()));
        let before = previous.map(|p| Previous {
            domains: &p.domains,
            prefix: &p.prefix,
            fail: p.fail,
            settings: &p.envoy_settings,
        });
        let mut envoy_limits = EnvoyLimits::new(&backend, &envoy, before, &envoy_settings, fail, clock);
        let domains = Self::build_domains(envoy, &mut envoy_limits, &envoy_prefix(&prefix), previous)?;
        Ok(PolicySet {
            storage,
            backend,
            prefix,
            fail,
            file: policy_file.map(Arc::new),
            policies,
            domains,
            envoy_settings,
            overrides: Mutex::default(),
        })
    }

    /// Builds the limiters of the policy file `file` on `backend`, after
    /// `previous`'s policies when there is a previous set. A file whose
    /// policies the backend cannot hold, or whose limiters cannot be
    /// built, is unservable.
    fn build_policies(
        file: &PolicyFile,
        backend: &AnyBackend,
        previous: Option<&PolicySet>,
    ) -> Result<Arc<Limiters<AnyBackend>>, ConfigFileError> {
        let unservable = |err| ConfigFileError::unservable(file.origin(), "tollgate", err);
        file.check_backend(backend).map_err(unservable)?;
        let builder = file.limiters_builder(backend.clone());
        let built = match previous.and_then(|p| p.policies.as_deref()) {
            Some(before) => builder.build_from(before),
            None => builder.build(),
        };
        Ok(Arc::new(built.map_err(unservable)?))
    }

    /// Builds every Envoy domain of the files `envoy` (origin and parsed
    /// file) with `envoy_limits` under `envoy_prefix`, each domain's
    /// overrides taking over from `previous`'s of the same domain. Two
    /// files that configure one domain are a mistake of the later one.
    fn build_domains(
        envoy: Vec<(String, EnvoyFile)>,
        envoy_limits: &mut EnvoyLimits<'_>,
        envoy_prefix: &str,
        previous: Option<&PolicySet>,
    ) -> Result<HashMap<String, Domain>, ConfigFileError> {
        let mut domains: HashMap<String, Domain> = HashMap::new();
        for (origin, file) in envoy {
            if let Some(other) = domains.get(&file.domain) {
                return Err(ConfigFileError::at(
                    &origin,
                    None,
                    "domain",
                    format!("domain {:?} is configured in {} already", file.domain, other.file),
                ));
            }
            let mut rules = Vec::with_capacity(file.rules.len());
            for rule in file.rules {
                let limiter = rule_limiter(&origin, &file.domain, &rule, envoy_limits, envoy_prefix)?;
                rules.push(DomainRule { rule, limiter });
            }
            let previous_overrides = previous
                .and_then(|p| p.domains.get(&file.domain))
                .map(|d| &d.overrides);
            let overrides = envoy_limits
                .overrides(&file.domain, envoy_prefix, previous_overrides)
                .map_err(|err| ConfigFileError::unservable(&origin, "domain", err))?;
            domains.insert(
                file.domain,
                Domain {
                    file: origin,
                    root: file.root,
                    rules,
                    overrides,
                },
            );
        }
        Ok(domains)
    }

    /// The tollgate policy file of the set, if there is one.
    pub fn policy_file(&self) -> Option<&Arc<PolicyFile>> {
        self.file.as_ref()
    }

    /// The policy file's limiter (its default policy and one per
    /// resource), if the set has a policy file.
    pub fn policies(&self) -> Option<&Arc<Limiters<AnyBackend>>> {
        self.policies.as_ref()
    }

    /// Limits chosen per request under `resource`'s policy of the policy
    /// file (the default policy's for a resource the file does not name),
    /// with its strategy, settings and state ([`Overrides`]): what `POST
    /// /v1/decide`'s `"limit"` and `"window_ms"` decide with. Made at the
    /// first use and kept with the set; a reload starts anew. `None`
    /// without a policy file.
    ///
    /// # Errors
    ///
    /// Inside the `Some`, the core's [`tollgate::Error`] when the
    /// resource's policy has several limits (a limit chosen per request
    /// replaces the one limit of a policy), or its limiter cannot be built.
    pub fn overrides(&self, resource: &str) -> Option<Result<Arc<Overrides<AnyBackend>>, tollgate::Error>> {
        let (file, policies) = (self.file.as_ref()?, self.policies.as_ref()?);
        let (name, target) = match file.resources().find(|(name, _)| *name == resource) {
            Some((name, _)) => (name, Target::Resource(name)),
            None => ("", Target::Default),
        };
        let mut kept = self.overrides.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(overrides) = kept.get(name) {
            return Some(Ok(Arc::clone(overrides)));
        }
        let builder = file
            .settings(target)
            .configure(Limiter::builder().backend(self.backend.clone()))
            .policy(*file.policy(name))
            .fail_policy(self.fail)
            .key_prefix(&self.prefix)
            .resource(name);
        let made = Overrides::over(policies.limiter(name), builder).map(Arc::new);
        if let Ok(overrides) = &made {
            kept.insert(name.into(), Arc::clone(overrides));
        }
        Some(made)
    }

    /// Ends the leases of every limiter of the set (the policy file's and
    /// every Envoy limit's) and gives their unspent units back to the
    /// store (see [`tollgate::protection::Lease`]): what a service does before it
    /// exits. Returns the units given back.
    ///
    /// # Errors
    ///
    /// The first limiter's error, after every limiter was tried.
    pub async fn end_leases(&self) -> Result<u64, tollgate::Error> {
        let limiters = self.limiters();
        tollgate::together::end_all_leases(limiters.iter().map(Arc::as_ref)).await
    }

    /// Ends the leases of the limiters of this set that `next`, the set a
    /// reload replaced it with, no longer serves (a changed policy gets a
    /// limiter of its own; an unchanged one keeps its limiter, and its
    /// leases), and gives their unspent units back: what a reload does
    /// after it swapped `next` in. Returns the units given back.
    ///
    /// # Errors
    ///
    /// The first limiter's error, after every limiter was tried.
    pub async fn end_replaced_leases(&self, next: &PolicySet) -> Result<u64, tollgate::Error> {
        let replaced = self.replaced_by(next);
        tollgate::together::end_all_leases(replaced.iter().map(Arc::as_ref)).await
    }

    /// Whether a reload to `next` leaves a limiter of this set that leases
    /// unserved: only then has [`Self::end_replaced_leases`] anything to do.
    #[cfg(feature = "watch")]
    pub(crate) fn leases_replaced_by(&self, next: &PolicySet) -> bool {
        self.replaced_by(next).iter().any(|l| l.leases())
    }

    /// The limiters of this set that `next` does not serve.
    fn replaced_by(&self, next: &PolicySet) -> Vec<Arc<Limiter<AnyBackend>>> {
        let kept: std::collections::HashSet<*const Limiter<AnyBackend>> =
            next.limiters().iter().map(Arc::as_ptr).collect();
        let mut replaced = self.limiters();
        replaced.retain(|l| !kept.contains(&Arc::as_ptr(l)));
        replaced
    }

    /// Every limiter of the set: the policy file's (its default and one
    /// per resource) and every Envoy limit's.
    fn limiters(&self) -> Vec<Arc<Limiter<AnyBackend>>> {
        let file = self.policies.iter().flat_map(|policies| {
            std::iter::once(policies.limiter(""))
                .chain(policies.resources().into_iter().map(|(_, limiter)| limiter))
        });
        let envoy = self
            .domains
            .values()
            .flat_map(|domain| domain.rules.iter().filter_map(|rule| rule.limiter().cloned()));
        let overrides: Vec<_> = {
            let kept = self.overrides.lock().unwrap_or_else(PoisonError::into_inner);
            kept.values().flat_map(|o| o.limiters()).collect()
        };
        file.chain(envoy).chain(overrides).collect()
    }

    /// The Envoy domain called `name`, if one is configured.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// Every Envoy domain, by name, in no particular order.
    pub fn domains(&self) -> impl Iterator<Item = (&str, &Domain)> {
        self.domains.iter().map(|(name, domain)| (name.as_str(), domain))
    }

    /// Where state lives: the policy file's storage, in memory without one.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The backend every limiter of the set decides on.
    pub fn backend(&self) -> &AnyBackend {
        &self.backend
    }

    /// Whether state lives in this process.
    pub fn in_memory(&self) -> bool {
        matches!(self.backend, AnyBackend::Memory(_))
    }

    /// A limiter to probe the store with (the default policy, or the first
    /// Envoy limit with state), if the set has any.
    pub fn probe(&self) -> Option<Arc<Limiter<AnyBackend>>> {
        if let Some(policies) = &self.policies {
            return Some(policies.limiter(""));
        }
        self.domains
            .values()
            .flat_map(|d| &d.rules)
            .find_map(|rule| rule.limiter.clone())
    }
}

/// The files of a set, parsed.
pub(crate) struct ParsedSet {
    policy_file: Option<PolicyFile>,
    envoy: Vec<(String, EnvoyFile)>,
}

impl ParsedSet {
    /// The storage the files name.
    fn storage(&self) -> Storage {
        self.policy_file
            .as_ref()
            .map_or(Storage::Memory, |f| f.storage().clone())
    }
}

/// The settings of every Envoy limit, taken from the policy file `file`
/// where there is one.
fn envoy_settings(file: Option<&PolicyFile>) -> Settings {
    // Envoy rules take the file-wide fallback (their fail policy is the
    // file's), deny cache (on by default with a remote store), top keys
    // and lease, and nothing else of a policy file's settings. Top keys
    // are kept as a policy file keeps them by default, or as its
    // file-wide `top_keys` says.
    let mut envoy_settings = Settings {
        top_keys: Some(tollgate::top::TopKeys::new()),
        ..Settings::default()
    };
    if let Some(file) = file {
        let file_wide = file.settings(Target::Default);
        envoy_settings.fallback = file_wide.fallback;
        envoy_settings.deny_cache = file_wide.deny_cache;
        envoy_settings.top_keys = file_wide.top_keys;
        envoy_settings.lease = file_wide.lease;
    }
    envoy_settings
}

/// The limiter of the Envoy limit `rule` of `domain`, configured in the
/// file `origin`: a fixed window of its requests per unit, a calendar
/// quota, or a policy that admits nothing for 0 requests; none for a
/// limit without requests per unit (`unlimited`). A limit the store
/// cannot hold is unservable.
fn rule_limiter(
    origin: &str,
    domain: &str,
    rule: &Rule,
    envoy_limits: &mut EnvoyLimits<'_>,
    envoy_prefix: &str,
) -> Result<Option<Arc<Limiter<AnyBackend>>>, ConfigFileError> {
    let RateLimit::PerUnit {
        unit,
        requests,
        calendar,
    } = rule.limit
    else {
        return Ok(None);
    };
    let unservable = |err| ConfigFileError::unservable(origin, &rule.resource, err);
    let policy = match (requests, calendar) {
        // Every request over the limit until the unit ends.
        (0, _) => Policy::zero(unit.window()),
        (_, Some(calendar)) => tollgate::Limit::per_calendar(u64::from(requests), calendar).map(Policy::from),
        (_, None) => Policy::new(Strategy::FixedWindow, u64::from(requests), unit.window()),
    }
    .map_err(|err| unservable(err.into()))?;
    let label = envoy_label(domain, rule).unwrap_or_else(|| rule.resource.clone());
    Ok(Some(
        envoy_limits
            .limiter(&rule.resource, (policy, rule.charge), envoy_prefix, &label)
            .map_err(unservable)?,
    ))
}

/// Parses every file read; at most one may be a tollgate policy file, and
/// with `options.policy_file_only` there must be one and nothing else.
fn parse_all(read: &[Read], options: &LoadOptions) -> Result<ParsedSet, ConfigFileError> {
    let mut policy_file: Option<PolicyFile> = None;
    let mut envoy = Vec::new();
    for file in read {
        match set_files::parse(file)? {
            ConfigFile::Policy(file) => {
                if let Some(first) = &policy_file {
                    return Err(ConfigFileError::at(
                        file.origin(),
                        None,
                        "",
                        format!(
                            "only one tollgate policy file may be given, and {} is one already; put \
                             every resource in one file (Envoy files may be several)",
                            first.origin()
                        ),
                    ));
                }
                policy_file = Some(*file);
            }
            ConfigFile::Envoy(parsed) => {
                let origin = file.path.display().to_string();
                if options.policy_file_only {
                    return Err(ConfigFileError::at(
                        &origin,
                        None,
                        "domain",
                        "this is an Envoy rate-limit file (its top level has `domain`); a \
                         PolicyWatcher watches a tollgate policy file, a PolicySetWatcher also \
                         Envoy files",
                    ));
                }
                envoy.push((origin, parsed));
            }
        }
    }
    Ok(ParsedSet { policy_file, envoy })
}

/// Connects the store the policy file of `parsed` names (a PostgreSQL
/// database that does not answer in the background when
/// `postgres_while_down`).
async fn connect(parsed: &ParsedSet, postgres_while_down: bool) -> Result<AnyBackend, ConfigFileError> {
    match &parsed.policy_file {
        Some(file) => file
            .connect_backend(postgres_while_down)
            .await
            .map_err(|err| ConfigFileError::unservable(file.origin(), "tollgate", err)),
        // Only a policy file names a store.
        None => Ok(AnyBackend::Memory(MemoryBackend::new())),
    }
}

/// The error of a set whose storage is not the one it must keep.
fn storage_changed(parsed: &ParsedSet, previous: Option<&PolicySet>) -> ReloadError {
    let to = parsed.storage();
    let from = previous.map_or(Storage::Memory, |p| p.storage.clone());
    ReloadError::StorageChanged {
        file: parsed
            .policy_file
            .as_ref()
            .map_or_else(String::new, |f| f.origin().to_owned()),
        field: to.field().or(from.field()).unwrap_or("tollgate"),
        from: Box::new(from),
        to: Box::new(to),
    }
}

/// The origin of the first file, for errors about the whole set.
fn first_origin(read: &[Read]) -> String {
    read.first()
        .map(|r| r.path.display().to_string())
        .unwrap_or_default()
}
