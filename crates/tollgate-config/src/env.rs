//! `${VAR}` and `${VAR:-default}` in string values, so that secrets and
//! per-environment settings stay out of the file.

use std::borrow::Cow;
use std::env::VarError;
use std::fmt;

/// Why a string value could not be expanded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EnvError {
    /// `${NAME}` without a default, and `NAME` is not set.
    Unset(String),
    /// `NAME` is set but its value is not valid Unicode.
    NotUnicode(String),
    /// `${` without a closing `}`.
    Unterminated,
    /// What stands between `${` and `}` is not a variable name.
    BadName(String),
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvError::Unset(name) => write!(
                f,
                "environment variable {name} is not set (write ${{{name}:-default}} to give a default)"
            ),
            EnvError::NotUnicode(name) => write!(f, "environment variable {name} is not valid Unicode"),
            EnvError::Unterminated => {
                f.write_str("`${` without a closing `}` (write `$$` for a literal `$`)")
            }
            EnvError::BadName(name) => write!(
                f,
                "`${{{name}}}` does not name an environment variable (letters, digits and `_`, \
                 not starting with a digit; a default follows `:-`)"
            ),
        }
    }
}

/// Expands `${VAR}`, `${VAR:-default}` and `$$` from the process environment.
///
/// The braces of references shielded by [`shield_braces`] count as braces.
pub(crate) fn expand(text: &str) -> Result<Cow<'_, str>, EnvError> {
    match unshield_braces(text) {
        Cow::Borrowed(text) => expand_with(text, |name| std::env::var(name)),
        Cow::Owned(text) => {
            expand_with(&text, |name| std::env::var(name)).map(|value| Cow::Owned(value.into_owned()))
        }
    }
}

/// Stand-ins for the braces of `${…}` while YAML is parsed: Unicode
/// noncharacters, reserved for a program's internal use, which YAML allows
/// in plain scalars and never treats as syntax.
const OPEN: char = '\u{FDD0}';
const CLOSE: char = '\u{FDD1}';

/// Replaces the braces of every `${…}` in YAML text with stand-ins, so that
/// a reference stays one plain scalar where braces are flow syntax
/// (`default: { limit: ${LIMIT}, window: 1m }`). One character replaces
/// one, so lines and columns do not move. Text that already holds a
/// stand-in is returned as it is.
pub(crate) fn shield_braces(text: &str) -> Cow<'_, str> {
    if !text.contains("${") || text.contains([OPEN, CLOSE]) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..=start]);
        let body = &rest[start + 2..];
        match body.find(['}', '{', '\n']) {
            Some(end) if body[end..].starts_with('}') => {
                out.push(OPEN);
                out.push_str(&body[..end]);
                out.push(CLOSE);
                rest = &body[end + 1..];
            }
            _ => {
                out.push('{');
                rest = body;
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Undoes [`shield_braces`] in a value or a message.
pub(crate) fn unshield_braces(text: &str) -> Cow<'_, str> {
    if text.contains([OPEN, CLOSE]) {
        Cow::Owned(text.replace(OPEN, "{").replace(CLOSE, "}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// Expands `text` with `lookup` as the environment.
///
/// - `${VAR}` is the value of `VAR` (empty if set to the empty string); an
///   unset `VAR` is an error.
/// - `${VAR:-default}` is the value of `VAR` when it is set and not empty,
///   otherwise `default` (taken literally, up to the first `}`).
/// - `$$` is a literal `$`; any other `$` is kept as it is.
///
/// Values are inserted as they are: they are not expanded again.
pub(crate) fn expand_with(
    text: &str,
    lookup: impl Fn(&str) -> Result<String, VarError>,
) -> Result<Cow<'_, str>, EnvError> {
    if !text.contains('$') {
        return Ok(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body.find('}').ok_or(EnvError::Unterminated)?;
            out.push_str(&substitute(&body[..end], &lookup)?);
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(Cow::Owned(out))
}

/// The value of one `${…}` body: `NAME` or `NAME:-default`.
fn substitute(body: &str, lookup: &impl Fn(&str) -> Result<String, VarError>) -> Result<String, EnvError> {
    let (name, default) = match body.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (body, None),
    };
    if !is_variable_name(name) || default.is_some_and(|d| d.contains("${")) {
        return Err(EnvError::BadName(body.to_owned()));
    }
    match (lookup(name), default) {
        (Ok(value), Some(default)) if value.is_empty() => Ok(default.to_owned()),
        (Ok(value), _) => Ok(value),
        (Err(VarError::NotPresent), Some(default)) => Ok(default.to_owned()),
        (Err(VarError::NotPresent), None) => Err(EnvError::Unset(name.to_owned())),
        (Err(VarError::NotUnicode(_)), _) => Err(EnvError::NotUnicode(name.to_owned())),
    }
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Result<String, VarError> {
        match name {
            "HOST" => Ok("cache.internal".to_owned()),
            "EMPTY" => Ok(String::new()),
            "DOLLAR" => Ok("${HOST}".to_owned()),
            _ => Err(VarError::NotPresent),
        }
    }

    fn run(text: &str) -> Result<String, EnvError> {
        expand_with(text, env).map(Cow::into_owned)
    }

    #[test]
    fn variables_are_replaced() {
        assert_eq!(
            run("redis://${HOST}:6380").unwrap(),
            "redis://cache.internal:6380"
        );
        assert_eq!(run("${HOST}${HOST}").unwrap(), "cache.internalcache.internal");
        assert_eq!(run("${EMPTY}").unwrap(), "");
    }

    #[test]
    fn defaults_apply_when_unset_or_empty() {
        assert_eq!(run("${MISSING:-1m}").unwrap(), "1m");
        assert_eq!(run("${EMPTY:-1m}").unwrap(), "1m");
        assert_eq!(run("${HOST:-other}").unwrap(), "cache.internal");
        assert_eq!(run("${MISSING:-}").unwrap(), "");
        assert_eq!(run("${MISSING:-a:-b}").unwrap(), "a:-b");
    }

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(expand_with("1m", env), Ok(Cow::Borrowed("1m"))));
    }

    #[test]
    fn dollars_without_braces_stay() {
        assert_eq!(run("pa$word$").unwrap(), "pa$word$");
        assert_eq!(run("$${HOST}").unwrap(), "${HOST}");
        assert_eq!(run("$$$$").unwrap(), "$$");
    }

    #[test]
    fn values_are_not_expanded_again() {
        assert_eq!(run("${DOLLAR}").unwrap(), "${HOST}");
    }

    #[test]
    fn shielded_braces_keep_positions_and_come_back() {
        let text = "a: { limit: ${L}, window: ${W:-1m} }\nb: $${X} ${ c: ${Y";
        let shielded = shield_braces(text);
        assert!(!shielded.contains("${L}"), "{shielded}");
        assert_eq!(shielded.chars().count(), text.chars().count());
        assert_eq!(shielded.lines().count(), text.lines().count());
        assert_eq!(unshield_braces(&shielded), text);
        assert!(matches!(shield_braces("no references"), Cow::Borrowed(_)));
    }

    #[test]
    fn mistakes_are_errors() {
        assert_eq!(run("x${MISSING}"), Err(EnvError::Unset("MISSING".to_owned())));
        assert_eq!(run("${HOST"), Err(EnvError::Unterminated));
        assert_eq!(run("${}"), Err(EnvError::BadName(String::new())));
        assert_eq!(run("${1X}"), Err(EnvError::BadName("1X".to_owned())));
        assert_eq!(run("${A B}"), Err(EnvError::BadName("A B".to_owned())));
        assert_eq!(run("${A:-${B}}"), Err(EnvError::BadName("A:-${B".to_owned())));
        let message = EnvError::Unset("REDIS_URL".to_owned()).to_string();
        assert!(message.contains("REDIS_URL is not set"), "{message}");
        assert!(message.contains("${REDIS_URL:-default}"), "{message}");
    }
}
