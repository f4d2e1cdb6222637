//! The whole configuration the service runs on: every `--config` file,
//! the backend, and a limiter per policy. A reload builds a new set and
//! swaps it in as a whole.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tollgate::{FailPolicy, Limiter, MemoryBackend, Policy, SharedClock, Strategy, DEFAULT_KEY_PREFIX};
use tollgate_config::{AnyBackend, Format, PolicyFile, Settings, Storage, Target};

use crate::envoy::config::{EnvoyFile, Limit, RuleSpec};
use crate::envoy::descriptors::Level;
use crate::error::ConfigError;

/// About how many shards the in-memory tables of all Envoy limits hold
/// together, once there are more than `ENVOY_SHARDS / FEW_SHARDS` limits
/// (each table keeps at least one).
const ENVOY_SHARDS: usize = 16_384;

/// The fewest shards [`MemoryBackend::new`] gives a table: below this, an
/// Envoy limit's table gets fewer.
const FEW_SHARDS: usize = 64;

/// The limiter type of every policy.
pub(crate) type SharedLimiter = Arc<Limiter<AnyBackend>>;

/// A loaded, validated configuration with its limiters.
pub(crate) struct ConfigSet {
    /// Where state lives.
    pub(crate) storage: Storage,
    backend: AnyBackend,
    /// The key prefix and fail policy of every limiter (the policy file's).
    prefix: String,
    fail: FailPolicy,
    /// The tollgate policy file's limiters (the JSON API and `/v1/auth`).
    pub(crate) policies: Option<Policies>,
    /// The Envoy domains by name (the gRPC API).
    pub(crate) domains: HashMap<String, Domain>,
    /// The settings (shadow, lists, deny cache, fallback) each policy
    /// file's limiter was built with, by resource, and those every Envoy
    /// limit was built with, so that a reload keeps a limiter only when they
    /// are unchanged too.
    settings: HashMap<String, Arc<Settings>>,
    envoy_settings: Arc<Settings>,
}

/// The limiters of a tollgate policy file: a resource's own, or the default.
pub(crate) struct Policies {
    /// The file.
    pub(crate) file: String,
    pub(crate) default: SharedLimiter,
    pub(crate) resources: HashMap<String, SharedLimiter>,
}

impl Policies {
    /// The policy's name (the resource, or `default`) and limiter that
    /// apply to `resource`, as [`tollgate::ResourceLimiter::limiter`] picks.
    pub(crate) fn limiter(&self, resource: &str) -> (&str, &SharedLimiter) {
        match self.resources.get_key_value(resource) {
            Some((name, limiter)) => (name, limiter),
            None => ("default", &self.default),
        }
    }
}

/// One Envoy domain: its descriptor tree and its limits.
pub(crate) struct Domain {
    /// The file it comes from.
    pub(crate) file: String,
    /// The tree; a node's rule is its index in `rules`.
    root: Level<u32>,
    /// Its limits in file order.
    pub(crate) rules: Vec<Rule>,
}

impl Domain {
    /// The limit that applies to a descriptor of `entries`, if any.
    pub(crate) fn find<'e>(&self, entries: impl IntoIterator<Item = (&'e str, &'e str)>) -> Option<&Rule> {
        let index = *self.root.find(entries)?;
        self.rules.get(index as usize)
    }
}

/// A configured Envoy limit and its limiter (none for `unlimited` and for
/// `requests_per_unit: 0`).
pub(crate) struct Rule {
    pub(crate) spec: RuleSpec,
    pub(crate) limiter: Option<SharedLimiter>,
}

/// What identifies a limiter's state and how it reports: a reload keeps
/// the limiter of an identity that is still configured.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Identity {
    prefix: String,
    resource: String,
    policy: Policy,
    fail: FailPolicy,
    /// The metrics label, where it is not the resource.
    label: Option<String>,
}

/// A parsed file of either kind.
enum Parsed {
    Policy(Box<PolicyFile>),
    Envoy(EnvoyFile),
}

/// The top-level key that marks an Envoy file.
#[derive(Deserialize)]
struct Probe {
    domain: Option<serde::de::IgnoredAny>,
}

impl ConfigSet {
    /// Loads every file and builds the limiters. Limiters of `previous`
    /// whose resource, policy, settings and storage are unchanged are kept
    /// as they are; a changed one is built after the previous limiter of its
    /// resource and keeps the state of every limit whose strategy and window
    /// stay. A backend whose storage is unchanged is kept (no reconnect).
    ///
    /// Reading, parsing and building run on blocking threads: a load of tens
    /// of thousands of limits takes no time from the threads that answer
    /// requests. Only connecting a new store is done here.
    pub(crate) async fn load(
        files: &[impl AsRef<Path>],
        previous: Option<Arc<ConfigSet>>,
        clock: Option<&SharedClock>,
    ) -> Result<ConfigSet, ConfigError> {
        let mut policy_file: Option<PolicyFile> = None;
        let mut envoy = Vec::new();
        let paths = files.iter().map(|f| f.as_ref().to_owned()).collect();
        for (origin, parsed) in parse_files(paths).await? {
            match parsed {
                Parsed::Policy(file) => {
                    if let Some(first) = &policy_file {
                        return Err(ConfigError::new(
                            file.origin(),
                            None,
                            "",
                            format!(
                                "only one tollgate policy file may be given, and {} is one already; \
                                 put every resource in one file (Envoy files may be several)",
                                first.origin()
                            ),
                        ));
                    }
                    policy_file = Some(*file);
                }
                Parsed::Envoy(file) => envoy.push((origin, file)),
            }
        }
        let storage = policy_file
            .as_ref()
            .map_or(Storage::Memory, |f| f.storage().clone());
        let backend = match &previous {
            Some(previous) if previous.storage == storage => previous.backend.clone(),
            _ => match (&policy_file, &storage) {
                (_, Storage::Memory) => AnyBackend::Memory(match clock {
                    Some(clock) => MemoryBackend::new().shared_clock(clock.clone()),
                    None => MemoryBackend::new(),
                }),
                (Some(file), _) => file
                    .backend()
                    .await
                    .map_err(|err| ConfigError::build(file.origin(), "tollgate", err))?,
                (None, _) => unreachable!("only a policy file names a store"),
            },
        };
        let build = tokio::task::spawn_blocking(move || {
            ConfigSet::build(policy_file, envoy, storage, backend, previous.as_deref())
        });
        build
            .await
            .map_err(|join| ConfigError::new("", None, "", format!("building the limiters failed: {join}")))?
    }

    /// Builds the limiters of the parsed files on `backend`, keeping those of
    /// `previous` that are unchanged (see [`ConfigSet::load`]).
    fn build(
        policy_file: Option<PolicyFile>,
        envoy: Vec<(String, EnvoyFile)>,
        storage: Storage,
        backend: AnyBackend,
        previous: Option<&ConfigSet>,
    ) -> Result<ConfigSet, ConfigError> {
        let kept = previous.map(ConfigSet::limiters).unwrap_or_default();
        // The previous limiter of each place, whatever its policy: a changed
        // policy is bound after it and keeps the state its limits allow.
        let before: HashMap<(String, String), SharedLimiter> = kept
            .iter()
            .map(|(identity, limiter)| {
                (
                    (identity.prefix.clone(), identity.resource.clone()),
                    limiter.clone(),
                )
            })
            .collect();
        let fail = policy_file
            .as_ref()
            .map_or(FailPolicy::Closed, PolicyFile::fail_policy);
        let prefix = policy_file
            .as_ref()
            .map_or(DEFAULT_KEY_PREFIX, PolicyFile::key_prefix)
            .to_owned();
        let mut settings_of: HashMap<String, Arc<Settings>> = HashMap::new();
        // Envoy files may configure tens of thousands of limits, each with
        // its own in-memory table: their tables get fewer shards, so that
        // all of them together hold about ENVOY_SHARDS.
        let envoy_limits: usize = envoy.iter().map(|(_, file)| file.rules.len()).sum();
        let envoy_backend = match &backend {
            AnyBackend::Memory(memory) => {
                let shards = (ENVOY_SHARDS / envoy_limits.max(1)).max(1);
                // A few limits keep the backend's own shard count.
                AnyBackend::Memory(if shards < FEW_SHARDS {
                    memory.clone().shards(shards)
                } else {
                    memory.clone()
                })
            }
            other => other.clone(),
        };
        // The first limiter built with each metrics label of its own.
        let mut counted_as: HashMap<String, SharedLimiter> = HashMap::new();
        let mut limiter = |resource: &str,
                           policy: Policy,
                           prefix: &str,
                           settings: Arc<Settings>,
                           metrics: Option<&str>|
         -> Result<SharedLimiter, tollgate::Error> {
            let label = metrics.filter(|label| *label != resource).map(str::to_owned);
            let identity = Identity {
                prefix: prefix.to_owned(),
                resource: resource.to_owned(),
                policy,
                fail,
                label,
            };
            // Envoy limits (the ones with a metrics label of their own)
            // share one set of settings.
            let envoy = metrics.is_some();
            let unchanged = previous.is_some_and(|p| match envoy {
                true => *p.envoy_settings == *settings,
                false => p.settings.get(resource).is_some_and(|s| **s == *settings),
            });
            if !envoy {
                settings_of.insert(resource.to_owned(), Arc::clone(&settings));
            }
            if let (Some(limiter), true) = (kept.get(&identity), unchanged) {
                return Ok(limiter.clone());
            }
            let place = (identity.prefix, identity.resource);
            let label = identity.label;
            let on = if envoy { &envoy_backend } else { &backend };
            let mut builder = Limiter::builder()
                .backend(on.clone())
                .policy(policy)
                .fail_policy(fail)
                .key_prefix(prefix)
                .resource(resource)
                .shadow(settings.shadow)
                .exempt(settings.exempt.clone())
                .deny(settings.deny.clone());
            if let Some(cache) = settings.deny_cache {
                builder = builder.deny_cache(cache);
            }
            if let Some(fallback) = settings.fallback {
                builder = builder.fallback(fallback);
            }
            if let Some(label) = &label {
                builder = builder.metrics_resource(label.as_str());
                // The limits counted as one share their metrics handles.
                if let Some(first) = counted_as.get(label) {
                    builder = builder.share_metrics(first);
                }
            }
            let built = match before.get(&place) {
                Some(previous) => builder.build_from(previous),
                None => builder.build(),
            }
            .map(Arc::new)?;
            if let Some(label) = label {
                counted_as.entry(label).or_insert_with(|| Arc::clone(&built));
            }
            Ok(built)
        };
        let policies = match &policy_file {
            Some(file) => {
                let origin = file.origin();
                let default = limiter(
                    "",
                    *file.default_policy(),
                    &prefix,
                    Arc::new(file.settings(Target::Default)),
                    None,
                )
                .map_err(|err| ConfigError::build(origin, "tollgate.default", err))?;
                let mut resources = HashMap::new();
                for (name, policy) in file.resources() {
                    let built = limiter(
                        name,
                        *policy,
                        &prefix,
                        Arc::new(file.settings(Target::Resource(name))),
                        None,
                    )
                    .map_err(|err| {
                        ConfigError::build(
                            origin,
                            &format!("tollgate.{}", tollgate::resource_path(name)),
                            err,
                        )
                    })?;
                    resources.insert(name.to_owned(), built);
                }
                Some(Policies {
                    file: origin.to_owned(),
                    default,
                    resources,
                })
            }
            None => None,
        };
        let envoy_prefix = envoy_prefix(&prefix);
        // Envoy rules take the file-wide fallback (their fail policy is the
        // file's) and deny cache (on by default with a remote store), and
        // nothing else of a policy file's settings.
        let mut envoy_settings = Settings::default();
        if let Some(file) = &policy_file {
            let file_wide = file.settings(Target::Default);
            envoy_settings.fallback = file_wide.fallback;
            envoy_settings.deny_cache = file_wide.deny_cache;
        }
        let envoy_settings = Arc::new(envoy_settings);
        let mut domains: HashMap<String, Domain> = HashMap::new();
        for (origin, file) in envoy {
            if let Some(other) = domains.get(&file.domain) {
                return Err(ConfigError::new(
                    &origin,
                    None,
                    "domain",
                    format!("domain {:?} is configured in {} already", file.domain, other.file),
                ));
            }
            let mut rules = Vec::with_capacity(file.rules.len());
            for spec in file.rules {
                let limiter = match spec.limit {
                    Limit::PerUnit { unit, requests } if requests > 0 => {
                        let policy =
                            Policy::new(Strategy::FixedWindow, u64::from(requests), unit.window())
                                .map_err(|err| ConfigError::build(&origin, &spec.resource, err.into()))?;
                        let label = envoy_label(&file.domain, &spec).unwrap_or_else(|| spec.resource.clone());
                        Some(
                            limiter(
                                &spec.resource,
                                policy,
                                &envoy_prefix,
                                Arc::clone(&envoy_settings),
                                Some(&label),
                            )
                            .map_err(|err| ConfigError::build(&origin, &spec.resource, err))?,
                        )
                    }
                    _ => None,
                };
                rules.push(Rule { spec, limiter });
            }
            domains.insert(
                file.domain,
                Domain {
                    file: origin,
                    root: file.root,
                    rules,
                },
            );
        }
        Ok(ConfigSet {
            storage,
            backend,
            prefix,
            fail,
            policies,
            domains,
            settings: settings_of,
            envoy_settings,
        })
    }

    /// Every limiter by identity.
    fn limiters(&self) -> HashMap<Identity, SharedLimiter> {
        let mut out = HashMap::new();
        let mut add = |limiter: &SharedLimiter, prefix: String, resource: &str, label: Option<String>| {
            let identity = Identity {
                prefix,
                resource: resource.to_owned(),
                policy: *limiter.policy(),
                fail: self.fail,
                label,
            };
            out.insert(identity, limiter.clone());
        };
        if let Some(p) = &self.policies {
            add(&p.default, self.prefix.clone(), "", None);
            for (name, limiter) in &p.resources {
                add(limiter, self.prefix.clone(), name, None);
            }
        }
        let envoy_prefix = envoy_prefix(&self.prefix);
        for (name, domain) in &self.domains {
            for rule in &domain.rules {
                if let Some(limiter) = &rule.limiter {
                    let label = envoy_label(name, &rule.spec);
                    add(limiter, envoy_prefix.clone(), &rule.spec.resource, label);
                }
            }
        }
        out
    }

    /// A limiter to probe the backend with, if there is any.
    pub(crate) fn probe(&self) -> Option<SharedLimiter> {
        if let Some(p) = &self.policies {
            return Some(p.default.clone());
        }
        self.domains
            .values()
            .flat_map(|d| &d.rules)
            .find_map(|rule| rule.limiter.clone())
    }

    /// Whether state lives in this process.
    pub(crate) fn in_memory(&self) -> bool {
        matches!(self.backend, AnyBackend::Memory(_))
    }
}

/// The metrics label of an Envoy limit of `domain` when it is not the
/// limit's own resource: the domain's (`envoy:DOMAIN`), unless the limit
/// asks for `detailed_metric`.
fn envoy_label(domain: &str, spec: &RuleSpec) -> Option<String> {
    (!spec.detailed_metric).then(|| format!("envoy:{domain}"))
}

/// The key prefix of Envoy limits: the policy file's, followed by
/// `:envoy` (escaped in keys), so that no resource of a policy file shares
/// their state.
fn envoy_prefix(prefix: &str) -> String {
    format!("{prefix}:envoy")
}

/// How long reading and parsing the configuration files may take before
/// a load gives up: a file on a hung network mount must not hold a reload
/// (or the start) for ever.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads and parses every file on a blocking thread, off the runtime that
/// serves requests, within [`READ_TIMEOUT`].
async fn parse_files(files: Vec<PathBuf>) -> Result<Vec<(String, Parsed)>, ConfigError> {
    let first = files.first().map(|f| f.display().to_string()).unwrap_or_default();
    let work = tokio::task::spawn_blocking(move || {
        files
            .iter()
            .map(|path| Ok((path.display().to_string(), parse_file(path)?)))
            .collect::<Result<Vec<_>, ConfigError>>()
    });
    match tokio::time::timeout(READ_TIMEOUT, work).await {
        Ok(Ok(parsed)) => parsed,
        Ok(Err(join)) => Err(ConfigError::new(
            &first,
            None,
            "",
            format!("reading the configuration failed: {join}"),
        )),
        Err(_) => Err(ConfigError::new(
            &first,
            None,
            "",
            format!(
                "reading and parsing the configuration files took longer than {} s; is one of them on \
                 a mount that does not answer?",
                READ_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// Whether `text` is an Envoy file: its top level has `domain`. A file
/// the probe cannot read (a duplicate key, too deep, an alias bomb) is one
/// when a line starts with a `domain` key, so that the Envoy parser reports
/// the mistake rather than the policy file parser an unknown field.
fn is_envoy(text: &str) -> bool {
    match serde_saphyr::from_str::<Probe>(text) {
        Ok(probe) => probe.domain.is_some(),
        Err(_) => text.lines().any(|line| {
            let line = line.strip_prefix('\u{FEFF}').unwrap_or(line);
            ["domain", "\"domain\"", "'domain'"].iter().any(|key| {
                line.strip_prefix(key)
                    .is_some_and(|rest| rest.trim_start().starts_with(':'))
            })
        }),
    }
}

/// Reads and parses one file: an Envoy file when its top level has
/// `domain`, a tollgate policy file otherwise. The file is read once.
fn parse_file(path: &Path) -> Result<Parsed, ConfigError> {
    let origin = path.display().to_string();
    let format = Format::from_path(path);
    let text = tollgate_config::read_config_file(path)?;
    if format != Some(Format::Toml) && is_envoy(&text) {
        return EnvoyFile::parse(&text, &origin).map(Parsed::Envoy);
    }
    match format {
        Some(format) => Ok(Parsed::Policy(Box::new(PolicyFile::from_str(
            &text, format, &origin,
        )?))),
        // Not an Envoy file, and no policy file format: the loader's error,
        // which names the extensions it reads.
        None => Ok(Parsed::Policy(Box::new(PolicyFile::load(path)?))),
    }
}
