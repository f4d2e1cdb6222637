//! Why a [`PolicyWatcher`](crate::PolicyWatcher) kept the policies it had:
//! the file is invalid, names another storage, cannot be served, or cannot
//! be watched.

use std::fmt;

use crate::error::ConfigFileError;
use crate::policy_file::Storage;

/// Why a changed policy file was not applied; the policies in effect stay
/// as they were.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReloadError {
    /// The file could not be read, parsed or validated: the error names the
    /// file, the line and the field.
    File(ConfigFileError),
    /// The file names another storage (for example Redis instead of
    /// memory, or another server): a running limiter cannot move its state,
    /// so this takes a restart.
    StorageChanged {
        /// The file.
        file: String,
        /// The field that names the new storage (or the old one, when the
        /// new is memory), such as `tollgate.redis_url`.
        field: &'static str,
        /// The storage in effect.
        from: Box<Storage>,
        /// The storage the file names now.
        to: Box<Storage>,
    },
    /// The new policies could not be built: the store refuses one of them
    /// (the error names its field).
    Build {
        /// The file.
        file: String,
        /// The builder's error.
        error: tollgate::Error,
    },
    /// Changes can no longer be watched (events were lost, or the
    /// directory went away): [`reload`](crate::PolicyWatcher::reload)
    /// still applies the file on demand.
    Watch(WatchError),
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadError::File(err) => err.fmt(f),
            ReloadError::StorageChanged {
                file,
                field,
                from,
                to,
            } => write!(
                f,
                "{file}: {field}: the storage changed from {from} to {to}; a running limiter cannot \
                 move its state to another store, so the policies in effect stay until a restart"
            ),
            ReloadError::Build { file, error } => write!(f, "{file}: {error}"),
            ReloadError::Watch(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for ReloadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReloadError::File(err) => Some(err),
            ReloadError::Build { error, .. } => Some(error),
            ReloadError::Watch(err) => Some(err),
            ReloadError::StorageChanged { .. } => None,
        }
    }
}

impl From<ConfigFileError> for ReloadError {
    fn from(err: ConfigFileError) -> Self {
        ReloadError::File(err)
    }
}

/// The file system watcher failed: it could not start, or it reports an
/// error (such as events lost because too many came at once).
#[derive(Debug)]
pub struct WatchError {
    path: String,
    source: notify_debouncer_mini::notify::Error,
}

impl WatchError {
    pub(crate) fn new(path: &std::path::Path, source: notify_debouncer_mini::notify::Error) -> Self {
        Self {
            path: path.display().to_string(),
            source,
        }
    }

    /// The path watched (the policy file's directory).
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl fmt::Display for WatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: cannot watch for changes: {}", self.path, self.source)
    }
}

impl std::error::Error for WatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The field that names `storage` in a file (`None` for memory).
pub(crate) fn storage_field(storage: &Storage) -> Option<&'static str> {
    match storage {
        Storage::Memory => None,
        Storage::Redis(_) => Some("tollgate.redis_url"),
        Storage::RedisCluster(_) => Some("tollgate.redis_cluster"),
        Storage::RedisSentinel { .. } => Some("tollgate.redis_sentinel"),
    }
}
