//! The files of the Debian package that are made from the command-line
//! definitions: the man pages in `packaging/man` and the completion scripts
//! in `packaging/completions`. They are committed, so `cargo deb` packages
//! them as they are; the test here makes them again and fails when a flag
//! or a help text changed without them. To write them anew:
//!
//! ```text
//! TOLLGATE_UPDATE_PACKAGING=1 cargo test -p tollgate-cli packaging
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;

use crate::args::Cli;

/// The completion scripts the package installs, by file name under
/// `packaging/completions`.
const COMPLETIONS: [(Shell, &str); 3] = [
    (Shell::Bash, "tollgate.bash"),
    (Shell::Zsh, "_tollgate"),
    (Shell::Fish, "tollgate.fish"),
];

/// `packaging/` in the crate.
fn packaging_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging")
}

/// Every generated file, by its path under `packaging/`: one man page for
/// `tollgate` and one for each subcommand (`tollgate-serve.1`, …), then the
/// completion scripts.
fn generated() -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let scratch = tempfile::tempdir().expect("a scratch directory");
    clap_mangen::generate_to(Cli::command(), scratch.path()).expect("man pages");
    for entry in std::fs::read_dir(scratch.path()).expect("the man pages") {
        let path = entry.expect("a man page").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        files.insert(format!("man/{name}"), std::fs::read(&path).unwrap());
    }
    for (shell, name) in COMPLETIONS {
        files.insert(
            format!("completions/{name}"),
            crate::completions::script(shell, Cli::command()),
        );
    }
    files
}

/// The files now under `packaging/man` and `packaging/completions`.
fn committed() -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for dir in ["man", "completions"] {
        let Ok(entries) = std::fs::read_dir(packaging_dir().join(dir)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            files.insert(format!("{dir}/{name}"), std::fs::read(&path).unwrap());
        }
    }
    files
}

#[test]
fn man_pages_and_completions_match_the_command_line() {
    let generated = generated();
    if std::env::var_os("TOLLGATE_UPDATE_PACKAGING").is_some() {
        for dir in ["man", "completions"] {
            let dir = packaging_dir().join(dir);
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
        }
        for (name, bytes) in &generated {
            std::fs::write(packaging_dir().join(name), bytes).unwrap();
        }
    }
    let committed = committed();
    let stale: Vec<&String> = generated
        .iter()
        .filter(|(name, bytes)| committed.get(*name) != Some(bytes))
        .map(|(name, _)| name)
        .chain(committed.keys().filter(|name| !generated.contains_key(*name)))
        .collect();
    assert!(
        stale.is_empty(),
        "packaging/{stale:?} differ from what the command line makes; \
         run TOLLGATE_UPDATE_PACKAGING=1 cargo test -p tollgate-cli packaging"
    );
    // One page per subcommand, and the shells' scripts name them.
    for sub in ["simulate", "check", "serve", "completions"] {
        assert!(generated.contains_key(&format!("man/tollgate-{sub}.1")), "{sub}");
        let bash = String::from_utf8_lossy(&generated["completions/tollgate.bash"]).into_owned();
        assert!(bash.contains(sub), "bash completion lacks {sub}");
    }
}
