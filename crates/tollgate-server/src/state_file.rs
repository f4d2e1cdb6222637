//! `--state-file`: in-memory counts that survive a restart. The state is
//! read before the service starts, written every `--state-interval` while
//! it runs and once more after it drained, each time atomically (a crash
//! leaves the previous file whole); a file that cannot be restored stops
//! the start, unless the operator asked to start empty.

use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tollgate::backend::{StateFileError, StateSnapshot};
use tollgate::MemoryBackend;

use crate::error::ServerError;

/// How often the state is written by default: at most this much of the
/// decisions is lost when the process is killed without draining.
pub const DEFAULT_STATE_INTERVAL: Duration = Duration::from_secs(30);

/// How fast a save while the service runs streams the state: slow enough
/// that it leaves the decisions on the other cores their memory bandwidth
/// and caches (their p99 0.99–1.01× during a save, docs/performance.md,
/// "Saving the state"), fast enough for 1,000,000 keys (35 MB) in about
/// 0.3 s. The save after draining writes at full speed.
const PACE_WHILE_SERVING: NonZeroU64 = NonZeroU64::new(128 << 20).unwrap();

/// Where and how often the in-memory state is kept.
#[derive(Clone, Debug)]
pub(crate) struct StateFile {
    pub(crate) path: PathBuf,
    pub(crate) interval: Duration,
    /// Start empty, the bad file moved aside, when it cannot be restored.
    pub(crate) discard_invalid: bool,
}

impl StateFile {
    /// Checks the settings (an interval of at least a second, at most a
    /// day).
    pub(crate) fn check(&self) -> Result<(), ServerError> {
        if self.interval < Duration::from_secs(1) || self.interval > Duration::from_secs(86_400) {
            return Err(ServerError::Limit {
                setting: "--state-interval",
                message: "must be from 1s to 1 day".to_owned(),
            });
        }
        Ok(())
    }

    /// `backend` with the file's state restored into it (off the async
    /// runtime); the file refused is an error, or with `discard_invalid`
    /// moved aside to `PATH.invalid` and the service starts empty.
    pub(crate) async fn restore(&self, backend: MemoryBackend) -> Result<MemoryBackend, ServerError> {
        let path = self.path.clone();
        let loaded = tokio::task::spawn_blocking(move || StateSnapshot::load(&path))
            .await
            .map_err(|join| ServerError::State(format!("reading the state file failed: {join}")))?;
        match loaded {
            Ok(Some(snapshot)) => {
                tracing::info!(
                    "restored {} keys of {} limits from {}",
                    snapshot.keys(),
                    snapshot.tables(),
                    self.path.display()
                );
                Ok(backend.restore(snapshot))
            }
            Ok(None) => {
                tracing::info!("no state file at {} yet: starting empty", self.path.display());
                Ok(backend)
            }
            Err(err @ StateFileError::Invalid { .. }) if self.discard_invalid => {
                let aside = aside(&self.path);
                let moved = std::fs::rename(&self.path, &aside);
                tracing::warn!(
                    "{err}; starting empty as --discard-invalid-state says{}",
                    match moved {
                        Ok(()) => format!(", the file moved to {}", aside.display()),
                        Err(e) => format!(" (the file could not be moved aside: {e})"),
                    }
                );
                Ok(backend)
            }
            Err(err) => Err(ServerError::State(format!(
                "{err}; the service does not start without the state it was told to keep (move the \
                 file away, or pass --discard-invalid-state to start empty)"
            ))),
        }
    }

    /// Writes `backend`'s state every interval until `stop` is set.
    pub(crate) async fn save_every_interval(self, backend: MemoryBackend, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.interval) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
            self.save(&backend, Some(PACE_WHILE_SERVING)).await;
        }
    }

    /// Writes `backend`'s state now (off the async runtime), at most
    /// `pace` bytes a second when given, logging the outcome.
    pub(crate) async fn save(&self, backend: &MemoryBackend, pace: Option<NonZeroU64>) {
        let (path, backend) = (self.path.clone(), backend.clone());
        let saved = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            match pace {
                Some(pace) => backend.save_paced(&path, pace),
                None => {
                    let snapshot = backend.snapshot();
                    snapshot.save(&path).map(|()| snapshot.keys())
                }
            }
            .map(|keys| (keys, started.elapsed()))
        })
        .await;
        match saved {
            Ok(Ok((keys, took))) => {
                metrics::counter!(crate::metrics::STATE_SAVES, "outcome" => "saved").increment(1);
                tracing::debug!("saved {keys} keys to {} in {took:?}", self.path.display());
            }
            Ok(Err(err)) => {
                metrics::counter!(crate::metrics::STATE_SAVES, "outcome" => "failed").increment(1);
                tracing::error!("the state was not saved: {err}");
            }
            Err(join) => {
                metrics::counter!(crate::metrics::STATE_SAVES, "outcome" => "failed").increment(1);
                tracing::error!("the state was not saved: {join}");
            }
        }
    }
}

/// Where a state file that cannot be restored is moved: `PATH.invalid`.
fn aside(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".invalid");
    PathBuf::from(name)
}
