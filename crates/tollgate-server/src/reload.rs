//! Reloading the configuration: [`Reloader::reload`] on demand, and the
//! reports of every reload (logged, and counted in
//! [`RELOADS`](crate::metrics::RELOADS)). `SIGHUP` and file changes are
//! watched by `tollgate-config`'s [`PolicySetWatcher`], which the server
//! runs on.

use tollgate_config::{PolicySet, PolicySetHandle, PolicySetWatcher, ReloadError};

/// Reloads a running server's configuration from its files.
#[derive(Clone, Debug)]
pub struct Reloader {
    sets: PolicySetHandle,
}

impl Reloader {
    pub(crate) fn new(sets: PolicySetHandle) -> Self {
        Self { sets }
    }

    /// Loads every file again and, when they are valid, serves them:
    /// limiters whose resource, policy and storage are unchanged are kept
    /// with their state; a changed one keeps the state of every limit whose
    /// strategy and window stay, and the others start empty. Requests being
    /// decided finish on the set they started with.
    ///
    /// # Errors
    ///
    /// The first mistake found, with its file, line and field; the old
    /// configuration keeps serving.
    pub async fn reload(&self) -> Result<(), ReloadError> {
        let result = self.sets.reload().await;
        match &result {
            Ok(()) => applied(&self.sets.current()),
            Err(err) => rejected(err),
        }
        result
    }
}

/// Starts the watcher of the server's configuration `files`: on file
/// changes when `watch`, on `SIGHUP` when `sighup`, each reload reported.
/// A PostgreSQL database that does not answer yet is connected in the
/// background, whatever the fail policy.
/// A watch that cannot start is logged, and the server runs without it.
///
/// With `memory` (a state file's backend), in-memory sets are built on it,
/// and a reload that names another storage is refused until a restart, so
/// that the state file keeps every count.
pub(crate) async fn start(
    files: Vec<std::path::PathBuf>,
    clock: tollgate::clock::SharedClock,
    (watch, sighup): (bool, bool),
    memory: Option<tollgate::MemoryBackend>,
) -> Result<PolicySetWatcher, ReloadError> {
    let builder = |watch: bool, sighup: bool| {
        // A service starts before its database: until PostgreSQL answers,
        // `/readyz` says not ready and the fail policy decides.
        let builder = PolicySetWatcher::builder(files.clone())
            .postgres_while_down(true)
            .clock(clock.clone())
            .watch(watch)
            .reload_on_sighup(sighup)
            .on_reload(applied)
            .on_error(rejected);
        match &memory {
            Some(memory) => builder.memory_backend(memory.clone()).reconnect(false),
            None => builder,
        }
    };
    match builder(watch, sighup).start().await {
        Err(ReloadError::Watch(err)) => {
            tracing::warn!("configuration files are not watched for changes, nor SIGHUP: {err}");
            builder(false, false).start().await
        }
        other => other,
    }
}

/// Reports a reload applied (of whichever set: the log names no files).
fn applied(_: &PolicySet) {
    metrics::counter!(crate::metrics::RELOADS, "outcome" => "applied").increment(1);
    tracing::info!("configuration reloaded");
}

/// Reports a reload refused.
fn rejected(err: &ReloadError) {
    metrics::counter!(crate::metrics::RELOADS, "outcome" => "rejected").increment(1);
    tracing::error!("configuration not reloaded, the previous one keeps serving: {err}");
}
