//! Reading the files of a [`PolicySet`](crate::PolicySet): each is read
//! once, as [`read_config_file`](crate::read_config_file) reads (a regular
//! file, at most 16 MiB), and is a tollgate policy file or an Envoy file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::envoy::EnvoyFile;
use crate::error::ConfigFileError;
use crate::format::Format;
use crate::load;
use crate::policy_file::PolicyFile;

/// How long reading and parsing the files may take before a load gives
/// up: a file on a hung network mount must not hold a reload (or the
/// start) for ever.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// One file of a set as read: its path and its bytes.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Read {
    pub(crate) path: PathBuf,
    pub(crate) bytes: Vec<u8>,
}

/// A configuration file of either kind, as `tollgate serve --config` reads
/// it: an Envoy rate-limit file when its top level has `domain`, a tollgate
/// policy file otherwise.
#[derive(Debug)]
pub enum ConfigFile {
    /// A tollgate policy file.
    Policy(Box<PolicyFile>),
    /// An Envoy rate-limit configuration (envoyproxy/ratelimit's format).
    Envoy(EnvoyFile),
}

impl ConfigFile {
    /// Reads and parses the file at `path` (blocking file I/O), telling
    /// the two kinds apart as [`PolicySet::load`](crate::PolicySet::load)
    /// does.
    ///
    /// # Errors
    ///
    /// A [`ConfigFileError`] naming the file, and where known the line and
    /// field, of the first mistake.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigFileError> {
        let path = path.as_ref().to_owned();
        let read = read_all(std::slice::from_ref(&path))?;
        parse(&read[0])
    }
}

/// The top-level key that marks an Envoy file.
#[derive(Deserialize)]
struct Probe {
    domain: Option<serde::de::IgnoredAny>,
}

/// Reads every file (blocking file I/O: call from a thread that may block).
pub(crate) fn read_all(paths: &[PathBuf]) -> Result<Vec<Read>, ConfigFileError> {
    paths
        .iter()
        .map(|path| {
            let origin = path.display().to_string();
            Ok(Read {
                path: path.clone(),
                bytes: load::read(path, &origin)?,
            })
        })
        .collect()
}

/// Parses a file read: an Envoy file when its top level has `domain`, a
/// tollgate policy file otherwise.
pub(crate) fn parse(read: &Read) -> Result<ConfigFile, ConfigFileError> {
    let path: &Path = &read.path;
    let origin = path.display().to_string();
    let format = Format::from_path(path);
    let text = load::decode(&read.bytes, &origin)?;
    if format != Some(Format::Toml) && is_envoy(text) {
        return EnvoyFile::parse(text, &origin).map(ConfigFile::Envoy);
    }
    // Not an Envoy file, and no policy file format: the error names the
    // extensions a policy file may have.
    let format = format.ok_or_else(|| ConfigFileError::unknown_format(&origin))?;
    PolicyFile::from_str(text, format, &origin).map(|file| ConfigFile::Policy(Box::new(file)))
}

/// Whether `text` is an Envoy file: its top level has `domain`. A file
/// the probe cannot read (a duplicate key, too deep, an alias bomb) is one
/// when a line starts with a `domain` key, so that the Envoy parser reports
/// the mistake rather than the policy file parser an unknown field.
fn is_envoy(text: &str) -> bool {
    match serde_saphyr::from_str::<Probe>(text) {
        Ok(probe) => probe.domain.is_some(),
        Err(_) => text.lines().any(|line| {
            let line = line.strip_prefix('\u{FEFF}').unwrap_or(line);
            ["domain", "\"domain\"", "'domain'"].iter().any(|key| {
                line.strip_prefix(key)
                    .is_some_and(|rest| rest.trim_start().starts_with(':'))
            })
        }),
    }
}

/// Reads every file on a blocking thread, off the runtime that serves
/// requests, within [`READ_TIMEOUT`].
pub(crate) async fn read_off_runtime(paths: Vec<PathBuf>) -> Result<Vec<Read>, ConfigFileError> {
    let first = paths.first().map(|f| f.display().to_string()).unwrap_or_default();
    let work = tokio::task::spawn_blocking(move || read_all(&paths));
    match tokio::time::timeout(READ_TIMEOUT, work).await {
        Ok(Ok(read)) => read,
        Ok(Err(join)) => Err(ConfigFileError::at(
            &first,
            None,
            "",
            format!("reading the configuration failed: {join}"),
        )),
        Err(_) => Err(ConfigFileError::at(
            &first,
            None,
            "",
            format!(
                "reading the configuration files took longer than {} s; is one of them on a mount \
                 that does not answer?",
                READ_TIMEOUT.as_secs()
            ),
        )),
    }
}
