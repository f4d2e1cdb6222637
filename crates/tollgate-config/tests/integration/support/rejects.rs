//! The check every test of a mistake makes: the file is refused with the
//! error at the expected line and field, displayed in the documented form.

use tollgate_config::{ConfigFileError, ErrorKind, Format, PolicyFile};

/// Parses `text`, expects an error at `line` about `field` whose message
/// contains `message`, and checks how it displays.
#[track_caller]
pub fn rejects(format: Format, text: &str, line: usize, field: &str, message: &str) -> ConfigFileError {
    let origin = format!("policies.{format}");
    let err = match PolicyFile::from_str(text, format, &origin) {
        Ok(file) => panic!("accepted {format}:\n{text}\nas {file:?}"),
        Err(err) => err,
    };
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    assert_eq!(err.file(), origin);
    assert_eq!((err.line(), err.field()), (Some(line), field), "{format}: {err}");
    assert!(err.column().is_some_and(|c| c >= 1), "{err}");
    assert!(
        err.message().contains(message),
        "{format}: {err}\nexpected: {message}"
    );
    let prefix = if field.is_empty() {
        format!("{origin}:{line}: ")
    } else {
        format!("{origin}:{line}: {field}: ")
    };
    let shown = err.to_string();
    assert_eq!(shown, format!("{prefix}{}", err.message()));
    err
}
