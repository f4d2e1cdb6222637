//! A `tollgate serve` process under test, and plain HTTP/1.1 exchanges
//! with it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The process, killed if a test fails before it exits.
pub struct Serve {
    child: Child,
    /// Lines of its standard error, as they come.
    log: mpsc::Receiver<String>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    /// `tollgate serve ARGS` from this build.
    pub fn start(args: &[&str]) -> Serve {
        Serve::start_binary(Path::new(env!("CARGO_BIN_EXE_tollgate")), args)
    }

    /// `BINARY serve ARGS`: another build of the command, such as the one a
    /// package installs.
    pub fn start_binary(binary: &Path, args: &[&str]) -> Serve {
        let mut child = Command::new(binary)
            .arg("serve")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, log) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Serve { child, log }
    }

    /// Waits for a log line containing `text`.
    pub fn wait_for_log(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) if line.contains(text) => return line,
                Ok(_) => {}
                Err(err) => panic!("no log line with {text:?}: {err}"),
            }
        }
    }

    /// The process's id, for reading its `/proc` entries.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends the signal `name` (`TERM`, `HUP`, …) to the process.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits, at most 20 s, for the process to exit.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the process did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One HTTP/1.1 exchange over a new connection: the answer's text.
pub fn http(port: u16, request: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// The text of `POST path` with the JSON `body`, on a connection closed
/// after the answer.
pub fn post_request(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// `POST path` with the JSON `body` on a new connection, closed after the
/// answer: the answer's text.
pub fn post(port: u16, path: &str, body: &str) -> String {
    http(port, &post_request(path, body))
}

/// `GET path` on a new connection, closed after the answer.
pub fn get(port: u16, path: &str) -> String {
    http(
        port,
        &format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"),
    )
}
