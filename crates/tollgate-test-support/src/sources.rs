//! The workspace's own sources, for the tests that check rules of its
//! layout by reading them: every production file and its lines outside
//! tests.

use std::path::{Path, PathBuf};

/// The workspace's root: two levels above this crate's manifest.
pub fn workspace_root() -> PathBuf {
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
pub fn source_files(root: &Path) -> Vec<PathBuf> {
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
pub fn relative(root: &Path, path: &Path) -> String {
    let parts: Vec<_> = path
        .strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

/// The lines of `text` outside `#[cfg(test)] mod … { … }` blocks, each
/// with its 1-based number, as rustfmt lays a file out (the block ends at
/// the first later line that is the `mod` line's indentation followed by
/// `}`).
pub fn production_lines(text: &str) -> Vec<(usize, &str)> {
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
        } else if line.trim() == "#[cfg(test)]" && lines.get(i + 1).is_some_and(|next| opens_mod(next)) {
            skip_until = Some(format!("{}}}", indentation(lines[i + 1])));
            i += 1;
        } else {
            out.push((i + 1, line));
        }
        i += 1;
    }
    out
}

/// Whether `line` opens a module block: `mod NAME {` after indentation.
fn opens_mod(line: &str) -> bool {
    let Some(rest) = line.trim_start().strip_prefix("mod ") else {
        return false;
    };
    let name_len = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    name_len > 0 && rest[name_len..].starts_with(" {")
}

/// The whitespace `line` starts with.
pub fn indentation(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}
