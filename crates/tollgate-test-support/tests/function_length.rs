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
use std::path::{Path, PathBuf};

/// The most lines a function may have.
const MAX_LINES: usize = 80;

/// The most functions of the workspace that may be longer, each with a
/// `// Longer than 80 lines:` comment saying why.
const MAX_EXCEPTIONS: usize = 5;

/// What the comment that lets a function be longer starts with.
const EXCEPTION: &str = "// Longer than 80 lines:";

/// Functions of the core crates longer than [`MAX_LINES`] that are being
/// split where those crates are restructured, as (file relative to the
/// workspace root, name). The list is to be emptied: a function leaves it
/// when it is split (the test fails while a function listed here is no
/// longer long), and nothing is added to it.
const PENDING_SPLIT: &[(&str, &str)] = &[
    ("crates/tollgate/src/strategy/reserve.rs", "reserve_all"),
    ("crates/tollgate/src/limiter/together.rs", "decide"),
    ("crates/tollgate/src/limiters/builder.rs", "build_after"),
    ("crates/tollgate-redis/src/binding.rs", "new"),
];

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
    let mut pending_found = Vec::new();
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
            if !long {
                continue;
            }
            if PENDING_SPLIT.contains(&(file.as_str(), function.name.as_str())) {
                pending_found.push((file.clone(), function.name.clone()));
            } else {
                too_long.push(at);
            }
        }
    }
    let failures = failures(&too_long, &exceptions, &pending_found);
    assert!(failures.is_empty(), "{failures}");
}

/// What is wrong, with how to fix it (empty when nothing is): the
/// functions `too_long` (each as `file:line name (count lines)`, or with
/// what is wrong with its exception), the `exceptions` when there are too
/// many, and the functions of [`PENDING_SPLIT`] not among the long
/// functions found, `pending_found`.
fn failures(too_long: &[String], exceptions: &[String], pending_found: &[(String, String)]) -> String {
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
    let stale: Vec<_> = PENDING_SPLIT
        .iter()
        .filter(|&&(file, name)| !pending_found.iter().any(|(f, n)| f == file && n == name))
        .collect();
    if !stale.is_empty() {
        let _ = writeln!(
            failures,
            "functions listed in PENDING_SPLIT that are no longer over {MAX_LINES} lines (or no \
             longer exist); remove them from the list:"
        );
        for (file, name) in stale {
            let _ = writeln!(failures, "  {file} {name}");
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

/// The workspace's root: two levels above this crate's manifest.
fn workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate is at crates/NAME in the workspace")
        .to_owned();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    assert!(
        manifest.contains("[workspace]"),
        "{} is not the workspace's root",
        root.display()
    );
    root
}

/// Every `.rs` file under `crates/*/src` but those named `tests.rs`,
/// sorted.
fn source_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for krate in read_dir(&root.join("crates")) {
        let src = krate.join("src");
        if src.is_dir() {
            collect_rs(&src, &mut files);
        }
    }
    files.sort();
    files
}

/// Adds the `.rs` files under `dir`, at any depth, but `tests.rs`, to
/// `files`.
fn collect_rs(dir: &Path, files: &mut Vec<PathBuf>) {
    for path in read_dir(dir) {
        if path.is_dir() {
            collect_rs(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            files.push(path);
        }
    }
}

/// The entries of `dir`.
fn read_dir(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect()
}

/// `path` relative to `root`, with `/` between its parts.
fn relative(root: &Path, path: &Path) -> String {
    let parts: Vec<_> = path
        .strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

/// Every function of `text` with a body, outside `#[cfg(test)] mod … { … }`
/// blocks: a line with `fn NAME` (after the indentation and optional `pub`,
/// `pub(…)`, `default`, `const`, `async`, `unsafe`, `extern "…"`), whose
/// signature ends at the first line ending in `{` (a body), `;` (none) or
/// `}` (a body on that line, `fn f() {}`). The body ends at the first
/// later line that is the `fn` line's indentation followed by `}`.
fn functions(text: &str) -> Vec<Function> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out = Vec::new();
    let mut skip_until: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(end) = &skip_until {
            if line == end {
                skip_until = None;
            }
            i += 1;
            continue;
        }
        if line.trim() == "#[cfg(test)]" && lines.get(i + 1).is_some_and(|next| opens_mod(next)) {
            skip_until = Some(format!("{}}}", indentation(lines[i + 1])));
            i += 2;
            continue;
        }
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
                .unwrap_or(lines.len())
        };
        out.push(Function {
            line: i + 1,
            name: name.to_owned(),
            lines: end - i + 1,
            exception: exception(&lines[..i]),
        });
        i += 1;
    }
    out
}

/// Whether `line` opens a module block: `mod NAME {` after indentation.
fn opens_mod(line: &str) -> bool {
    let Some(rest) = line.trim_start().strip_prefix("mod ") else {
        return false;
    };
    let name_len = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
    name_len > 0 && rest[name_len..].starts_with(" {")
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

/// The leading whitespace of `line`.
fn indentation(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
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
