//! Reading a file's text in its format into the schema, with every error
//! located: the line and column from the format's parser, the field path
//! from `serde_path_to_error`.

use std::fmt::Write as _;

use serde::Deserialize;
use serde_path_to_error::{Path, Segment, Track};
use serde_saphyr::MessageFormatter as _;

use crate::error::ConfigFileError;
use crate::format::Format;
use crate::schema::{Root, Section};

/// Parses and validates `text` as the `tollgate` section of a file named
/// `file`.
pub(crate) fn parse(text: &str, format: Format, file: &str) -> Result<Section, ConfigFileError> {
    let root = match format {
        Format::Yaml => yaml(text, file),
        Format::Toml => toml(text, file),
        Format::Json => json(text, file),
    }?;
    Ok(root.tollgate)
}

fn yaml(text: &str, file: &str) -> Result<Root, ConfigFileError> {
    let mut track = Track::new();
    // Repeated keys reach the schema, which reports them like JSON's.
    let mut options = serde_saphyr::Options::default();
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::PassThrough;
    serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        Root::deserialize(serde_path_to_error::Deserializer::new(de, &mut track))
    })
    .map_err(|err| {
        let position = err
            .location()
            .filter(|at| at.line() > 0)
            .map(|at| (at.line() as usize, at.column().max(1) as usize));
        let message = serde_saphyr::UserMessageFormatter.format_message(&err);
        ConfigFileError::invalid(file, position, field_path(&track.path()), message.into_owned())
    })
}

fn toml(text: &str, file: &str) -> Result<Root, ConfigFileError> {
    let located = |err: toml::de::Error, field: String| {
        let position = err.span().map(|span| line_column(text, span.start));
        ConfigFileError::invalid(file, position, field, err.message().to_owned())
    };
    let de = toml::de::Deserializer::parse(text).map_err(|err| located(err, String::new()))?;
    let mut track = Track::new();
    Root::deserialize(serde_path_to_error::Deserializer::new(de, &mut track))
        .map_err(|err| located(err, field_path(&track.path())))
}

fn json(text: &str, file: &str) -> Result<Root, ConfigFileError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut track = Track::new();
    let root = Root::deserialize(serde_path_to_error::Deserializer::new(&mut de, &mut track))
        .map_err(|err| json_error(file, err, field_path(&track.path())))?;
    de.end().map_err(|err| json_error(file, err, String::new()))?;
    Ok(root)
}

fn json_error(file: &str, err: serde_json::Error, field: String) -> ConfigFileError {
    let position = (err.line() > 0).then(|| (err.line(), err.column().max(1)));
    // serde_json appends the position to the message; it is reported apart.
    let message = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    let message = message.strip_suffix(&suffix).unwrap_or(&message).to_owned();
    ConfigFileError::invalid(file, position, field, message)
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

/// `tollgate.resources.login.window`; keys that are empty or hold
/// separators are quoted (`tollgate.resources.""`), list items indexed
/// (`tollgate.redis_cluster[1]`).
fn field_path(path: &Path) -> String {
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => {
                let _ = write!(out, "[{index}]");
            }
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                let plain =
                    !key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-');
                if plain {
                    out.push_str(key);
                } else {
                    let _ = write!(out, "{key:?}");
                }
            }
            Segment::Unknown => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_columns() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 4), (1, 5));
        assert_eq!(line_column(text, 6), (2, 1));
        assert_eq!(line_column(text, 10), (2, 4));
        assert_eq!(line_column(text, text.len()), (3, 1));
    }
}
