//! [`PolicySetWatcher`]: the one watcher of configuration files. It keeps
//! a [`PolicySet`] up to date with its files, through the file system's
//! change notifications (debounced), on `SIGHUP` when asked, and on
//! demand; `tollgate serve` and [`PolicyWatcher`](crate::PolicyWatcher)
//! both run on it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use notify_debouncer_mini::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_mini::{new_debouncer, DebounceEventResult, Debouncer};
use tollgate::clock::SharedClock;

use crate::any_backend::AnyBackend;
use crate::error::ConfigFileError;
use crate::policy_set::{LoadOptions, PolicySet};
use crate::reload_error::ReloadError;
use crate::set_files::{self, read_off_runtime, Read};
use crate::watch_error::WatchError;

/// How long the files' directories must stay quiet after a change before
/// the files are read again, unless the builder says otherwise: long
/// enough for an editor's or a deployment's several writes to land
/// together, short enough to feel immediate.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(200);

/// A callback of the watcher.
pub(crate) type Callback<T> = Arc<dyn Fn(&T) + Send + Sync>;

/// Keeps a [`PolicySet`] up to date with its files.
///
/// It watches each file's directory (editors and deployments often
/// replace a file by renaming another over it, and Kubernetes swaps a
/// symbolic link, which a watch on the file itself would miss; a file that
/// is a symbolic link has its target's directory watched too). After a
/// change, once the directories have been quiet for the
/// [debounce](PolicySetWatcherBuilder::debounce) time, it reads the files
/// again (off the async runtime) and, when their bytes changed, applies
/// them:
///
/// - a valid set replaces the old one atomically: a decision started on
///   the old set finishes on it, every later one sees the new set. The new
///   set is built after the old one: a policy whose limits and settings are
///   unchanged keeps its limiter as it is, a changed one keeps the state of
///   every limit whose strategy and window stay (only the limit changed),
///   anything else starts fresh (see [`tollgate::Limiters`] for why);
/// - an invalid set changes nothing: the error, with the file, line and
///   field, goes to the [`on_error`](PolicySetWatcherBuilder::on_error)
///   callback, and the old set keeps serving until the files are fixed;
/// - a set that names another storage connects it and starts its state
///   there, unless the watcher keeps its storage
///   ([`reconnect`](PolicySetWatcherBuilder::reconnect) set to false, or a
///   [`backend`](PolicySetWatcherBuilder::backend) given): then it is
///   refused ([`ReloadError::StorageChanged`]) until a restart.
///
/// [`reload`](Self::reload) applies the files on demand, and with
/// [`reload_on_sighup`](PolicySetWatcherBuilder::reload_on_sighup) every
/// `SIGHUP` does. Reloads run one at a time.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use tollgate_config::PolicySetWatcher;
///
/// let watcher = PolicySetWatcher::builder(["policies.yaml", "envoy.yaml"])
///     .reload_on_sighup(true)
///     .on_error(|err| eprintln!("configuration not reloaded: {err}"))
///     .start()
///     .await?;
/// let handle = watcher.handle(); // for the request handlers
/// if let Some(policies) = handle.current().policies() {
///     let decision = policies.limiter("login").allow("203.0.113.7").await?;
/// #   let _ = decision;
/// }
/// # Ok(())
/// # }
/// ```
///
/// The callbacks run on the async runtime the watcher was started on, one
/// reload at a time; they should return quickly. Dropping the watcher
/// stops the watching; handles keep serving the set they have.
pub struct PolicySetWatcher {
    handle: PolicySetHandle,
    _debouncer: Option<Debouncer<RecommendedWatcher>>,
    sighup: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for PolicySetWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicySetWatcher")
            .field("files", &self.handle.inner.files)
            .finish_non_exhaustive()
    }
}

impl Drop for PolicySetWatcher {
    fn drop(&mut self) {
        if let Some(task) = &self.sighup {
            task.abort();
        }
    }
}

/// The set a [`PolicySetWatcher`] keeps up to date, shared with the code
/// that decides: cheap to clone, and valid after the watcher is dropped
/// (the set then stays as it was).
#[derive(Clone)]
pub struct PolicySetHandle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PolicySetHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicySetHandle")
            .field("files", &self.inner.files)
            .finish_non_exhaustive()
    }
}

/// Configures a [`PolicySetWatcher`]; made by [`PolicySetWatcher::builder`].
pub struct PolicySetWatcherBuilder {
    files: Vec<PathBuf>,
    debounce: Duration,
    watch: bool,
    sighup: bool,
    reconnect: bool,
    options: LoadOptions,
    on_error: Option<Callback<ReloadError>>,
    on_reload: Option<Callback<PolicySet>>,
}

impl std::fmt::Debug for PolicySetWatcherBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicySetWatcherBuilder")
            .field("files", &self.files)
            .field("debounce", &self.debounce)
            .field("watch", &self.watch)
            .field("sighup", &self.sighup)
            .field("reconnect", &self.reconnect)
            .finish_non_exhaustive()
    }
}

/// What the watcher, its handles and its event handlers share.
struct Inner {
    files: Vec<PathBuf>,
    current: ArcSwap<PolicySet>,
    options: LoadOptions,
    /// The files as last read, applied or not: an event that leaves their
    /// bytes as they are changes nothing. Held while a set is built, on a
    /// thread that may block, so that reloads run one at a time.
    last: Mutex<Vec<Read>>,
    on_error: Option<Callback<ReloadError>>,
    on_reload: Option<Callback<PolicySet>>,
}

/// Whether a reload applies files whose bytes did not change.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refresh {
    /// Only when the bytes changed (a directory event).
    IfChanged,
    /// Always (on demand, `SIGHUP`).
    Always,
}

/// How far a reload got without connecting a store.
enum Step {
    /// The files are as they were.
    Unchanged,
    /// The new set serves; the old one, when a limiter it no longer serves
    /// holds leases to end ([`Retired`]).
    Applied(Arc<PolicySet>, Option<Retired>),
    /// The files name another store: it must be connected first.
    Connect(Vec<Read>),
}

/// A set a reload replaced whose limiters that the new set no longer
/// serves hold leases: they are ended, and their unspent units given back
/// ([`PolicySet::end_replaced_leases`]), after the new set serves.
struct Retired {
    old: Arc<PolicySet>,
    new: Arc<PolicySet>,
}

impl Retired {
    /// What retiring `old` for `new` takes: `None` when no limiter `new`
    /// drops holds leases, and `old` is then freed here (freeing a large
    /// set takes time too: on this thread, not on a request's, unless a
    /// request holds it to the end).
    fn after(old: Arc<PolicySet>, new: &Arc<PolicySet>) -> Option<Self> {
        old.leases_replaced_by(new).then(|| Self {
            old,
            new: new.clone(),
        })
    }

    /// Ends the leases, then frees the old set off the runtime's workers.
    /// A return that fails is not repeated (its units stay charged until
    /// they no longer count).
    async fn end(self) {
        let _ = self.old.end_replaced_leases(&self.new).await;
        let Self { old, new } = self;
        drop(new);
        let _ = tokio::task::spawn_blocking(move || drop(old)).await;
    }
}

impl PolicySetWatcher {
    /// A watcher of `files`: at most one tollgate policy file (its format
    /// chosen by the extension, as for
    /// [`PolicyFile::load`](crate::PolicyFile::load)) and any number of
    /// Envoy files (see [`PolicySet`]).
    pub fn builder<P: Into<PathBuf>>(files: impl IntoIterator<Item = P>) -> PolicySetWatcherBuilder {
        PolicySetWatcherBuilder {
            files: files.into_iter().map(Into::into).collect(),
            debounce: DEFAULT_DEBOUNCE,
            watch: true,
            sighup: false,
            reconnect: true,
            options: LoadOptions::default(),
            on_error: None,
            on_reload: None,
        }
    }

    /// A handle on the set, for the code that decides.
    pub fn handle(&self) -> PolicySetHandle {
        self.handle.clone()
    }

    /// The set serving now.
    pub fn current(&self) -> Arc<PolicySet> {
        self.handle.current()
    }

    /// Reads the files now and applies them (see
    /// [`PolicySetHandle::reload`]).
    ///
    /// # Errors
    ///
    /// As for [`PolicySetHandle::reload`].
    pub async fn reload(&self) -> Result<(), ReloadError> {
        self.handle.reload().await
    }
}

impl PolicySetHandle {
    /// The set serving now; later reloads do not change it.
    pub fn current(&self) -> Arc<PolicySet> {
        self.inner.current.load_full()
    }

    /// The set serving now, without touching its reference count: for
    /// the hot path of a request (hold it for one request, not longer; a
    /// reload waits for nothing, but the old set is freed only when the
    /// last guard goes).
    pub fn load(&self) -> impl std::ops::Deref<Target = Arc<PolicySet>> + Send + '_ {
        self.inner.current.load()
    }

    /// The files watched, as given.
    pub fn files(&self) -> &[PathBuf] {
        &self.inner.files
    }

    /// Reads the files now and applies them, even when their bytes did not
    /// change; for a `SIGHUP` handler or an admin endpoint. The result is
    /// returned, not passed to the callbacks. Requests being decided finish
    /// on the set they started with. The leases of the limiters the new
    /// set replaced (changed policies) are ended, their unspent units given
    /// back to the store, before it returns
    /// ([`PolicySet::end_replaced_leases`]); a reload on a file change does
    /// the same on a task of its own.
    ///
    /// # Errors
    ///
    /// A [`ReloadError`] when a file cannot be read, is invalid, names a
    /// storage the watcher keeps, or cannot be served; the old set keeps
    /// serving.
    pub async fn reload(&self) -> Result<(), ReloadError> {
        self.inner.refresh(Refresh::Always).await.map(drop)
    }

    /// Reads the files and applies them on the calling thread, which may
    /// block: for a watcher that keeps its storage (nothing to connect).
    pub(crate) fn reload_blocking(&self) -> Result<(), ReloadError> {
        let read = set_files::read_all(&self.inner.files)?;
        match self.inner.apply_blocking(read, Refresh::Always)? {
            Step::Connect(_) => Err(ReloadError::File(ConfigFileError::at(
                &self.inner.first_origin(),
                None,
                "",
                "the files name another storage, which this watcher does not connect",
            ))),
            Step::Unchanged => Ok(()),
            Step::Applied(_, retired) => {
                // No waiting here: on a runtime the leases end on a task
                // of their own.
                if let (Some(retired), Ok(runtime)) = (retired, tokio::runtime::Handle::try_current()) {
                    runtime.spawn(retired.end());
                }
                Ok(())
            }
        }
    }
}

impl PolicySetWatcherBuilder {
    /// How long the files' directories must stay quiet after a change
    /// before the files are read again (default [`DEFAULT_DEBOUNCE`]).
    pub fn debounce(mut self, quiet: Duration) -> Self {
        self.debounce = quiet;
        self
    }

    /// Whether changes of the files are watched (default: yes); without,
    /// only [`reload`](PolicySetWatcher::reload) and `SIGHUP` reload.
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
    }

    /// Whether every `SIGHUP` reloads the files (default: no; a library
    /// leaves the process's signals to the program). Unix only; elsewhere
    /// this changes nothing.
    pub fn reload_on_sighup(mut self, sighup: bool) -> Self {
        self.sighup = sighup;
        self
    }

    /// Whether a reload whose files name another storage connects it and
    /// serves from there, starting its state afresh (default: yes); with
    /// `false`, such a reload is refused with
    /// [`ReloadError::StorageChanged`] until a restart.
    pub fn reconnect(mut self, reconnect: bool) -> Self {
        self.reconnect = reconnect;
        self
    }

    /// Whether a PostgreSQL database (`postgres_url`) that does not answer
    /// yet is connected in the background whatever the fail policy
    /// (default: no, a file that fails closed needs it to answer): the
    /// set is served at once, its decisions failing as unavailable (and
    /// decided by the fail policy) until the database answers. A database
    /// that answers and refuses (the login, the database's name, the
    /// rights to create the schema) is still an error. For a service
    /// that must start before its database, as `tollgate serve` does.
    pub fn postgres_while_down(mut self, start: bool) -> Self {
        self.options.postgres_while_down = start;
        self
    }

    /// Keeps the state on `backend` instead of the one the files name (a
    /// [`MemoryBackend`](tollgate::MemoryBackend) on a
    /// [`ManualClock`](tollgate::clock::ManualClock), a Redis backend configured
    /// in code). A change of the files' storage fields is refused.
    pub fn backend(mut self, backend: impl Into<AnyBackend>) -> Self {
        self.options.backend = Some(backend.into());
        self
    }

    /// The in-memory backend the sets are built on while the files keep
    /// their state in memory (default: a new one, on [`clock`](Self::clock)),
    /// such as one [restored](tollgate::MemoryBackend::restore) from a
    /// state file, whose [snapshots](tollgate::MemoryBackend::snapshot)
    /// then hold every set's state. Its own clock is used.
    pub fn memory_backend(mut self, backend: tollgate::MemoryBackend) -> Self {
        self.options.memory = Some(backend);
        self
    }

    /// The clock of in-memory state (default: the system clock).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.options.clock = Some(clock);
        self
    }

    /// Calls `on_error` with every change the watcher could not apply
    /// (default: none, the old set serves on silently).
    pub fn on_error(mut self, on_error: impl Fn(&ReloadError) + Send + Sync + 'static) -> Self {
        self.on_error = Some(Arc::new(on_error));
        self
    }

    /// Calls `on_reload` with each set the watcher applied after a change
    /// or a `SIGHUP`.
    pub fn on_reload(mut self, on_reload: impl Fn(&PolicySet) + Send + Sync + 'static) -> Self {
        self.on_reload = Some(Arc::new(on_reload));
        self
    }

    /// Only a tollgate policy file may be watched (for
    /// [`PolicyWatcher`](crate::PolicyWatcher)).
    pub(crate) fn policy_file_only(mut self) -> Self {
        self.options.policy_file_only = true;
        self
    }

    /// Loads the files, connects their storage (unless a
    /// [`backend`](Self::backend) was given), builds the set and starts
    /// watching. Must be called on a tokio runtime, which runs the reloads.
    ///
    /// # Errors
    ///
    /// [`ReloadError::File`] for a mistake in a file or a set that cannot
    /// be served, [`ReloadError::Watch`] when a directory cannot be
    /// watched or `SIGHUP` cannot be listened for.
    pub async fn start(mut self) -> Result<PolicySetWatcher, ReloadError> {
        if !self.reconnect && self.options.backend.is_none() {
            self.options.keep_storage = true;
        }
        let read = read_off_runtime(self.files.clone()).await?;
        let set = PolicySet::load_read(&read, None, &self.options).await?;
        let inner = Arc::new(Inner {
            files: self.files,
            current: ArcSwap::from_pointee(set),
            options: self.options,
            last: Mutex::new(read),
            on_error: self.on_error,
            on_reload: self.on_reload,
        });
        let runtime = tokio::runtime::Handle::current();
        let debouncer = match self.watch {
            true => Some(watch(&inner, self.debounce, runtime.clone()).map_err(ReloadError::Watch)?),
            false => None,
        };
        let sighup = match self.sighup {
            true => on_sighup(&inner).map_err(ReloadError::Watch)?,
            false => None,
        };
        if self.watch {
            // A change between the first read and the start of the watch,
            // looked for before this returns.
            let inner = inner.clone();
            let _ = tokio::task::spawn_blocking(move || inner.on_event(&runtime)).await;
        }
        Ok(PolicySetWatcher {
            handle: PolicySetHandle { inner },
            _debouncer: debouncer,
            sighup,
        })
    }
}

/// Watches the directories of `inner`'s files: every event, once they are
/// quiet for `debounce`, reloads on `runtime` if the bytes changed.
fn watch(
    inner: &Arc<Inner>,
    debounce: Duration,
    runtime: tokio::runtime::Handle,
) -> Result<Debouncer<RecommendedWatcher>, WatchError> {
    let events = inner.clone();
    let first = inner.files.first().cloned().unwrap_or_default();
    let mut debouncer = new_debouncer(debounce, move |result: DebounceEventResult| match result {
        Ok(_) => events.on_event(&runtime),
        Err(err) => {
            if let Some(on_error) = &events.on_error {
                on_error(&ReloadError::Watch(WatchError::new(&first, err)));
            }
        }
    })
    .map_err(|err| WatchError::new(&inner.files.first().cloned().unwrap_or_default(), err))?;
    let mut dirs: Vec<PathBuf> = inner.files.iter().flat_map(|f| directories(f)).collect();
    dirs.sort();
    dirs.dedup();
    for dir in dirs {
        debouncer
            .watcher()
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|err| WatchError::new(&dir, err))?;
    }
    Ok(debouncer)
}

/// Reloads on every `SIGHUP` until the task is aborted.
#[cfg(unix)]
fn on_sighup(inner: &Arc<Inner>) -> Result<Option<tokio::task::JoinHandle<()>>, WatchError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup())
        .map_err(|err| WatchError::new(Path::new("SIGHUP"), notify_debouncer_mini::notify::Error::io(err)))?;
    let inner = inner.clone();
    Ok(Some(tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            inner.refresh_and_report(Refresh::Always).await;
        }
    })))
}

#[cfg(not(unix))]
fn on_sighup(_: &Arc<Inner>) -> Result<Option<tokio::task::JoinHandle<()>>, WatchError> {
    Ok(None)
}

/// The directories to watch for changes of the file at `path`: its own,
/// and its target's when it is a symbolic link into another.
fn directories(path: &Path) -> Vec<PathBuf> {
    let parent = |p: &Path| match p.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let mut dirs = vec![parent(path)];
    if let Ok(target) = std::fs::canonicalize(path) {
        let target_dir = parent(&target);
        let same = std::fs::canonicalize(&dirs[0]).is_ok_and(|dir| dir == target_dir);
        if !same {
            dirs.push(target_dir);
        }
    }
    dirs
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Vec<Read>> {
        // A reload either swapped the set or not: the bytes stay whole.
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn first_origin(&self) -> String {
        self.files
            .first()
            .map(|f| f.display().to_string())
            .unwrap_or_default()
    }

    /// Reads the files and applies them (see [`Refresh`]); returns the set
    /// applied, if one was.
    async fn refresh(self: &Arc<Self>, when: Refresh) -> Result<Option<Arc<PolicySet>>, ReloadError> {
        let read = read_off_runtime(self.files.clone()).await?;
        let this = self.clone();
        let step = tokio::task::spawn_blocking(move || this.apply_blocking(read, when))
            .await
            .map_err(|join| self.failed(join))??;
        match step {
            Step::Unchanged => Ok(None),
            Step::Applied(set, retired) => {
                if let Some(retired) = retired {
                    retired.end().await;
                }
                Ok(Some(set))
            }
            Step::Connect(read) => self.connect_and_apply(read).await.map(Some),
        }
    }

    /// Applies the files `read`, which name a store to connect first.
    async fn connect_and_apply(self: &Arc<Self>, read: Vec<Read>) -> Result<Arc<PolicySet>, ReloadError> {
        // Connecting waits on the network: on this task, with no lock held.
        let previous = self.current.load_full();
        let set = Arc::new(PolicySet::load_read(&read, Some(previous), &self.options).await?);
        let this = self.clone();
        let applied = set.clone();
        let retired = tokio::task::spawn_blocking(move || {
            let last = this.lock();
            // A reload that ran meanwhile read other bytes: its set stays.
            if *last == read {
                let old = this.current.swap(applied.clone());
                drop(last);
                return Retired::after(old, &applied);
            }
            None
        })
        .await
        .map_err(|join| self.failed(join))?;
        if let Some(retired) = retired {
            retired.end().await;
        }
        Ok(set)
    }

    /// After a directory event, on the watcher's thread (which may block,
    /// so the async runtime need not be free): reads the files and applies
    /// them if they changed, connecting a new store on `runtime`, and
    /// reports the outcome to the callbacks.
    fn on_event(self: &Arc<Self>, runtime: &tokio::runtime::Handle) {
        let outcome = set_files::read_all(&self.files)
            .map_err(ReloadError::from)
            .and_then(|read| self.apply_blocking(read, Refresh::IfChanged));
        match outcome {
            Ok(Step::Unchanged) => {}
            Ok(Step::Applied(set, retired)) => {
                if let Some(retired) = retired {
                    runtime.spawn(retired.end());
                }
                self.report(Ok(Some(set)));
            }
            Ok(Step::Connect(read)) => {
                let inner = self.clone();
                runtime.spawn(async move {
                    let outcome = inner.connect_and_apply(read).await.map(Some);
                    inner.report(outcome);
                });
            }
            Err(err) => self.report(Err(err)),
        }
    }

    /// Applies the files `read`, on a thread that may block: skips them
    /// when `when` allows and their bytes are unchanged, builds and swaps
    /// in the new set unless a store must be connected first.
    fn apply_blocking(&self, read: Vec<Read>, when: Refresh) -> Result<Step, ReloadError> {
        let mut last = self.lock();
        if when == Refresh::IfChanged && *last == read {
            return Ok(Step::Unchanged);
        }
        last.clone_from(&read);
        let previous = self.current.load_full();
        match PolicySet::load_read_blocking(&read, Some(&previous), &self.options)? {
            Some(set) => {
                let set = Arc::new(set);
                let old = self.current.swap(set.clone());
                drop((last, previous));
                let retired = Retired::after(old, &set);
                Ok(Step::Applied(set, retired))
            }
            None => Ok(Step::Connect(read)),
        }
    }

    /// Refreshes after a signal and reports the outcome to the callbacks.
    async fn refresh_and_report(self: &Arc<Self>, when: Refresh) {
        let outcome = self.refresh(when).await;
        self.report(outcome);
    }

    /// Passes the outcome of a reload to the callbacks.
    fn report(&self, outcome: Result<Option<Arc<PolicySet>>, ReloadError>) {
        match outcome {
            Ok(Some(set)) => {
                if let Some(on_reload) = &self.on_reload {
                    on_reload(&set);
                }
            }
            Ok(None) => {}
            Err(err) => {
                if let Some(on_error) = &self.on_error {
                    on_error(&err);
                }
            }
        }
    }

    /// A reload whose blocking part panicked or was cancelled.
    fn failed(&self, join: tokio::task::JoinError) -> ReloadError {
        ReloadError::File(ConfigFileError::at(
            &self.first_origin(),
            None,
            "",
            format!("reloading the configuration failed: {join}"),
        ))
    }
}
