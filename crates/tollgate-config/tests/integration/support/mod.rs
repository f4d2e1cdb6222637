//! Helpers shared by the tests: [`rejects`], the check of a refused file,
//! and a real `redis-server` on a free port (never the machine's 6379),
//! killed when the handle is dropped. Startup is detected by reading the
//! server's log on its standard output, so nothing waits on a timer.

mod rejects;

pub use rejects::rejects;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

/// A `redis-server` child process.
pub struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a server on a free port and returns once it accepts
    /// connections.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with `extra` arguments (such as
    /// `["--requirepass", "pw"]`) on a free port.
    pub fn start_with(extra: &[&str]) -> Self {
        let mut failures = String::new();
        // Another process may take the port between choosing and binding it.
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("temporary directory");
            match Self::launch(free_port(), dir, None, extra, "Ready to accept connections") {
                Ok(server) => return server,
                Err(log) => failures.push_str(&log),
            }
        }
        panic!("redis-server did not start:\n{failures}");
    }

    /// Starts a server on `port` (one chosen earlier with [`free_port`],
    /// for a server that comes up after its clients).
    pub fn start_on(port: u16) -> Self {
        Self::try_start(port).unwrap_or_else(|log| panic!("redis-server did not start:\n{log}"))
    }

    /// Starts a Redis Sentinel on a free port that monitors the server at
    /// `primary` by the name `master`, and returns once it does.
    pub fn start_sentinel(master: &str, primary: &RedisServer) -> Self {
        Self::start_sentinel_with(master, primary, "")
    }

    /// As [`start_sentinel`](Self::start_sentinel), with `config` lines
    /// added to its configuration (such as `sentinel auth-pass NAME PW`).
    pub fn start_sentinel_with(master: &str, primary: &RedisServer, config: &str) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("sentinel.conf");
        let monitor = format!("sentinel monitor {master} 127.0.0.1 {} 1\n{config}", primary.port);
        std::fs::write(&path, monitor).expect("write sentinel.conf");
        Self::launch(free_port(), dir, Some(&path), &[], "+monitor master")
            .unwrap_or_else(|log| panic!("redis-server --sentinel did not start:\n{log}"))
    }

    fn try_start(port: u16) -> Result<Self, String> {
        let dir = tempfile::tempdir().expect("temporary directory");
        Self::launch(port, dir, None, &[], "Ready to accept connections")
    }

    /// Starts `redis-server` (with a configuration file first, for a
    /// sentinel, and `extra` arguments last) and waits for `ready` in its
    /// log.
    fn launch(
        port: u16,
        dir: tempfile::TempDir,
        config: Option<&std::path::Path>,
        extra: &[&str],
        ready: &str,
    ) -> Result<Self, String> {
        let mut command = Command::new("redis-server");
        if let Some(config) = config {
            command.arg(config).arg("--sentinel");
        }
        let mut child = command
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &dir.path().display().to_string()])
            .args(["--logfile", ""])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed to run these tests");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut log = String::new();
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            log.push_str(&line);
            log.push('\n');
            if line.contains(ready) {
                // Keep reading so that the server never blocks on a full pipe.
                std::thread::spawn(move || lines.for_each(drop));
                return Ok(Self {
                    child,
                    port,
                    _dir: dir,
                });
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(log)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli must be installed to run these tests");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}
