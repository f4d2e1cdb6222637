//! The rate-limiter-flexible side: the Node.js driver in `flexible/`,
//! installed with `npm ci` into a scratch directory under the target
//! directory, run once per measurement as a child process.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::meter::Meter;
use crate::run::Run;
use crate::Settings;

/// The driver's files, committed beside this one.
const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/versus_flexible/flexible");
const FILES: [&str; 3] = ["package.json", "package-lock.json", "drive.js"];

/// The driver, installed.
pub(crate) struct Driver {
    dir: PathBuf,
}

impl Driver {
    /// Copies the driver into the scratch directory and installs its
    /// pinned packages (`npm ci`), unless the lock file installed there is
    /// the committed one already.
    pub(crate) fn install() -> Self {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("versus_flexible");
        std::fs::create_dir_all(&dir).expect("make the driver's scratch directory");
        let lock = std::fs::read(format!("{SOURCES}/package-lock.json")).expect("the driver's lock file");
        let stamp = dir.join("installed.lock");
        let installed = std::fs::read(&stamp).is_ok_and(|l| l == lock) && dir.join("node_modules").is_dir();
        for file in FILES {
            std::fs::copy(format!("{SOURCES}/{file}"), dir.join(file)).expect("copy the driver");
        }
        if !installed {
            let status = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&dir)
                .status()
                .expect("run npm (Node.js and npm must be on the PATH)");
            assert!(status.success(), "npm ci failed in {}", dir.display());
            std::fs::write(&stamp, lock).expect("record the installed lock file");
        }
        Self { dir }
    }

    /// The version of Node.js the driver runs on.
    pub(crate) fn node_version() -> String {
        let out = Command::new("node").arg("--version").output().expect("run node");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// One measurement: `connections` calls in flight over as many
    /// connections to `database`, read as the driver reports it, with the
    /// server's and the driver's CPU read when it starts and ends.
    pub(crate) fn run(&self, database: &str, url: &str, connections: usize, settings: &Settings) -> Run {
        let mut child = Command::new("node")
            .arg("drive.js")
            .current_dir(&self.dir)
            .env("PG_URL", url)
            .env("CONNECTIONS", connections.to_string())
            .env("WARM_UP_MS", settings.warm_up.as_millis().to_string())
            .env("SECONDS", settings.seconds.to_string())
            .env("KEYS", settings.keys.to_string())
            .env("POINTS", crate::LIMIT.to_string())
            .env("DURATION_S", crate::WINDOW.as_secs().to_string())
            .env("TABLE", "rlflx")
            .stdout(Stdio::piped())
            .spawn()
            .expect("run node");
        let meter = Meter::new(database, child.id().to_string());
        let mut lines = BufReader::new(child.stdout.take().expect("the driver's output")).lines();
        let mut next = || {
            lines
                .next()
                .expect("a line from the driver")
                .expect("read the driver's output")
        };
        assert_eq!(next(), r#"{"measuring":true}"#, "the driver's first line");
        let before = meter.read();
        let report = next();
        let after = meter.read();
        assert!(
            child.wait().expect("wait for node").success(),
            "the driver failed"
        );
        let report: serde_json::Value = serde_json::from_str(&report).expect("the driver's JSON report");
        let number = |name: &str| {
            report[name]
                .as_f64()
                .unwrap_or_else(|| panic!("no {name} in {report}"))
        };
        Run {
            per_second: number("per_second"),
            p50_us: number("p50_us"),
            p99_us: number("p99_us"),
            cpu: before.until(&after, number("decisions")),
            not_admitted: (number("denied") + number("errors")) as u64,
        }
    }
}
