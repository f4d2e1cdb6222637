//! Reloading the configuration: on demand ([`Reloader::reload`]), on
//! `SIGHUP`, and when a configuration file changes (debounced). A valid new
//! set replaces the old one atomically; an invalid one is logged with its
//! file, line and field and the old set keeps serving.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Mutex};

use crate::config_set::ConfigSet;
use crate::error::ConfigError;
use crate::shared::Shared;

/// How long file changes must stop before a reload starts: an editor's
/// save is often several writes and renames.
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// Reloads a running server's configuration from its files.
#[derive(Clone)]
pub struct Reloader {
    inner: Arc<Inner>,
}

struct Inner {
    files: Vec<PathBuf>,
    shared: Arc<Shared>,
    /// One reload at a time, so that none is built from a set another
    /// reload is replacing.
    running: Mutex<()>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("files", &self.inner.files)
            .finish()
    }
}

impl Reloader {
    pub(crate) fn new(files: Vec<PathBuf>, shared: Arc<Shared>) -> Self {
        Self {
            inner: Arc::new(Inner {
                files,
                shared,
                running: Mutex::new(()),
            }),
        }
    }

    /// Loads every file again and, when they are valid, serves them:
    /// limiters whose resource, policy and storage are unchanged are kept
    /// with their state; a changed one keeps the state of every limit whose
    /// strategy and window stay, and the others start empty. Requests being decided
    /// finish on the set they started with.
    ///
    /// # Errors
    ///
    /// The first mistake found; the old configuration keeps serving.
    pub async fn reload(&self) -> Result<(), ConfigError> {
        let _running = self.inner.running.lock().await;
        let shared = &self.inner.shared;
        let previous = shared.config.load_full();
        match ConfigSet::load(&self.inner.files, Some(previous), Some(&shared.clock)).await {
            Ok(next) => {
                let old = shared.config.swap(Arc::new(next));
                // Freeing a large set takes time too: not on a request's
                // thread (unless a request still holds it and drops it last).
                tokio::task::spawn_blocking(move || drop(old));
                metrics::counter!(crate::metrics::RELOADS, "outcome" => "applied").increment(1);
                tracing::info!(files = ?self.inner.files, "configuration reloaded");
                Ok(())
            }
            Err(err) => {
                metrics::counter!(crate::metrics::RELOADS, "outcome" => "rejected").increment(1);
                tracing::error!("configuration not reloaded, the previous one keeps serving: {err}");
                Err(err)
            }
        }
    }

    /// Reloads on every `SIGHUP` until the process ends.
    #[cfg(unix)]
    pub(crate) fn on_sighup(&self) -> std::io::Result<tokio::task::JoinHandle<()>> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangups = signal(SignalKind::hangup())?;
        let this = self.clone();
        Ok(tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                tracing::info!("SIGHUP: reloading the configuration");
                let _ = this.reload().await;
            }
        }))
    }

    /// Reloads when a configuration file is written, created, renamed or
    /// removed, once changes have stopped for [`DEBOUNCE`]. The watcher
    /// lives as long as the returned task.
    pub(crate) fn on_file_changes(&self) -> notify::Result<tokio::task::JoinHandle<()>> {
        use notify::{EventKind, RecursiveMode, Watcher};
        let (tx, mut rx) = mpsc::channel::<()>(1);
        let files: Vec<PathBuf> = self.inner.files.iter().map(|f| absolute(f)).collect();
        let watched = files.clone();
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            if matches!(event.kind, EventKind::Access(_)) {
                return;
            }
            if event.paths.iter().any(|p| watched.iter().any(|f| f == p)) {
                let _ = tx.try_send(());
            }
        })?;
        let mut dirs: Vec<&Path> = files.iter().filter_map(|f| f.parent()).collect();
        dirs.sort();
        dirs.dedup();
        for dir in dirs {
            watcher.watch(dir, RecursiveMode::NonRecursive)?;
        }
        let this = self.clone();
        Ok(tokio::spawn(async move {
            let _watcher = watcher;
            while rx.recv().await.is_some() {
                while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, rx.recv()).await {}
                tracing::info!("a configuration file changed: reloading");
                let _ = this.reload().await;
            }
        }))
    }
}

/// `path` made absolute against the working directory, as the watcher
/// reports paths.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}
