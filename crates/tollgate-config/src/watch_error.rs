//! [`WatchError`]: the file system watcher failed.

use std::fmt;

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
