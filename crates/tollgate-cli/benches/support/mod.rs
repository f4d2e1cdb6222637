//! What the benches that measure `tollgate serve` as a process share:
//! starting it fresh on free ports, waiting until it listens, reading its
//! CPU time, and stopping it.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tollgate_test_support::process_cpu::cpu_seconds;
use tollgate_test_support::redis::free_port;
use tonic::transport::{Channel, Endpoint};

/// A server process under measurement, stopped when dropped.
pub struct Server {
    pub child: Child,
    /// Where it serves Envoy's rate-limit gRPC API.
    pub addr: SocketAddr,
    /// Where tollgate serves `/metrics` (none for a peer).
    pub metrics: Option<SocketAddr>,
    /// Where it serves its HTTP decision API (tollgate's `/v1/decide`, a
    /// peer's own), when it does.
    pub http: Option<SocketAddr>,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGKILL: the benches do not measure draining, and a peer may not
        // stop on SIGTERM at once.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Waits until the server accepts connections on its addresses.
    pub fn wait_ready(mut self, what: &str) -> Self {
        let deadline = Instant::now() + Duration::from_secs(30);
        for addr in std::iter::once(self.addr).chain(self.http) {
            while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
                if let Ok(Some(status)) = self.child.try_wait() {
                    panic!("{what} exited before listening on {addr}: {status}");
                }
                assert!(
                    Instant::now() < deadline,
                    "{what} did not listen on {addr} within 30 s"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self
    }

    /// `n` HTTP/2 connections to its gRPC API, one per channel (tonic's
    /// `connect` opens exactly one).
    pub async fn channels(&self, n: usize) -> Vec<Channel> {
        let mut channels = Vec::with_capacity(n);
        for _ in 0..n {
            let channel = Endpoint::from_shared(format!("http://{}", self.addr))
                .unwrap()
                .connect()
                .await
                .expect("connecting to the server");
            channels.push(channel);
        }
        channels
    }

    /// The process's CPU time (user and system) so far, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds(&self.child.id().to_string()).expect("the server's CPU time, from /proc")
    }
}

/// A free port on loopback, for a server to listen on.
fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// Starts `tollgate serve` (this package's binary) with `configs`, its
/// gRPC API and its HTTP listener on free ports; `SERVE_ARGS` adds
/// arguments, and `SERVER_CPUS` (a `taskset` list such as `1`) runs it on
/// those processors only, so that a bench run itself under `taskset` keeps
/// its client off the server's cores.
pub fn start_tollgate(configs: &[PathBuf]) -> Server {
    let addr = free_addr();
    let binary = env!("CARGO_BIN_EXE_tollgate");
    let mut command = match std::env::var("SERVER_CPUS") {
        Ok(cpus) => {
            let mut taskset = Command::new("taskset");
            taskset.args(["--cpu-list", &cpus, binary]);
            taskset
        }
        Err(_) => Command::new(binary),
    };
    command.arg("serve");
    for config in configs {
        command.arg("--config").arg(config);
    }
    let http = free_addr();
    if let Ok(extra) = std::env::var("SERVE_ARGS") {
        command.args(extra.split_whitespace());
    }
    let child = command
        .arg("--listen")
        .arg(http.to_string())
        .arg("--grpc-listen")
        .arg(addr.to_string())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("starting tollgate serve");
    Server {
        child,
        addr,
        metrics: Some(http),
        http: Some(http),
    }
    .wait_ready("tollgate serve")
}

/// The text of the service's `/metrics` at `addr`.
pub fn metrics_text(addr: SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(addr).expect("connecting to /metrics");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("reading /metrics");
    text
}
