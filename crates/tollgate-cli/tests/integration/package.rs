//! The Debian package as `cargo deb -p tollgate-cli` makes it, checked
//! without installing it: the package is built around this build's binary,
//! unpacked into a scratch directory (`dpkg-deb -x`, so the machine is
//! left as it was), its man pages are rendered with `man -l`, its unit is
//! verified with `systemd-analyze verify`, and the unit's command line
//! runs the packaged binary on the packaged configuration.
//!
//! Needs cargo-deb, dpkg-deb, man and systemd-analyze (`.ci/run` installs
//! them); without cargo-deb the test says so and passes, unless `CI` is set.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tollgate_test_support::redis::free_port;

use crate::support::{get, post, Serve};

/// The subcommands, each with a man page of its own.
const SUBCOMMANDS: [&str; 4] = ["simulate", "check", "serve", "completions"];

/// Runs `command`, panicking with its output unless it succeeds.
fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Whether `cargo deb` can run here.
fn have_cargo_deb() -> bool {
    let found = cargo()
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found || std::env::var_os("CI").is_none(),
        "cargo-deb is not installed (cargo install --locked cargo-deb)"
    );
    found
}

/// Builds the package around this build's binary in `scratch` and returns
/// its path: `cargo deb --no-build` reads the binary from the target
/// directory's `release/tollgate`, here a copy in a scratch target
/// directory without its debug information (a test build's is most of its
/// size), so the test builds nothing again.
fn build_package(scratch: &Path) -> PathBuf {
    let target = scratch.join("target");
    std::fs::create_dir_all(target.join("release")).unwrap();
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg(env!("CARGO_BIN_EXE_tollgate"))
        .arg(target.join("release/tollgate")));
    let out = scratch.join("deb");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    run(cargo()
        .current_dir(&workspace)
        .env("CARGO_TARGET_DIR", &target)
        .args([
            "deb",
            "-p",
            "tollgate-cli",
            "--no-build",
            "--no-strip",
            "--fast",
            "--quiet",
        ])
        .arg("--output")
        .arg(&out));
    let debs: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    assert_eq!(debs.len(), 1, "{debs:?}");
    debs.into_iter().next().unwrap()
}

/// A control field of the package.
fn field(deb: &Path, name: &str) -> String {
    let output = run(Command::new("dpkg-deb").arg("--field").arg(deb).arg(name));
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// The unit file in the unpacked `root`, wherever cargo-deb put it.
fn unit_file(root: &Path) -> PathBuf {
    ["usr/lib/systemd/system", "lib/systemd/system"]
        .iter()
        .map(|dir| root.join(dir).join("tollgate.service"))
        .find(|path| path.is_file())
        .expect("tollgate.service in the package")
}

/// The value of `key=` in the unit (the last one, as systemd reads it).
fn unit_setting(unit: &str, key: &str) -> String {
    unit.lines()
        .filter_map(|line| line.strip_prefix(key)?.strip_prefix('='))
        .next_back()
        .unwrap_or_else(|| panic!("no {key}= in the unit"))
        .to_owned()
}

#[test]
fn the_debian_package_installs_a_working_service() {
    if !have_cargo_deb() {
        eprintln!(
            "SKIPPED: cargo-deb is not installed (cargo install --locked cargo-deb; .ci/run installs it)"
        );
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let deb = build_package(scratch.path());
    assert_eq!(field(&deb, "Package"), "tollgate");
    assert_eq!(field(&deb, "Version"), format!("{}-1", env!("CARGO_PKG_VERSION")));

    // The control files: the configuration is conffiles, the unit is
    // enabled and started by the maintainer scripts.
    let control = scratch.path().join("control");
    run(Command::new("dpkg-deb").arg("--control").arg(&deb).arg(&control));
    let conffiles = std::fs::read_to_string(control.join("conffiles")).unwrap();
    for file in ["/etc/tollgate/policies.yaml", "/etc/default/tollgate"] {
        assert!(
            conffiles.lines().any(|l| l == file),
            "{file} is not a conffile: {conffiles}"
        );
    }
    let postinst = std::fs::read_to_string(control.join("postinst")).unwrap();
    assert!(postinst.contains("deb-systemd-helper") && postinst.contains("tollgate.service"));

    let root = scratch.path().join("root");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root));
    let binary = root.join("usr/bin/tollgate");
    let config = root.join("etc/tollgate/policies.yaml");
    assert!(binary.is_file() && config.is_file());

    // A man page for the command and each subcommand, rendered without a
    // warning.
    for page in
        std::iter::once("tollgate".to_owned()).chain(SUBCOMMANDS.iter().map(|s| format!("tollgate-{s}")))
    {
        let path = root.join(format!("usr/share/man/man1/{page}.1"));
        let path = if path.is_file() {
            path
        } else {
            path.with_extension("1.gz")
        };
        let output = run(Command::new("man")
            .env("MANWIDTH", "80")
            .env("MAN_KEEP_FORMATTING", "")
            .args(["--warnings", "-P", "cat", "-l"])
            .arg(&path));
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            text.contains("NAME") && text.contains("SYNOPSIS"),
            "{page}: {text}"
        );
        assert!(text.contains(&page), "{page}: {text}");
        let warnings = String::from_utf8_lossy(&output.stderr);
        assert!(warnings.trim().is_empty(), "{page}: {warnings}");
    }
    // The completion scripts, where each shell looks for them.
    for (path, needle) in [
        ("usr/share/bash-completion/completions/tollgate", "complete -F"),
        ("usr/share/zsh/vendor-completions/_tollgate", "#compdef tollgate"),
        (
            "usr/share/fish/vendor_completions.d/tollgate.fish",
            "complete -c tollgate",
        ),
    ] {
        let script = std::fs::read_to_string(root.join(path)).unwrap();
        assert!(script.contains(needle), "{path}");
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{path} lacks {sub}");
        }
    }

    // The Grafana dashboard, as the repository has it.
    let dashboard = std::fs::read(root.join("usr/share/doc/tollgate/grafana/tollgate.json")).unwrap();
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/tollgate.json");
    assert_eq!(dashboard, std::fs::read(repository).unwrap());

    // The unit: verified by systemd, and its command line serves the
    // packaged configuration.
    let unit_path = unit_file(&root);
    verify_unit(&unit_path, &root);
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    assert_eq!(unit_setting(&unit, "ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(unit_setting(&unit, "NoNewPrivileges"), "yes");
    assert_eq!(unit_setting(&unit, "ProtectSystem"), "strict");
    assert_eq!(unit_setting(&unit, "DynamicUser"), "yes");
    assert_eq!(unit_setting(&unit, "StateDirectory"), "tollgate");
    let exec = unit_setting(&unit, "ExecStart");
    let args: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(
        args[..4],
        [
            "/usr/bin/tollgate",
            "serve",
            "--config",
            "/etc/tollgate/policies.yaml"
        ]
    );
    assert_eq!(
        args[4..],
        ["--state-file", "/var/lib/tollgate/state", "$TOLLGATE_OPTS"]
    );
    let defaults = std::fs::read_to_string(root.join("etc/default/tollgate")).unwrap();
    assert!(defaults.lines().any(|l| l == "TOLLGATE_OPTS=\"\""), "{defaults}");

    // The packaged binary checks the packaged configuration...
    let check = run(Command::new(&binary).arg("check").arg(&config));
    assert!(String::from_utf8_lossy(&check.stdout).contains("login"));
    // ...and serves it, with the options an operator adds in
    // /etc/default/tollgate.
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    // The state directory systemd makes (StateDirectory=), in the scratch
    // root.
    let state_dir = root.join("var/lib/tollgate");
    std::fs::create_dir_all(&state_dir).unwrap();
    let state = state_dir.join("state");
    let mut serve = Serve::start_binary(
        &binary,
        &[
            "--config",
            config.to_str().unwrap(),
            "--state-file",
            state.to_str().unwrap(),
            "--listen",
            &listen,
            "--log-format",
            "json",
        ],
    );
    let line = serve.wait_for_log("serving HTTP on");
    let logged: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(logged["level"], "INFO", "{line}");
    assert!(get(port, "/healthz").starts_with("HTTP/1.1 200"));
    let body = r#"{"resource": "login", "key": "packaged"}"#;
    let answer = post(port, "/v1/decide", body);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""limit":5"#), "{answer}");
    // `systemctl reload` sends SIGHUP: the service reloads and serves on.
    serve.signal("HUP");
    serve.wait_for_log("reload");
    assert!(get(port, "/healthz").starts_with("HTTP/1.1 200"));
    serve.signal("TERM");
    assert_eq!(serve.wait_exit().code(), Some(0));
    // The count is kept for the next start.
    assert!(state.is_file(), "no state file after the service stopped");
}

/// `systemd-analyze verify` on the unit, with the package's root as the
/// root directory, so the binaries and the man page it names are the
/// packaged ones. The root gets what an installed system adds: `/bin/kill`
/// and systemd's own targets, copied from this machine.
fn verify_unit(unit: &Path, root: &Path) {
    std::fs::create_dir_all(root.join("bin")).unwrap();
    let kill = ["/bin/kill", "/usr/bin/kill"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("kill");
    std::fs::copy(kill, root.join("bin/kill")).unwrap();
    let units = unit.parent().unwrap();
    for entry in std::fs::read_dir("/usr/lib/systemd/system").expect("systemd's units") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "target") && path.is_file() {
            std::fs::copy(&path, units.join(path.file_name().unwrap())).unwrap();
        }
    }
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .arg(unit)
        .env("MANPATH", root.join("usr/share/man"))
        .output()
        .expect("systemd-analyze (apt-get install systemd)");
    let report = String::from_utf8_lossy(&output.stderr);
    // A mistyped setting is only a warning (status 0) naming the unit.
    assert!(output.status.success(), "systemd-analyze verify: {report}");
    assert!(
        !report.contains("tollgate.service"),
        "systemd-analyze verify: {report}"
    );
}
