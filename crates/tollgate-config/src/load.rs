//! Reading a file's text in its format into the schema, with every error
//! located: the line and column from the format's parser, the field path
//! from `serde_path_to_error`.

use std::fmt::Write as _;
use std::io::Read;

use serde::Deserialize;
use serde_path_to_error::{Path, Segment, Track};
use serde_saphyr::MessageFormatter as _;

use crate::env;
use crate::error::ConfigFileError;
use crate::format::Format;
use crate::schema::{Root, Section};
use crate::values::limit_too_large;

/// The deepest nesting of maps and lists a YAML file may have: the same as
/// the TOML reader's fixed limit. The schema itself needs five levels.
const MAX_YAML_DEPTH: usize = 80;

/// The most nodes (maps, lists and values) a YAML file may hold: room for
/// tens of thousands of resources, and a bound on the work a file causes.
const MAX_YAML_NODES: usize = 250_000;

/// The deepest nesting the TOML reader accepts (fixed in the `toml` crate).
const MAX_TOML_DEPTH: usize = 80;

/// The deepest nesting the JSON reader accepts (fixed in `serde_json`).
const MAX_JSON_DEPTH: usize = 128;

/// The most bytes a policy file may hold: 16 MiB, room for hundreds of
/// thousands of resources. Only this much (and one byte more, to tell) is
/// read, so a huge or endless file (`/dev/zero`, a pipe that never ends)
/// fails at once instead of filling the memory.
pub(crate) const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The bytes of the file at `path`, named `file` in errors: at most
/// [`MAX_FILE_BYTES`], or an error naming the file and the limit.
///
/// Only a regular file is read (after following links): a FIFO, a device
/// or a socket could block the reader for ever or never end. The check is
/// made on the opened file, which is opened without blocking, so a file
/// replaced between a look and the open cannot slip through.
pub(crate) fn read(path: &std::path::Path, file: &str) -> Result<Vec<u8>, ConfigFileError> {
    let input = open_regular(path, file)?;
    read_at_most(input, MAX_FILE_BYTES, file)
}

/// `path` opened for reading, if it is a regular file.
fn open_regular(path: &std::path::Path, file: &str) -> Result<std::fs::File, ConfigFileError> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    // Opening a FIFO for reading waits for a writer unless non-blocking;
    // the flag changes nothing for a regular file.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let input = options.open(path).map_err(|err| ConfigFileError::io(file, err))?;
    let kind = input
        .metadata()
        .map_err(|err| ConfigFileError::io(file, err))?
        .file_type();
    if !kind.is_file() {
        return Err(ConfigFileError::not_regular(file, file_kind(kind)));
    }
    Ok(input)
}

/// What a file that is not a regular file is, in words.
fn file_kind(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
    }
    "a special file"
}

/// All of `input` if it holds at most `max` bytes, reading at most `max + 1`.
fn read_at_most(input: impl Read, max: u64, file: &str) -> Result<Vec<u8>, ConfigFileError> {
    let mut bytes = Vec::new();
    input
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|err| ConfigFileError::io(file, err))?;
    if bytes.len() as u64 > max {
        const MIB: u64 = 1024 * 1024;
        let size = if max >= MIB && max.is_multiple_of(MIB) {
            format!("{} MiB ({max} bytes)", max / MIB)
        } else {
            format!("{max} bytes")
        };
        return Err(ConfigFileError::invalid(
            file,
            None,
            String::new(),
            format!("the file is larger than {size}, the most a configuration file may hold"),
        ));
    }
    Ok(bytes)
}

/// The text of a file read as bytes: UTF-8, or an error at the line and
/// column of the first byte that is not.
pub(crate) fn decode<'a>(bytes: &'a [u8], file: &str) -> Result<&'a str, ConfigFileError> {
    std::str::from_utf8(bytes).map_err(|err| {
        let offset = err.valid_up_to();
        // Everything before `offset` is valid UTF-8.
        let before = std::str::from_utf8(&bytes[..offset]).unwrap_or_default();
        let (line, column) = line_column(before, offset);
        ConfigFileError::invalid(
            file,
            Some((line, column)),
            String::new(),
            format!(
                "the file is not UTF-8 text: byte 0x{:02X} at line {line}, column {column} (byte \
                 offset {offset}) is not valid UTF-8; save the file as UTF-8",
                bytes[offset]
            ),
        )
    })
}

/// Parses and validates `text` as the `tollgate` section of a file named
/// `file`. A leading byte-order mark is skipped in every format.
pub(crate) fn parse(text: &str, format: Format, file: &str) -> Result<Section, ConfigFileError> {
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
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
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_YAML_DEPTH;
    budget.flow_nesting_limit = MAX_YAML_DEPTH;
    budget.max_nodes = MAX_YAML_NODES;
    options.budget = Some(budget.clone());
    // `${VAR}` holds braces, which are syntax in flow maps and lists.
    let text = env::shield_braces(text);
    serde_saphyr::with_deserializer_from_str_with_options(&text, options, |de| {
        Root::deserialize(serde_path_to_error::Deserializer::new(de, &mut track))
    })
    .map_err(|err| {
        let position = err
            .location()
            .filter(|at| at.line() > 0)
            .map(|at| (at.line() as usize, at.column().max(1) as usize));
        let message = match err.without_snippet() {
            serde_saphyr::Error::Budget { breach, .. } => yaml_budget_message(breach, &budget, position),
            _ => {
                let message = serde_saphyr::UserMessageFormatter.format_message(&err);
                if message == "recursion limit exceeded" {
                    too_deep(budget.flow_nesting_limit, position)
                } else {
                    env::unshield_braces(&message).into_owned()
                }
            }
        };
        let field = field_path(&track.path());
        ConfigFileError::invalid(file, position, env::unshield_braces(&field).into_owned(), message)
    })
}

/// A YAML size limit, in words, with the limit from `budget`.
fn yaml_budget_message(
    breach: &serde_saphyr::budget::BudgetBreach,
    budget: &serde_saphyr::Budget,
    position: Option<(usize, usize)>,
) -> String {
    use serde_saphyr::budget::BudgetBreach;
    match breach {
        BudgetBreach::Depth { .. } => too_deep(budget.max_depth, position),
        BudgetBreach::Nodes { .. } => format!(
            "the file has more than {} nodes (maps, lists and values); a policy file needs a few \
             per resource",
            budget.max_nodes
        ),
        BudgetBreach::Events { .. } => {
            format!(
                "the file is too large: more than {} parser events",
                budget.max_events
            )
        }
        BudgetBreach::Aliases { .. } => {
            format!("the file uses more than {} aliases (`*name`)", budget.max_aliases)
        }
        BudgetBreach::Anchors { .. } => {
            format!(
                "the file defines more than {} anchors (`&name`)",
                budget.max_anchors
            )
        }
        BudgetBreach::Documents { .. } => format!(
            "the file holds more than {} YAML documents; a policy file is one document",
            budget.max_documents
        ),
        BudgetBreach::ScalarBytes { .. } => format!(
            "the file's values add up to more than {} bytes",
            budget.max_total_scalar_bytes
        ),
        BudgetBreach::AliasAnchorRatio { aliases, anchors } => {
            format!("the file repeats its {anchors} anchors through {aliases} aliases, too many to expand")
        }
        _ => "the file is too large or too complex to read".to_owned(),
    }
}

/// Nesting beyond `max` levels, at the line where the reader stopped.
fn too_deep(max: usize, position: Option<(usize, usize)>) -> String {
    match position {
        Some((line, _)) => format!("nesting deeper than {max} levels at line {line}"),
        None => format!("nesting deeper than {max} levels"),
    }
}

/// For a syntax error on a line with an unquoted `${VAR}`: the hint that
/// TOML and JSON need it quoted.
fn quoting_hint(text: &str, line: Option<usize>) -> &'static str {
    let unquoted = line
        .and_then(|line| text.lines().nth(line - 1))
        .and_then(|line| line.find("${").map(|at| &line[..at]))
        .is_some_and(|before| !before.ends_with(['"', '\'']) && before.matches('"').count() % 2 == 0);
    if unquoted {
        "; an environment reference is text: write it in quotes, as \"${VAR}\""
    } else {
        ""
    }
}

fn toml(text: &str, file: &str) -> Result<Root, ConfigFileError> {
    let located = |err: toml::de::Error, field: String| {
        let position = err.span().map(|span| line_column(text, span.start));
        let message = match err.message() {
            "cannot recurse further; max recursion depth met" => too_deep(MAX_TOML_DEPTH, position),
            "integer number overflowed" if field == "limit" || field.ends_with(".limit") => limit_too_large(),
            message if field.is_empty() => {
                format!("{message}{}", quoting_hint(text, position.map(|(line, _)| line)))
            }
            message => message.to_owned(),
        };
        ConfigFileError::invalid(file, position, field, message)
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
        .map_err(|err| json_error(text, file, err, field_path(&track.path())))?;
    de.end()
        .map_err(|err| json_error(text, file, err, String::new()))?;
    Ok(root)
}

fn json_error(text: &str, file: &str, err: serde_json::Error, field: String) -> ConfigFileError {
    let position = (err.line() > 0).then(|| (err.line(), err.column().max(1)));
    // serde_json appends the position to the message; it is reported apart.
    let message = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    let message = message.strip_suffix(&suffix).unwrap_or(&message);
    let message = match message {
        "recursion limit exceeded" => too_deep(MAX_JSON_DEPTH, position),
        message if err.is_syntax() => {
            format!("{message}{}", quoting_hint(text, position.map(|(line, _)| line)))
        }
        message => message.to_owned(),
    };
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
pub(crate) fn field_path(path: &Path) -> String {
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
    use std::io;

    use super::*;
    use crate::error::ErrorKind;

    /// A reader of endless zeros that counts the bytes it hands out.
    struct Counted(u64);

    impl Read for Counted {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            buf.fill(0);
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
    }

    #[test]
    fn a_file_over_the_limit_is_refused_after_reading_one_byte_more() {
        let mut input = Counted(0);
        let err = read_at_most(&mut input, 1000, "big.yaml").unwrap_err();
        assert_eq!(input.0, 1001);
        assert_eq!(err.kind(), ErrorKind::Invalid);
        assert_eq!(
            err.to_string(),
            "big.yaml: the file is larger than 1000 bytes, the most a configuration file may hold"
        );
        assert_eq!(
            read_at_most(&[7u8; 1000][..], 1000, "f.yaml").unwrap().len(),
            1000
        );
        assert!(read_at_most(&[7u8; 1001][..], 1000, "f.yaml").is_err());
    }

    #[test]
    fn an_endless_device_is_refused_before_anything_is_read() {
        let err = read(std::path::Path::new("/dev/zero"), "/dev/zero").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        assert_eq!(
            err.to_string(),
            "/dev/zero: cannot read the file: it is a character device, not a regular file; a \
             configuration file must be a regular file (a link to one is fine)"
        );
    }

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
