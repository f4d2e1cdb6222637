//! A real `redis-server` for a test: started on a free port of 127.0.0.1
//! (never 6379), killed when dropped or when the test says so.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A backend on the Redis at `url`, connected as a policy file that names
/// it connects one (`redis_url`), so that the middleware is tested on the
/// backend the service and policy files use.
pub async fn backend(url: &str) -> tollgate_config::AnyBackend {
    let text = format!("tollgate:\n  redis_url: {url}\n  default: {{ limit: 1, window: 1s }}\n");
    tollgate_config::PolicyFile::from_str(&text, tollgate_config::Format::Yaml, "redis.yaml")
        .unwrap_or_else(|err| panic!("{err}"))
        .backend()
        .await
        .unwrap_or_else(|err| panic!("{err}"))
}

/// A `redis-server` child process.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a server and waits until it answers `PING`.
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &dir.path().display().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed to run these tests");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ping(port) {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("redis-server on port {port} exited at start: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {port} did not answer PING"
            );
            // Waiting for the process to listen.
            std::thread::sleep(Duration::from_millis(10));
        }
        Self {
            child: Some(child),
            port,
            _dir: dir,
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether the server on `port` answers a RESP `PING`.
fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 16];
    stream.write_all(b"PING\r\n").is_ok() && matches!(stream.read(&mut buf), Ok(n) if n > 0 && buf[0] == b'+')
}
