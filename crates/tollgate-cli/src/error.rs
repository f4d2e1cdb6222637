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
    /// The policy file is invalid or unreadable (the message names the
    /// file, line and field).
    #[error(transparent)]
    Config(#[from] tollgate_config::ConfigFileError),
    /// `serve`: the service could not start or stopped with an error.
    #[error(transparent)]
    Serve(#[from] tollgate_server::ServerError),
    /// The limiter could not be built.
    #[error("cannot build the limiter: {0}")]
    Limiter(#[from] tollgate::Error),
    /// A policy of the policy file that the backend cannot serve, named by
    /// the file and the policy's field.
    #[error("{file}: {}: {}", error.field(), error.reason())]
    Policy {
        /// The policy file.
        file: String,
        /// What is wrong, the field its path in the file.
        error: tollgate::ConfigError,
    },
    /// `--decisions` with `--strategy all` names neither a directory nor a
    /// file the strategy name can be added to.
    #[error("invalid --decisions {}: neither an existing directory nor a file name", path.display())]
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
    /// `--backend redis`: the server at `--redis-url` cannot be used.
    #[error("--redis-url {url}: {source}")]
    RedisConnect {
        /// The URL given, without its password.
        url: String,
        /// What went wrong, naming the address and the problem.
        source: tollgate_redis::ConnectError,
    },
    /// `--backend redis`: the second connection, used to delete the run's
    /// keys, failed.
    #[error("--redis-url {url}: cannot open a connection for deleting the replay's keys: {source}")]
    RedisAdmin {
        /// The URL given, without its password.
        url: String,
        /// The client's error.
        source: tollgate_redis::redis::RedisError,
    },
    /// `--backend redis`: a decision failed on the server.
    #[error("Redis failed to decide the request on line {line}: {source}")]
    RedisDecision {
        /// The trace line of the request.
        line: u64,
        /// The backend's error.
        source: tollgate::Error,
    },
    /// `--backend redis`: the run's keys could not all be deleted.
    #[error("cannot delete the replay's keys ({pattern}) from Redis: {source}; delete them with redis-cli --scan --pattern '{pattern}' | xargs redis-cli del")]
    RedisCleanup {
        /// The `SCAN` pattern matching the keys left behind.
        pattern: String,
        /// The client's error.
        source: tollgate_redis::redis::RedisError,
    },
    /// `--backend postgres`: the database at `--postgres-url` cannot be
    /// used.
    #[error("--postgres-url: {}", postgres_reason(source))]
    PostgresConnect {
        /// What went wrong, naming the setting and what to do.
        source: tollgate_postgres::PostgresError,
    },
    /// `--backend postgres`: a decision failed on the database.
    #[error("PostgreSQL failed to decide the request on line {line}: {source}")]
    PostgresDecision {
        /// The trace line of the request.
        line: u64,
        /// The backend's error.
        source: tollgate::Error,
    },
    /// `--backend postgres`: the run's schema could not be dropped.
    #[error("cannot drop the replay's schema {schema} from PostgreSQL: {reason}; drop it with psql -c 'DROP SCHEMA {schema} CASCADE'")]
    PostgresCleanup {
        /// The schema left behind.
        schema: String,
        /// The client's error.
        reason: String,
    },
    /// The async runtime (or the Ctrl-C handler) could not be set up.
    #[error("cannot start the async runtime: {0}")]
    Runtime(io::Error),
    /// Ctrl-C stopped the replay.
    #[error("interrupted")]
    Interrupted,
    /// The `--plot` chart could not be written.
    #[error("cannot write plot {}: {source}", path.display())]
    Plot {
        /// The chart's path.
        path: PathBuf,
        /// What went wrong.
        source: crate::plot::PlotError,
    },
    /// Standard output could not be written: the summary, a check's
    /// report or a completion script.
    #[error("cannot write to standard output: {0}")]
    Stdout(io::Error),
}

/// A PostgreSQL backend's error as `simulate` shows it: the URL's own
/// problems without the setting's name (the flag names it), any other
/// setting named.
fn postgres_reason(err: &tollgate_postgres::PostgresError) -> String {
    if err.setting() == "postgres_url" {
        err.message().to_owned()
    } else {
        err.to_string()
    }
}
