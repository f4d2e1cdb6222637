//! The three file formats and how a file name selects one.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// The format of a policy file. All three describe the same schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// YAML (`.yaml`, `.yml`).
    Yaml,
    /// TOML (`.toml`).
    Toml,
    /// JSON (`.json`).
    Json,
}

impl Format {
    /// All formats.
    pub const ALL: [Format; 3] = [Format::Yaml, Format::Toml, Format::Json];

    /// The format a file name's extension selects (case-insensitive):
    /// `.yaml` or `.yml`, `.toml`, `.json`; `None` for anything else.
    ///
    /// ```
    /// use tollgate_config::Format;
    ///
    /// assert_eq!(Format::from_path("conf/policies.yml"), Some(Format::Yaml));
    /// assert_eq!(Format::from_path("policies.ini"), None);
    /// ```
    pub fn from_path(path: impl AsRef<Path>) -> Option<Format> {
        let extension = path.as_ref().extension()?.to_str()?;
        extension.parse().ok()
    }

    /// The lowercase name: `yaml`, `toml` or `json`.
    pub const fn name(self) -> &'static str {
        match self {
            Format::Yaml => "yaml",
            Format::Toml => "toml",
            Format::Json => "json",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error returned when a format name is not recognised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownFormat(pub String);

impl fmt::Display for UnknownFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown policy file format {:?}: expected yaml, yml, toml or json",
            self.0
        )
    }
}

impl std::error::Error for UnknownFormat {}

impl FromStr for Format {
    type Err = UnknownFormat;

    /// Parses `yaml`, `yml`, `toml` or `json`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "yaml" | "yml" => Ok(Format::Yaml),
            "toml" => Ok(Format::Toml),
            "json" => Ok(Format::Json),
            _ => Err(UnknownFormat(s.to_owned())),
        }
    }
}
