//! Real `redis-server` processes for tests: each test starts its own on a
//! free port (never the machine's 6379), and the process is killed when the
//! handle is dropped. [`RedisServer`] is one server (plain TCP, TLS, a unix
//! socket beside its port, or a Sentinel); [`cluster`] and [`sentinel`]
//! start groups of them. `redis-server` and `redis-cli` must be on the
//! `PATH`.

pub mod behind_proxies;
pub mod cluster;
pub mod sentinel;

use std::hash::BuildHasher;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process on 127.0.0.1, with a temporary working
/// directory of its own (no persistence); killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    extra: Vec<String>,
    dir: tempfile::TempDir,
    tls: bool,
    /// A configuration file given before the other arguments (a sentinel's).
    config: Option<PathBuf>,
}

impl RedisServer {
    /// Starts a server on a free port.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server on a free port with extra arguments
    /// (e.g. `["--requirepass", "secret"]`).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_on(free_port(), extra)
    }

    /// Starts a server on `port` with extra arguments.
    pub fn start_on(port: u16, extra: &[&str]) -> Self {
        Self::launch(port, extra, false)
    }

    /// Starts a server that serves TLS only, on a free port, with extra
    /// arguments naming its certificate files.
    pub fn start_tls(extra: &[&str]) -> Self {
        let port = free_port();
        let mut args = vec!["--tls-port".to_owned(), port.to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Self::launch(port, &args, true)
    }

    fn launch(port: u16, extra: &[&str], tls: bool) -> Self {
        let mut server = Self {
            child: None,
            port,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            dir: tempfile::tempdir().expect("temporary directory"),
            tls,
            config: None,
        };
        server.spawn();
        server
    }

    /// Starts a Redis Sentinel on a free port with `config` (its `sentinel
    /// monitor …` lines), written to `sentinel.conf` in its directory.
    pub fn start_sentinel(config: &str) -> Self {
        let port = free_port();
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("sentinel.conf");
        std::fs::write(&path, config).expect("write sentinel.conf");
        let mut server = Self {
            child: None,
            port,
            extra: vec!["--sentinel".to_owned()],
            dir,
            tls: false,
            config: Some(path),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let plain_port = if self.tls { 0 } else { self.port };
        let child = Command::new("redis-server")
            .args(self.config.iter())
            .args(["--port", &plain_port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &self.dir.path().display().to_string()])
            .args([
                "--logfile",
                &self.dir.path().join("redis.log").display().to_string(),
            ])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed to run these tests");
        self.child = Some(child);
        self.wait_until_up();
    }

    fn wait_until_up(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!(
                    "redis-server on port {} exited at start: {status}\n{}",
                    self.port,
                    self.log()
                );
            }
            let up = if self.tls {
                TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            } else {
                ping(self.port)
            };
            if up {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "redis-server on port {} did not answer PING\n{}",
            self.port,
            self.log()
        );
    }

    /// The port the server listens on (its TLS port for a TLS server).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's URL without credentials, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's working directory (for unix sockets and cluster files).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    /// Kills the server with SIGKILL and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, with the same arguments.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        signal(self.pid(), "-STOP");
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        signal(self.pid(), "-CONT");
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }

    /// The rate-limit calls this server has run so far ([`script_calls`]).
    pub fn script_calls(&self) -> u64 {
        script_calls(self.port)
    }

    /// Creates the ACL user `scripts`, allowed every command but `FCALL`
    /// and `FUNCTION`, and returns a URL that logs in as it: a backend
    /// connected with it runs scripts instead of the function library.
    pub fn url_without_functions(&self) -> String {
        let ok = self.cli(&[
            "ACL",
            "SETUSER",
            "scripts",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-fcall",
            "-function",
        ]);
        assert_eq!(ok, "OK", "ACL SETUSER");
        self.url().replace("redis://", "redis://scripts:pw@")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A paused server would ignore SIGTERM; SIGKILL works regardless.
            signal(child.id(), "-CONT");
        }
        self.kill();
    }
}

/// The rate-limit calls the server on `port` has run so far, functions and
/// scripts (`FCALL`, `FCALL_RO`, `EVALSHA`, `EVAL`), from `INFO
/// commandstats`, asked over a connection of its own rather than through
/// `redis-cli` (property tests ask it thousands of times).
pub fn script_calls(port: u16) -> u64 {
    info(port, "commandstats")
        .lines()
        .filter(|l| {
            [
                "cmdstat_fcall:",
                "cmdstat_fcall_ro:",
                "cmdstat_evalsha:",
                "cmdstat_eval:",
            ]
            .iter()
            .any(|c| l.starts_with(c))
        })
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// `INFO section` of the server on `port`: the text of its bulk reply, read
/// over a new plain connection as the default user.
fn info(port: u16, section: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connecting to redis-server");
    let command = format!("*2\r\n$4\r\nINFO\r\n${}\r\n{section}\r\n", section.len());
    stream.write_all(command.as_bytes()).expect("sending INFO");
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).expect("reading INFO's reply");
        assert!(n > 0, "redis-server closed the connection before answering INFO");
        reply.extend_from_slice(&buf[..n]);
        let Some(end) = reply.windows(2).position(|w| w == b"\r\n") else {
            continue;
        };
        let head = std::str::from_utf8(&reply[..end]).expect("a RESP header");
        let len: usize = head
            .strip_prefix('$')
            .and_then(|l| l.parse().ok())
            .unwrap_or_else(|| panic!("INFO answered {head:?}, not a bulk string"));
        if reply.len() >= end + 2 + len {
            return String::from_utf8_lossy(&reply[end + 2..end + 2 + len]).into_owned();
        }
    }
}

/// Runs `redis-cli -h 127.0.0.1 -p port args...` and returns its standard
/// output, trimmed.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli must be installed to run these tests");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// Whether something on `port` answers a RESP `PING` (any status or error
/// reply counts, so password-protected servers are detected too).
fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    matches!(stream.read(&mut buf), Ok(n) if n > 0 && (buf[0] == b'+' || buf[0] == b'-'))
}

/// A TCP port on 127.0.0.1 that nothing listens on right now, chosen at
/// random below the range the kernel takes the local ports of outgoing
/// connections from. A port from that range (what binding port 0 gives)
/// can be taken by a client's connection between the check and the
/// server's own bind, or while a killed server is started again on it, and
/// the server then fails with "Address already in use"; a port below it is
/// taken only by a listener.
pub fn free_port() -> u16 {
    unused_port(false)
}

/// A free port as [`free_port`] chooses one, whose cluster-bus port
/// (+10000) is free too and below the same range.
pub fn free_cluster_port() -> u16 {
    unused_port(true)
}

/// A port nothing listens on, below the kernel's range for outgoing
/// connections (see [`free_port`]); with `bus`, the port 10000 above it
/// free and below that range too.
fn unused_port(bus: bool) -> u16 {
    const LOWEST: u32 = 10_000;
    let ceiling = u32::from(outgoing_ports_start()) - if bus { 10_000 } else { 0 };
    let free =
        |port: u32| u16::try_from(port).is_ok_and(|port| TcpListener::bind(("127.0.0.1", port)).is_ok());
    let random = std::collections::hash_map::RandomState::new();
    let span = u64::from(ceiling.saturating_sub(LOWEST).max(1));
    (0u32..10_000)
        .map(|attempt| LOWEST + (random.hash_one(attempt) % span) as u32)
        .find(|&port| port < ceiling && free(port) && (!bus || free(port + 10_000)))
        .and_then(|port| u16::try_from(port).ok())
        .unwrap_or_else(|| panic!("no free port below {ceiling} on 127.0.0.1"))
}

/// The first port of the kernel's range for the local ports of outgoing
/// connections (Linux's `net.ipv4.ip_local_port_range`), 32768 where it
/// cannot be read.
fn outgoing_ports_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .filter(|&start: &u16| start > 21_000)
        .unwrap_or(32_768)
}

/// A path for a unix socket inside `dir`.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join("redis.sock")
}
