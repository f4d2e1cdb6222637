//! Production functions stay at most [`MAX_LINES`] lines long, counted
//! from the line with `fn` to the closing brace, comments and blank lines
//! included: every `crates/*/src/**/*.rs` file of the workspace is read
//! as rustfmt lays it out, without its tests (files named `tests.rs` and
//! `#[cfg(test)] mod … { … }` blocks).
//!
//! A function that is truly clearer in one piece may stay longer with a
//! line `// Longer than 80 lines: <why>` among the attributes and doc
//! comment directly above it; at most [`MAX_EXCEPTIONS`] functions of the
//! workspace may.

use std::fmt::Write as _;
use tollgate_test_support::sources::{indentation, production_lines, relative, source_files, workspace_root};

/// The most lines a function may have.
const MAX_LINES: usize = 80;

/// The most functions of the workspace that may be longer, each with a
/// `// Longer than 80 lines:` comment saying why.
const MAX_EXCEPTIONS: usize = 5;

/// What the comment that lets a function be longer starts with.
const EXCEPTION: &str = "// Longer than 80 lines:";

/// A function found in a source file.
#[derive(Debug, PartialEq, Eq)]
struct Function {
    /// The 1-based line of its `fn`.
    line: usize,
    name: String,
    /// Its lines from the `fn` line to the closing brace, inclusive.
    lines: usize,
    /// The reason given by a `// Longer than 80 lines:` comment above it
    /// (empty when the comment gives none), if it has one.
    exception: Option<String>,
}

#[test]
fn production_functions_are_at_most_80_lines() {
    let root = workspace_root();
    let mut too_long = Vec::new();
    let mut exceptions = Vec::new();
    let files = source_files(&root);
    assert!(
        !files.is_empty(),
        "no source files under {}",
        root.join("crates").display()
    );
    for path in files {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
        let file = relative(&root, &path);
        for function in functions(&text) {
            let at = format!(
                "{file}:{} {} ({} lines)",
                function.line, function.name, function.lines
            );
            let long = function.lines > MAX_LINES;
            if let Some(reason) = &function.exception {
                exceptions.push(at.clone());
                if reason.is_empty() {
                    too_long.push(format!("{at}: its `{EXCEPTION}` comment gives no reason"));
                } else if !long {
                    too_long.push(format!(
                        "{at}: no longer over {MAX_LINES} lines; remove its `{EXCEPTION}` comment"
                    ));
                }
                continue;
            }
            if long {
                too_long.push(at);
            }
        }
    }
    let failures = failures(&too_long, &exceptions);
    assert!(failures.is_empty(), "{failures}");
}

/// What is wrong, with how to fix it (empty when nothing is): the
/// functions `too_long` (each as `file:line name (count lines)`, or with
/// what is wrong with its exception), the `exceptions` when there are too
/// many.
fn failures(too_long: &[String], exceptions: &[String]) -> String {
    let mut failures = String::new();
    if !too_long.is_empty() {
        let _ = writeln!(
            failures,
            "functions over {MAX_LINES} lines (from the `fn` line to the closing brace), or with a \
             wrong `{EXCEPTION}` comment:"
        );
        for at in too_long {
            let _ = writeln!(failures, "  {at}");
        }
        let _ = writeln!(
            failures,
            "Split each into smaller functions, each doing one step (parsing one group of fields, \
             building one part, handling one kind of message), with a doc comment saying what it \
             does. If splitting one truly harms it, put a line `{EXCEPTION} <why>` directly above \
             its doc comment (at most {MAX_EXCEPTIONS} such functions in the workspace)."
        );
    }
    if exceptions.len() > MAX_EXCEPTIONS {
        let _ = writeln!(
            failures,
            "{} functions have a `{EXCEPTION}` comment, more than the {MAX_EXCEPTIONS} allowed; split \
             some of them:",
            exceptions.len()
        );
        for at in exceptions {
            let _ = writeln!(failures, "  {at}");
        }
    }
    failures
}

#[test]
fn functions_are_counted_as_laid_out() {
    let text = r#"
pub(crate) async fn two() {
}

fn one_liner() {}

trait Shape {
    fn area(&self) -> f64;

    // Longer than 80 lines: one match over every kind.
    /// The side.
    #[inline]
    fn side(
        &self,
    ) -> f64 {
        let inner = || {
        };
        inner();
        1.0
    }
}

#[cfg(test)]
mod tests {
    fn skipped() {
    }
}

// Longer than 80 lines:
const unsafe fn empty_reason() {
}
"#;
    let found: Vec<_> = functions(text)
        .into_iter()
        .map(|f| (f.line, f.name, f.lines, f.exception))
        .collect();
    let reason = "one match over every kind.".to_owned();
    assert_eq!(
        found,
        [
            (2, "two".to_owned(), 2, None),
            (5, "one_liner".to_owned(), 1, None),
            (13, "side".to_owned(), 8, Some(reason)),
            (30, "empty_reason".to_owned(), 2, Some(String::new())),
        ]
    );
}

/// Every function of `text` with a body, outside `#[cfg(test)] mod … { … }`
/// blocks: a line with `fn NAME` (after the indentation and optional `pub`,
/// `pub(…)`, `default`, `const`, `async`, `unsafe`, `extern "…"`), whose
/// signature ends at the first line ending in `{` (a body), `;` (none) or
/// `}` (a body on that line, `fn f() {}`). The body ends at the first
/// later line that is the `fn` line's indentation followed by `}`.
fn functions(text: &str) -> Vec<Function> {
    let numbered = production_lines(text);
    let lines: Vec<&str> = numbered.iter().map(|&(_, line)| line).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let Some(name) = fn_name(line) else {
            i += 1;
            continue;
        };
        // A signature line ending in `}` holds the whole body too.
        let ends_signature = |l: &str| l.trim_end().ends_with(['{', ';', '}']);
        let Some(j) = (i..lines.len()).find(|&j| ends_signature(lines[j])) else {
            break;
        };
        if lines[j].trim_end().ends_with(';') {
            i = j + 1;
            continue;
        }
        let close = format!("{}}}", indentation(line));
        let end = if lines[j].trim_end().ends_with('}') {
            j
        } else {
            (j..lines.len())
                .find(|&k| lines[k] == close)
                .unwrap_or(lines.len() - 1)
        };
        out.push(Function {
            line: numbered[i].0,
            name: name.to_owned(),
            lines: numbered[end].0 - numbered[i].0 + 1,
            exception: exception(&lines[..i]),
        });
        i += 1;
    }
    out
}

/// The name of the function `line` declares, if it declares one.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    if let Some(after) = rest.strip_prefix("pub") {
        if let Some(after) = after.strip_prefix(' ') {
            rest = after;
        } else if let Some(after) = after.strip_prefix('(') {
            let close = after.find(')')?;
            rest = after[close + 1..].strip_prefix(' ')?;
        }
    }
    for qualifier in ["default ", "const ", "async ", "unsafe "] {
        if let Some(after) = rest.strip_prefix(qualifier) {
            rest = after;
        }
    }
    if let Some(after) = rest.strip_prefix("extern \"") {
        let close = after.find('"')?;
        rest = after[close + 1..].strip_prefix(' ')?;
    }
    let rest = rest.strip_prefix("fn ")?;
    let len = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
    (len > 0).then(|| &rest[..len])
}

/// Whether `c` may be part of an identifier.
fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The reason of a `// Longer than 80 lines:` comment among the comments
/// and attributes directly above a function (`above` are the lines before
/// its `fn` line), if there is one.
fn exception(above: &[&str]) -> Option<String> {
    for line in above.iter().rev() {
        let line = line.trim();
        if let Some(reason) = line.strip_prefix(EXCEPTION) {
            return Some(reason.trim().to_owned());
        }
        let comment_or_attribute = line.starts_with("//") || line.starts_with("#[");
        // Inside an attribute over several lines, no line ends an item.
        let ends_item = line.is_empty() || line.ends_with(['{', '}', ';']);
        if !comment_or_attribute && ends_item {
            return None;
        }
    }
    None
}
