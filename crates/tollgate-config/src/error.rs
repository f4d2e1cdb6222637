//! Errors: a mistake in a policy file, located by file, line, column and
//! field path; and the error of loading a file and building its limiter.

use std::fmt;

/// What kind of problem a [`ConfigFileError`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file could not be read.
    Io,
    /// The file name does not end in `.yaml`, `.yml`, `.toml` or `.json`.
    UnknownFormat,
    /// The content is not valid: text that is not UTF-8, malformed syntax,
    /// nesting or size beyond the readers' limits, an unknown or missing
    /// field, a value of the wrong type, an invalid value, or an unset
    /// environment variable.
    Invalid,
    /// The files are valid but cannot be served: a store that cannot be
    /// reached, a policy the store cannot hold.
    Unservable,
}

/// A mistake in a policy file.
///
/// Displays as `FILE:LINE: FIELD: MESSAGE`, for example
/// `policies.yaml:7: tollgate.resources.login.window: "1 mnute" is not a
/// duration (…)`; the line and the field are left out when they are unknown
/// or do not apply (a file that cannot be read, a syntax error before the
/// first field). The parts are also available one by one.
#[derive(Debug)]
pub struct ConfigFileError {
    kind: ErrorKind,
    file: String,
    line: Option<usize>,
    column: Option<usize>,
    field: String,
    message: String,
    source: Option<Box<Source>>,
}

/// The error behind a [`ConfigFileError`], boxed to keep the error small.
#[derive(Debug)]
enum Source {
    Io(std::io::Error),
    Core(tollgate::Error),
}

impl ConfigFileError {
    /// A content error at `line`/`column` (1-based), about `field`.
    pub(crate) fn invalid(
        file: &str,
        position: Option<(usize, usize)>,
        field: String,
        message: String,
    ) -> Self {
        Self {
            kind: ErrorKind::Invalid,
            file: file.to_owned(),
            line: position.map(|(line, _)| line),
            column: position.map(|(_, column)| column),
            field,
            message,
            source: None,
        }
        .explain_field_errors()
    }

    /// A content error at `line` (1-based; no column) about `field`,
    /// with `message` as it is.
    pub(crate) fn at(
        file: &str,
        line: Option<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind: ErrorKind::Invalid,
            file: file.to_owned(),
            line,
            column: None,
            field: field.into(),
            message: message.into(),
            source: None,
        }
    }

    /// A file that cannot be served, with the core's error: a
    /// configuration error names its field under `within` (such as
    /// `tollgate`, giving `tollgate.resources.login.limit`).
    pub(crate) fn unservable(file: &str, within: &str, err: tollgate::Error) -> Self {
        let (field, message) = match &err {
            // A field named from the file's root already (the store's).
            tollgate::Error::Config(config) if config.field().starts_with(&format!("{within}.")) => {
                (config.field().to_owned(), config.reason().to_owned())
            }
            tollgate::Error::Config(config) => {
                let config = config.clone().within(within);
                (config.field().to_owned(), config.reason().to_owned())
            }
            other => (String::new(), format!("cannot build the limiters: {other}")),
        };
        Self {
            kind: ErrorKind::Unservable,
            file: file.to_owned(),
            line: None,
            column: None,
            field,
            message,
            source: Some(Box::new(Source::Core(err))),
        }
    }

    pub(crate) fn io(file: &str, err: std::io::Error) -> Self {
        Self {
            kind: ErrorKind::Io,
            file: file.to_owned(),
            line: None,
            column: None,
            field: String::new(),
            message: format!("cannot read the file: {err}"),
            source: Some(Box::new(Source::Io(err))),
        }
    }

    /// The file is not a regular file; `kind` says what it is.
    pub(crate) fn not_regular(file: &str, kind: &str) -> Self {
        Self {
            kind: ErrorKind::Io,
            file: file.to_owned(),
            line: None,
            column: None,
            field: String::new(),
            message: format!(
                "cannot read the file: it is {kind}, not a regular file; a configuration file must be \
                 a regular file (a link to one is fine)"
            ),
            source: None,
        }
    }

    pub(crate) fn unknown_format(file: &str) -> Self {
        Self {
            kind: ErrorKind::UnknownFormat,
            file: file.to_owned(),
            line: None,
            column: None,
            field: String::new(),
            message: "unknown policy file format: the name must end in .yaml, .yml, .toml or .json"
                .to_owned(),
            source: None,
        }
    }

    /// Turns serde's "missing field `x`" and "duplicate field `x`" at
    /// `path` into `path.x: is required` and `path.x: is given twice`.
    fn explain_field_errors(mut self) -> Self {
        let named = |prefix: &str| {
            self.message
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix('`'))
                .map(str::to_owned)
        };
        // An element of `limits` is one limit; a policy may be a list instead.
        let in_list = self.field.ends_with(']');
        let (name, message) = if let Some(name) = named("missing field `") {
            let message = match name.as_str() {
                "tollgate" => "is required: every setting lives under a top-level `tollgate` key",
                "default" => "is required: the policy of every resource without its own",
                "limit" | "window" if !in_list => {
                    "is required: a policy gives `limit` and `window` or `calendar` (and \
                     optionally `strategy`), or `limits`, a list of such limits"
                }
                _ => "is required",
            };
            (name, message)
        } else if let Some(name) = named("duplicate field `") {
            (name, "is given twice")
        } else {
            return self;
        };
        if !self.field.is_empty() {
            self.field.push('.');
        }
        self.field.push_str(&name);
        self.message = message.to_owned();
        self
    }

    /// What kind of problem this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The file, as given to [`PolicyFile::load`](crate::PolicyFile::load)
    /// (or the origin name given to
    /// [`PolicyFile::from_str`](crate::PolicyFile::from_str)).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The line (1-based), when the format's parser reports one.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The column (1-based; characters for YAML and TOML, bytes for JSON),
    /// when the format's parser reports one. YAML and TOML point at the
    /// start of the offending key or value, JSON just after it. For a byte
    /// that is not UTF-8, the column counts the characters before it on its
    /// line, in every format (the message adds its byte offset).
    pub fn column(&self) -> Option<usize> {
        self.column
    }

    /// The path of the offending field, such as `tollgate.resources.login.window`;
    /// empty when the problem is not about one field (an unreadable file, a
    /// syntax error at the top level).
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong, without the location.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_located(f, &self.file, self.line, &self.field, &self.message)
    }
}

/// Writes a mistake in a file as `FILE:LINE: FIELD: MESSAGE`, the way a
/// [`ConfigFileError`] displays: without `:LINE` when the line is unknown,
/// without `: FIELD` when the field is empty.
pub(crate) fn write_located(
    f: &mut fmt::Formatter<'_>,
    file: &str,
    line: Option<usize>,
    field: &str,
    message: &str,
) -> fmt::Result {
    f.write_str(file)?;
    if let Some(line) = line {
        write!(f, ":{line}")?;
    }
    if !field.is_empty() {
        write!(f, ": {field}")?;
    }
    write!(f, ": {message}")
}

impl std::error::Error for ConfigFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.source.as_deref()? {
            Source::Io(err) => Some(err),
            Source::Core(err) => Some(err),
        }
    }
}

/// The error of [`load_limiters`](crate::load_limiters): the file is wrong, or
/// its limiter could not be built (an unreachable Redis, a policy the
/// backend cannot serve); for a [`PolicyWatcher`](crate::PolicyWatcher),
/// also a directory that cannot be watched.
#[derive(Debug)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read, parsed or validated.
    File(ConfigFileError),
    /// The limiter could not be built.
    Build(tollgate::Error),
    /// The file's directory could not be watched.
    #[cfg(feature = "watch")]
    Watch(crate::WatchError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::File(err) => err.fmt(f),
            LoadError::Build(err) => err.fmt(f),
            #[cfg(feature = "watch")]
            LoadError::Watch(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::File(err) => err.source(),
            LoadError::Build(err) => err.source(),
            #[cfg(feature = "watch")]
            LoadError::Watch(err) => err.source(),
        }
    }
}

impl From<ConfigFileError> for LoadError {
    fn from(err: ConfigFileError) -> Self {
        LoadError::File(err)
    }
}

impl From<tollgate::Error> for LoadError {
    fn from(err: tollgate::Error) -> Self {
        LoadError::Build(err)
    }
}

#[cfg(feature = "watch")]
impl From<crate::WatchError> for LoadError {
    fn from(err: crate::WatchError) -> Self {
        LoadError::Watch(err)
    }
}
