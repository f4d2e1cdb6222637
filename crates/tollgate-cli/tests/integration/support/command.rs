//! The one way the tests run the `tollgate` binary: a builder of its command
//! line, with the flags of `simulate` and `check` as methods.

use std::ffi::{OsStr, OsString};
use std::fmt::Display;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A `tollgate` command line being built.
///
/// ```ignore
/// let out = Tollgate::simulate().trace(&path).strategy("all").limit(10).window("10s").run();
/// ```
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct Tollgate {
    /// The arguments after the program name.
    args: Vec<OsString>,
}

impl Tollgate {
    /// `tollgate` with no arguments yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `tollgate simulate`.
    pub fn simulate() -> Self {
        Self::new().arg("simulate")
    }

    /// `tollgate check FILE`.
    pub fn check(file: impl AsRef<OsStr>) -> Self {
        Self::new().arg("check").arg(file)
    }

    /// Appends one argument as given.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Appends arguments as given.
    pub fn args<I>(self, args: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<OsStr>,
    {
        args.into_iter().fold(self, Self::arg)
    }

    /// `--flag value`.
    fn flag(self, flag: &str, value: impl AsRef<OsStr>) -> Self {
        self.arg(flag).arg(value)
    }

    /// `--trace PATH`.
    pub fn trace(self, path: impl AsRef<OsStr>) -> Self {
        self.flag("--trace", path)
    }

    /// `--format FORMAT`.
    pub fn format(self, format: &str) -> Self {
        self.flag("--format", format)
    }

    /// `--strategy STRATEGY`.
    pub fn strategy(self, strategy: &str) -> Self {
        self.flag("--strategy", strategy)
    }

    /// `--limit N` (any text, to test invalid limits too).
    pub fn limit(self, limit: impl Display) -> Self {
        self.flag("--limit", limit.to_string())
    }

    /// `--window DURATION`.
    pub fn window(self, window: &str) -> Self {
        self.flag("--window", window)
    }

    /// `--config FILE`.
    pub fn config(self, path: impl AsRef<OsStr>) -> Self {
        self.flag("--config", path)
    }

    /// `--decisions OUT`.
    pub fn decisions(self, path: impl AsRef<OsStr>) -> Self {
        self.flag("--decisions", path)
    }

    /// `--plot FILE`.
    pub fn plot(self, path: impl AsRef<OsStr>) -> Self {
        self.flag("--plot", path)
    }

    /// `--key KEY`.
    pub fn key(self, key: impl AsRef<OsStr>) -> Self {
        self.flag("--key", key)
    }

    /// `--skip-invalid`.
    pub fn skip_invalid(self) -> Self {
        self.arg("--skip-invalid")
    }

    /// `--backend redis --redis-url URL`.
    pub fn redis(self, url: &str) -> Self {
        self.flag("--backend", "redis").flag("--redis-url", url)
    }

    /// `--backend postgres --postgres-url URL`.
    pub fn postgres(self, url: &str) -> Self {
        self.flag("--backend", "postgres").flag("--postgres-url", url)
    }

    /// The process to run, for tests that start it themselves.
    pub fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
        command.args(&self.args);
        command
    }

    /// Starts the process with stdout and stderr captured.
    pub fn spawn(&self) -> Child {
        self.command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the tollgate binary")
    }

    /// Runs the process to its end: its status, stdout and stderr.
    pub fn run(&self) -> Output {
        self.command().output().expect("running the tollgate binary")
    }

    /// Runs the process to its end like [`Tollgate::run`], failing the test
    /// (and killing the process) when it takes longer than `limit`: for
    /// inputs that must be refused at once, such as endless files.
    pub fn run_within(&self, limit: Duration) -> Output {
        let mut child = self.spawn();
        let start = Instant::now();
        while child.try_wait().expect("polling the tollgate binary").is_none() {
            if start.elapsed() > limit {
                child.kill().expect("killing the tollgate binary");
                panic!("tollgate {:?} still running after {limit:?}", self.args);
            }
            // Polling the child, not waiting for time to pass.
            std::thread::sleep(Duration::from_millis(10));
        }
        child
            .wait_with_output()
            .expect("reading the tollgate binary's output")
    }

    /// Runs the process, asserts that it succeeded and returns its stdout.
    pub fn run_ok(&self) -> String {
        let out = self.run();
        assert!(
            out.status.success(),
            "tollgate {:?} failed: {}",
            self.args,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8 stdout")
    }
}
