//! [`PolicyWatcher`]: a running [`Limiters`] kept up to date with its
//! policy file, by a [`PolicySetWatcher`] of that one file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tollgate::Limiters;

use crate::any_backend::AnyBackend;
use crate::error::LoadError;
use crate::policy_file::PolicyFile;
use crate::policy_set::PolicySet;
use crate::reload_error::ReloadError;
use crate::set_watcher::{Callback, PolicySetHandle, PolicySetWatcher, DEFAULT_DEBOUNCE};

/// Keeps a [`Limiters`] up to date with a policy file.
///
/// It watches the file's directory (editors and deployments often replace
/// a file by renaming another over it, which a watch on the file itself
/// would miss; a file that is a symbolic link has its target's directory
/// watched too). After a change, once the directory has been quiet for the
/// [debounce](PolicyWatcherBuilder::debounce) time, it reads the file again
/// and, when its bytes changed, applies it:
///
/// - a valid file replaces the policies atomically
///   ([`Limiters::replace`]): every decision is made wholly under the
///   old policies or wholly under the new ones, and keys keep their state
///   where the core allows it (a resource whose strategy and window stay
///   keeps every key's state when only its limit changes; see
///   [`Limiters`]);
/// - an invalid file changes nothing: the error, with the file, line and
///   field, goes to the `on_error` callback, and the policies in effect
///   stay until the file is fixed;
/// - a file that names another storage (memory instead of Redis, another
///   server, other credentials) changes nothing either: a running limiter
///   cannot move its state, so that takes a restart
///   ([`ReloadError::StorageChanged`]). Everything else may change live,
///   the key prefix included (then every key starts fresh).
///
/// [`reload_blocking`](Self::reload_blocking) applies the file on demand, for a `SIGHUP`
/// handler or an admin endpoint.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use tollgate_config::PolicyWatcher;
///
/// let watcher = PolicyWatcher::builder("policies.yaml", |err| eprintln!("policies not reloaded: {err}"))
///     .on_reload(|file| eprintln!("policies reloaded from {}", file.origin()))
///     .start()
///     .await?;
/// let limiter = watcher.limiters().clone(); // share it with the request handlers
/// let decision = limiter.limiter("login").allow("203.0.113.7").await?;
/// # let _ = decision;
/// // On SIGHUP:
/// watcher.reload_blocking()?;
/// # Ok(())
/// # }
/// ```
///
/// It is a [`PolicySetWatcher`] of the one file that keeps its storage,
/// whose every applied set is served by the [`Limiters`]; start it on a
/// tokio runtime, which runs the reloads and the callbacks, one at a time
/// (they should return quickly). Dropping the watcher stops the watching;
/// the limiter keeps serving with the policies it has.
pub struct PolicyWatcher {
    path: PathBuf,
    live: Arc<Limiters<AnyBackend>>,
    watcher: PolicySetWatcher,
}

impl std::fmt::Debug for PolicyWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyWatcher")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Configures a [`PolicyWatcher`]; made by [`PolicyWatcher::builder`].
pub struct PolicyWatcherBuilder {
    path: PathBuf,
    debounce: Duration,
    backend: Option<AnyBackend>,
    on_error: Callback<ReloadError>,
    on_reload: Option<Callback<PolicyFile>>,
}

impl std::fmt::Debug for PolicyWatcherBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyWatcherBuilder")
            .field("path", &self.path)
            .field("debounce", &self.debounce)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl PolicyWatcher {
    /// A watcher of the policy file at `path` (its format chosen by the
    /// extension, as for [`PolicyFile::load`]) that reports every change it
    /// could not apply to `on_error`.
    pub fn builder(
        path: impl Into<PathBuf>,
        on_error: impl Fn(&ReloadError) + Send + Sync + 'static,
    ) -> PolicyWatcherBuilder {
        PolicyWatcherBuilder {
            path: path.into(),
            debounce: DEFAULT_DEBOUNCE,
            backend: None,
            on_error: Arc::new(on_error),
            on_reload: None,
        }
    }

    /// The limiters serving the policies in effect, replaced in place on
    /// each reload.
    pub fn limiters(&self) -> &Arc<Limiters<AnyBackend>> {
        &self.live
    }

    /// The policy file in effect: the last one applied.
    pub fn file(&self) -> Arc<PolicyFile> {
        policy_file(&self.watcher.current())
    }

    /// The path watched, as given to [`PolicyWatcher::builder`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file now and applies it, even when its bytes did not
    /// change; for a `SIGHUP` handler or an admin endpoint. The result is
    /// returned, not passed to the callbacks. This reads the file on the
    /// calling thread: from async code, call it through
    /// `tokio::task::spawn_blocking`.
    ///
    /// # Errors
    ///
    /// A [`ReloadError`] when the file cannot be read, is invalid, names
    /// another storage or cannot be served; the policies in effect stay.
    pub fn reload_blocking(&self) -> Result<(), ReloadError> {
        self.watcher.handle().reload_blocking()?;
        self.serve_current();
        Ok(())
    }

    /// Serves the watcher's current set in the limiter.
    fn serve_current(&self) {
        serve(&self.live, &self.watcher.current());
    }
}

/// The policy file of a set of a [`PolicyWatcher`], which always has one.
fn policy_file(set: &PolicySet) -> Arc<PolicyFile> {
    set.policy_file()
        .cloned()
        .expect("a PolicyWatcher's set holds its policy file")
}

/// Serves the policies of `set` in `live`.
fn serve(live: &Limiters<AnyBackend>, set: &PolicySet) {
    if let Some(policies) = set.policies() {
        live.serve_as(policies);
    }
}

impl PolicyWatcherBuilder {
    /// How long the file's directory must stay quiet after a change before
    /// the file is read again (default [`DEFAULT_DEBOUNCE`]).
    pub fn debounce(mut self, quiet: Duration) -> Self {
        self.debounce = quiet;
        self
    }

    /// Keeps the state on `backend` instead of the one the file names (a
    /// [`MemoryBackend`](tollgate::MemoryBackend) on a
    /// [`ManualClock`](tollgate::clock::ManualClock), a Redis backend configured
    /// in code). A change of the file's storage fields is refused all the
    /// same.
    pub fn backend(mut self, backend: impl Into<AnyBackend>) -> Self {
        self.backend = Some(backend.into());
        self
    }

    /// Calls `on_reload` with each file the watcher applied after a change.
    pub fn on_reload(mut self, on_reload: impl Fn(&PolicyFile) + Send + Sync + 'static) -> Self {
        self.on_reload = Some(Arc::new(on_reload));
        self
    }

    /// Loads the file, builds its limiter (connecting its storage, as
    /// [`PolicyFile::build`] does, unless a [`backend`](Self::backend) was
    /// given) and starts watching. Must be called on a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`LoadError::File`] for a mistake in the file (an Envoy file among
    /// them) or a limiter that cannot be built, [`LoadError::Watch`] when
    /// its directory cannot be watched.
    pub async fn start(self) -> Result<PolicyWatcher, LoadError> {
        // The limiter is made before the watcher starts, so that the first
        // reload already has it; it is filled in at once below.
        type Serving = (Arc<Limiters<AnyBackend>>, PolicySetHandle);
        let live: Arc<std::sync::OnceLock<Serving>> = Arc::default();
        let on_reload = self.on_reload;
        let serving = live.clone();
        let mut builder = PolicySetWatcher::builder([self.path.clone()])
            .policy_file_only()
            .reconnect(false)
            .debounce(self.debounce)
            .on_error({
                let on_error = self.on_error;
                move |err| on_error(err)
            })
            .on_reload(move |set| {
                // The set serving now: reports of two reloads may cross.
                if let Some((live, handle)) = serving.get() {
                    serve(live, &handle.current());
                }
                if let Some(on_reload) = &on_reload {
                    on_reload(&policy_file(set));
                }
            });
        if let Some(backend) = self.backend {
            builder = builder.backend(backend);
        }
        let watcher = builder.start().await.map_err(|err| match err {
            ReloadError::File(err) => LoadError::File(err),
            ReloadError::Watch(err) => LoadError::Watch(err),
            // Nothing else stops a first load.
            other => LoadError::File(crate::error::ConfigFileError::at(
                other.file(),
                None,
                other.field(),
                other.to_string(),
            )),
        })?;
        let current = watcher.current();
        let policies = current
            .policies()
            .cloned()
            .expect("a PolicyWatcher's set holds its policy file");
        let (limiter, _) = live
            .get_or_init(|| (Arc::new(Limiters::clone(&policies)), watcher.handle()))
            .clone();
        // A reload that finished before the limiter was set.
        serve(&limiter, &watcher.current());
        Ok(PolicyWatcher {
            path: self.path,
            live: limiter,
            watcher,
        })
    }
}
