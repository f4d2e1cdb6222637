//! The outputs README.md shows are what the command prints.

use std::path::Path;

use crate::support::*;

/// The `text` block that follows the code block ending with `command` in
/// the README.
fn shown_after(readme: &str, command: &str) -> String {
    let at = readme
        .find(&format!("{command}\n```\n\n```text\n"))
        .unwrap_or_else(|| panic!("README.md shows no output after {command:?}"));
    let block = &readme[at..];
    let start = block.find("```text\n").unwrap() + "```text\n".len();
    let end = start + block[start..].find("```").unwrap();
    block[start..end].to_owned()
}

#[test]
fn the_readme_shows_what_the_commands_print() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let commands = [
        "simulate --trace examples/traces/sample.csv --strategy all --limit 10 --window 10s",
        "simulate --trace examples/traces/access.log --format nginx --config examples/traces/policies.yaml",
        "simulate --trace examples/traces/access.log --format nginx --config examples/traces/policies-shadow.yaml",
    ];
    for command in commands {
        let expected = shown_after(&readme, command);
        // Paths relative to the repository, as the README writes them.
        let out = Tollgate::new()
            .args(command.split(' '))
            .command()
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8(out.stdout).unwrap(), expected, "{command}");
    }
}
