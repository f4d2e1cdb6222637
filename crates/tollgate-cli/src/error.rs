//! Everything the command can fail with; each message is printed after
//! `error: ` on standard error.

use std::io;
use std::path::PathBuf;

use crate::trace::TraceError;

/// A failure of the `tollgate` command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A flag value the policy rejects.
    #[error("invalid --{flag} {value}: {reason}")]
    Flag {
        /// The flag's name without dashes.
        flag: String,
        /// The value given, as the user would write it.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The limiter could not be built.
    #[error("cannot build the limiter: {0}")]
    Limiter(#[from] tollgate::Error),
    /// `--decisions` does not name a file the strategy name can be added to.
    #[error("invalid --decisions {}: not a file name", path.display())]
    DecisionsPath {
        /// The path given.
        path: PathBuf,
    },
    /// A decisions file could not be written.
    #[error("cannot write decisions file {}: {source}", path.display())]
    Decisions {
        /// The file's final path.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The summary could not be written.
    #[error("cannot write to standard output: {0}")]
    Stdout(io::Error),
}
