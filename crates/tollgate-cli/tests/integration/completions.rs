//! `tollgate completions SHELL` prints the script the package installs,
//! and refuses a shell it does not know, naming the ones it does.

use std::process::Command;

fn completions(shell: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["completions", shell])
        .output()
        .unwrap()
}

#[test]
fn each_shell_gets_the_packaged_script() {
    let packaging = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/completions");
    for (shell, file) in [
        ("bash", "tollgate.bash"),
        ("zsh", "_tollgate"),
        ("fish", "tollgate.fish"),
    ] {
        let output = completions(shell);
        assert!(output.status.success(), "{shell}");
        assert_eq!(
            output.stdout,
            std::fs::read(packaging.join(file)).unwrap(),
            "{shell}"
        );
    }
    for shell in ["elvish", "powershell"] {
        let output = completions(shell);
        assert!(output.status.success() && !output.stdout.is_empty(), "{shell}");
    }
}

#[test]
fn an_unknown_shell_is_refused_with_the_known_ones() {
    let output = completions("tcsh");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("invalid value 'tcsh'"), "{stderr}");
    assert!(stderr.contains("bash") && stderr.contains("fish"), "{stderr}");
    assert!(output.stdout.is_empty());
}
