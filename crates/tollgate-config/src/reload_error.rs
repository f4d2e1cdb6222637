//! Why a [`PolicySetWatcher`](crate::PolicySetWatcher) kept the policies it had:
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
    /// Changes can no longer be watched (events were lost, or the
    /// directory went away): [`reload_blocking`](crate::PolicyWatcher::reload_blocking)
    /// still applies the file on demand.
    #[cfg(feature = "watch")]
    Watch(crate::watch_error::WatchError),
}

impl ReloadError {
    /// The file the error is about, as it was given (the path that could
    /// not be watched, for [`ReloadError::Watch`]).
    pub fn file(&self) -> &str {
        match self {
            ReloadError::File(err) => err.file(),
            ReloadError::StorageChanged { file, .. } => file,
            #[cfg(feature = "watch")]
            ReloadError::Watch(err) => err.path(),
        }
    }

    /// The line (1-based) of the mistake, when known.
    pub fn line(&self) -> Option<usize> {
        match self {
            ReloadError::File(err) => err.line(),
            _ => None,
        }
    }

    /// The path of the offending field (`tollgate.resources.login.window`,
    /// `descriptors[1].rate_limit.unit`), empty when the problem is not
    /// about one field.
    pub fn field(&self) -> &str {
        match self {
            ReloadError::File(err) => err.field(),
            ReloadError::StorageChanged { field, .. } => field,
            #[cfg(feature = "watch")]
            ReloadError::Watch(_) => "",
        }
    }
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
            #[cfg(feature = "watch")]
            ReloadError::Watch(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for ReloadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReloadError::File(err) => Some(err),
            #[cfg(feature = "watch")]
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
