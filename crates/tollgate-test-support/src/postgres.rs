//! A private PostgreSQL server for the tests that must restart, stop or
//! start it: [`PostgresServer`] runs `initdb` into a temporary directory
//! and `pg_ctl` on a free port of 127.0.0.1, with trust authentication for
//! the user `postgres`, and stops and removes it when dropped.
//!
//! The binaries are found in `TOLLGATE_POSTGRES_BIN` if set, else in
//! `pg_config --bindir`, else on the `PATH`. PostgreSQL refuses to run as
//! root: as root, the server's directory is given to the `postgres` user
//! and every command runs as it (`runuser -u postgres`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::redis::free_port;

/// Settings appended to `postgresql.conf`: small, fast and unsafe on a
/// crash (`fsync` off), which tests can afford.
const SETTINGS: &str = "
listen_addresses = '127.0.0.1'
shared_buffers = 16MB
max_connections = 40
fsync = off
synchronous_commit = off
full_page_writes = off
";

/// A PostgreSQL server of the test's own on 127.0.0.1, its data in a
/// temporary directory; stopped and removed when dropped.
pub struct PostgresServer {
    dir: tempfile::TempDir,
    port: u16,
    bin: PathBuf,
    running: bool,
}

impl PostgresServer {
    /// Creates a cluster with `initdb` on a free port and starts it,
    /// waiting until it accepts connections.
    ///
    /// # Panics
    ///
    /// When the binaries cannot be found, or `initdb` or `pg_ctl` fails
    /// (the server's log is in the message).
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        if is_root() {
            run(
                "chown",
                &["postgres:", &dir.path().display().to_string()],
                dir.path(),
            );
        }
        let mut server = Self {
            port: free_port(),
            bin: bin_dir(),
            dir,
            running: false,
        };
        let data = server.data().display().to_string();
        server.as_owner(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ],
        );
        let settings = format!(
            "{SETTINGS}port = {}\nunix_socket_directories = '{}'\n",
            server.port,
            server.dir.path().display()
        );
        let conf = server.data().join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("postgresql.conf");
        text.push_str(&settings);
        std::fs::write(&conf, text).expect("write postgresql.conf");
        server.start_again();
        server
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of its `postgres` database as the user `postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Whether the server was left running by the last command.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Restarts the server (`pg_ctl restart -m fast`: open connections
    /// are ended), returning once it accepts connections again.
    pub fn restart(&mut self) {
        let log = self.log_path();
        self.pg_ctl(&["restart", "-w", "-t", "60", "-m", "fast", "-l", &log]);
        self.running = true;
    }

    /// Stops the server (`pg_ctl stop -m fast`: open connections are
    /// ended), returning once it is down.
    pub fn stop(&mut self) {
        self.pg_ctl(&["stop", "-w", "-m", "fast"]);
        self.running = false;
    }

    /// Starts a stopped server, returning once it accepts connections.
    pub fn start_again(&mut self) {
        let log = self.log_path();
        self.pg_ctl(&["start", "-w", "-t", "60", "-l", &log]);
        self.running = true;
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Where the server logs: a file, never `pg_ctl`'s output, which the
    /// server would otherwise hold open after `pg_ctl` exits.
    fn log_path(&self) -> String {
        self.dir.path().join("server.log").display().to_string()
    }

    /// The cluster's data directory.
    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Runs `pg_ctl` on the cluster with `args`.
    fn pg_ctl(&self, args: &[&str]) {
        let data = self.data().display().to_string();
        let mut all = vec!["-D", &data];
        all.extend_from_slice(args);
        let started = Instant::now();
        if let Err(output) = self.try_as_owner("pg_ctl", &all) {
            panic!(
                "pg_ctl {} failed after {:?}: {output}\n{}",
                args.join(" "),
                started.elapsed(),
                self.log()
            );
        }
    }

    /// Runs the binary `name` with `args` as the cluster's owner; panics
    /// when it fails.
    fn as_owner(&self, name: &str, args: &[&str]) {
        if let Err(output) = self.try_as_owner(name, args) {
            panic!("{name} failed: {output}");
        }
    }

    /// Runs the binary `name` with `args` as the cluster's owner; its
    /// output when it fails.
    fn try_as_owner(&self, name: &str, args: &[&str]) -> Result<(), String> {
        let program = self.bin.join(name);
        let mut command = if is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        };
        let output = command
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e} (is PostgreSQL installed?)", program.display()));
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{}\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if self.running {
            // Immediate: nothing of the test's data needs keeping.
            let data = self.data().display().to_string();
            let _ = self.try_as_owner("pg_ctl", &["-D", &data, "stop", "-w", "-m", "immediate"]);
        }
    }
}

/// Whether this process runs as root.
fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The directory of PostgreSQL's binaries (empty: the `PATH`'s).
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TOLLGATE_POSTGRES_BIN") {
        return PathBuf::from(dir);
    }
    Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        .unwrap_or_default()
}

/// Runs `program` with `args` in `dir`; panics when it fails.
fn run(program: &str, args: &[&str], dir: &Path) {
    let status = Command::new(program)
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(status.success(), "{program} {}: {status}", args.join(" "));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    fn accepts(server: &PostgresServer) -> bool {
        TcpStream::connect(("127.0.0.1", server.port())).is_ok()
    }

    #[test]
    fn starts_stops_restarts_and_is_removed_on_drop() {
        let mut server = PostgresServer::start();
        assert!(server.url().ends_with(&format!(":{}/postgres", server.port())));
        assert!(accepts(&server));
        server.restart();
        assert!(accepts(&server));
        server.stop();
        assert!(!server.is_running());
        assert!(!accepts(&server));
        server.start_again();
        assert!(accepts(&server));
        let (dir, port) = (server.dir.path().to_owned(), server.port());
        drop(server);
        assert!(!dir.exists());
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    }
}
