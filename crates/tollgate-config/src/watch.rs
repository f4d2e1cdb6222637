//! [`PolicyWatcher`]: a running limiter kept up to date with its policy
//! file, through the file system's change notifications (the `notify`
//! crate) and on demand.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use notify_debouncer_mini::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_mini::{new_debouncer, DebounceEventResult, Debouncer};
use tollgate::LiveLimiter;

use crate::any_backend::AnyBackend;
use crate::error::LoadError;
use crate::load;
use crate::policy_file::PolicyFile;
use crate::reload_error::{storage_field, ReloadError, WatchError};

/// How long a file must stay unchanged before a change is applied, unless
/// [`PolicyWatcherBuilder::debounce`] says otherwise: long enough for an
/// editor's or a deployment's several writes to land together, short enough
/// to feel immediate.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(200);

/// A callback of the watcher.
type Callback<T> = Arc<dyn Fn(&T) + Send + Sync>;

/// Keeps a [`LiveLimiter`] up to date with a policy file.
///
/// It watches the file's directory (editors and deployments often replace
/// a file by renaming another over it, which a watch on the file itself
/// would miss; a file that is a symbolic link has its target's directory
/// watched too). After a change, once the directory has been quiet for the
/// [debounce](PolicyWatcherBuilder::debounce) time, it reads the file again
/// and, when its bytes changed, applies it:
///
/// - a valid file replaces the policies atomically
///   ([`LiveLimiter::replace`]): every decision is made wholly under the
///   old policies or wholly under the new ones, and keys keep their state
///   where the core allows it (a resource whose strategy and window stay
///   keeps every key's state when only its limit changes; see
///   [`LiveLimiter`]);
/// - an invalid file changes nothing: the error, with the file, line and
///   field, goes to the `on_error` callback, and the policies in effect
///   stay until the file is fixed;
/// - a file that names another storage (memory instead of Redis, another
///   server, other credentials) changes nothing either: a running limiter
///   cannot move its state, so that takes a restart
///   ([`ReloadError::StorageChanged`]). Everything else may change live,
///   the key prefix included (then every key starts fresh).
///
/// [`reload`](Self::reload) applies the file on demand, for a `SIGHUP`
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
/// let limiter = watcher.limiter().clone(); // share it with the request handlers
/// let decision = limiter.allow("login", "203.0.113.7").await?;
/// # let _ = decision;
/// // On SIGHUP:
/// watcher.reload()?;
/// # Ok(())
/// # }
/// ```
///
/// The callbacks run on the watcher's thread, one at a time; they should
/// return quickly and must not panic (a panic stops the watching).
/// Dropping the watcher stops the watching; the limiter keeps serving with
/// the policies it has.
pub struct PolicyWatcher {
    shared: Arc<Shared>,
    _debouncer: Debouncer<RecommendedWatcher>,
}

impl std::fmt::Debug for PolicyWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyWatcher")
            .field("path", &self.shared.path)
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

    /// The limiter, serving the policies in effect.
    pub fn limiter(&self) -> &Arc<LiveLimiter<AnyBackend>> {
        &self.shared.live
    }

    /// The policy file in effect: the last one applied.
    pub fn file(&self) -> Arc<PolicyFile> {
        self.shared.lock().file.clone()
    }

    /// The path watched, as given to [`PolicyWatcher::builder`].
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Reads the file now and applies it, even when its bytes did not
    /// change; for a `SIGHUP` handler or an admin endpoint. The result is
    /// returned, not passed to the callbacks.
    ///
    /// # Errors
    ///
    /// A [`ReloadError`] when the file cannot be read, is invalid, names
    /// another storage or cannot be served; the policies in effect stay.
    pub fn reload(&self) -> Result<(), ReloadError> {
        self.shared.refresh(Refresh::Always).map(drop)
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
    /// [`ManualClock`](tollgate::ManualClock), a Redis backend configured
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
    /// given) and starts watching.
    ///
    /// # Errors
    ///
    /// [`LoadError::File`] for a mistake in the file, [`LoadError::Build`]
    /// when its limiter cannot be built, [`LoadError::Watch`] when its
    /// directory cannot be watched.
    pub async fn start(self) -> Result<PolicyWatcher, LoadError> {
        let (file, bytes) = PolicyFile::load_bytes(&self.path)?;
        let backend = match self.backend {
            Some(backend) => backend,
            None => file.backend().await?,
        };
        let limiter = file.build_on(backend.clone())?;
        let shared = Arc::new(Shared {
            path: self.path,
            live: Arc::new(LiveLimiter::new(limiter)),
            backend,
            state: Mutex::new(State {
                file: Arc::new(file),
                bytes,
            }),
            on_error: self.on_error,
            on_reload: self.on_reload,
        });
        let events = shared.clone();
        let mut debouncer = new_debouncer(self.debounce, move |result: DebounceEventResult| match result {
            Ok(_) => events.refresh_and_report(),
            Err(err) => (events.on_error)(&ReloadError::Watch(WatchError::new(&events.path, err))),
        })
        .map_err(|err| WatchError::new(&shared.path, err))?;
        for dir in directories(&shared.path) {
            debouncer
                .watcher()
                .watch(&dir, RecursiveMode::NonRecursive)
                .map_err(|err| WatchError::new(&dir, err))?;
        }
        // A change between the first read and the start of the watch.
        shared.refresh_and_report();
        Ok(PolicyWatcher {
            shared,
            _debouncer: debouncer,
        })
    }
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

/// Whether a refresh applies a file whose bytes did not change.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Refresh {
    /// Only when the bytes changed (a directory event).
    IfChanged,
    /// Always ([`PolicyWatcher::reload`]).
    Always,
}

/// What the watcher and its event handler share.
struct Shared {
    path: PathBuf,
    live: Arc<LiveLimiter<AnyBackend>>,
    /// The backend the limiter was built on, which every replacement keeps.
    backend: AnyBackend,
    state: Mutex<State>,
    on_error: Callback<ReloadError>,
    on_reload: Option<Callback<PolicyFile>>,
}

/// The file in effect and the bytes last read.
struct State {
    file: Arc<PolicyFile>,
    /// The file's bytes when last read, applied or not: a directory event
    /// that leaves them as they are changes nothing.
    bytes: Vec<u8>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A replacement either happened or not: the state stays whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the file and applies it (see [`Refresh`]); returns the file
    /// applied, if one was.
    fn refresh(&self, when: Refresh) -> Result<Option<Arc<PolicyFile>>, ReloadError> {
        let mut state = self.lock();
        let bytes = load::read(&self.path, &self.path.display().to_string())?;
        if when == Refresh::IfChanged && bytes == state.bytes {
            return Ok(None);
        }
        state.bytes = bytes;
        let file = PolicyFile::from_bytes(&self.path, &state.bytes)?;
        let (from, to) = (state.file.storage(), file.storage());
        if from != to {
            return Err(ReloadError::StorageChanged {
                file: file.origin().to_owned(),
                field: storage_field(to).or(storage_field(from)).unwrap_or("tollgate"),
                from: Box::new(from.clone()),
                to: Box::new(to.clone()),
            });
        }
        let built = file
            .check_backend(&self.backend)
            .and_then(|()| self.live.replace(file.limiter_builder(self.backend.clone())));
        if let Err(error) = built {
            return Err(ReloadError::Build {
                file: file.origin().to_owned(),
                error,
            });
        }
        state.file = Arc::new(file);
        Ok(Some(state.file.clone()))
    }

    /// Refreshes after a directory event and reports the outcome to the
    /// callbacks (outside the lock, so that they may ask for the file).
    fn refresh_and_report(&self) {
        match self.refresh(Refresh::IfChanged) {
            Ok(Some(file)) => {
                if let Some(on_reload) = &self.on_reload {
                    on_reload(&file);
                }
            }
            Ok(None) => {}
            Err(err) => (self.on_error)(&err),
        }
    }
}
