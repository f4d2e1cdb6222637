//! Worker processes for the tests across operating-system processes: the
//! test binary re-run as one of its own ignored tests, which talks with
//! the test that started it in lines tagged with the worker test's tag.
//!
//! The exchange, one [`WorkerTest`] describing both sides:
//!
//! 1. [`Workers::start`] runs `n` copies of the current test binary, each
//!    running only the ignored worker test, with the environment given
//!    (how a worker knows what to do);
//! 2. each worker sets itself up (connects) and calls [`WorkerTest::ready`],
//!    which prints `<tag> ready` and waits for `go` on its standard input;
//! 3. once every worker is ready, [`Workers::start`] writes `go` to all of
//!    them, so that they start working at the same moment;
//! 4. each worker prints its results with [`WorkerTest::say`] and ends with
//!    [`WorkerTest::done`]; [`Workers::finish`] returns each worker's lines
//!    and checks that every worker exited successfully.
//!
//! A worker that ends early or fails is named in the test's failure, with
//! its exit status and its standard error.

use std::fmt::Display;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;

/// The ignored test a worker process runs, and the tag of the lines it
/// prints for the test that started it.
#[derive(Debug, Clone)]
pub struct WorkerTest {
    /// The test's name as the harness filters it (`module::name`, without
    /// the test binary's crate name).
    name: String,
    tag: &'static str,
}

impl WorkerTest {
    /// The ignored test `test` of the module whose `module_path!()` is
    /// `module`, printing lines that start with `tag`.
    pub fn new(module: &str, test: &str, tag: &'static str) -> Self {
        let module = module.split_once("::").map_or("", |(_, rest)| rest);
        let name = if module.is_empty() {
            test.to_owned()
        } else {
            format!("{module}::{test}")
        };
        Self { name, tag }
    }

    /// In a worker: says `ready`, then blocks until the test that started
    /// it says `go`.
    ///
    /// # Panics
    ///
    /// If standard input ends or says anything else.
    pub fn ready(&self) {
        self.say("ready");
        let mut go = String::new();
        std::io::stdin()
            .read_line(&mut go)
            .expect("reading the worker's standard input");
        assert_eq!(go.trim(), "go", "the worker was told {go:?} instead of go");
    }

    /// In a worker: prints one line of results for the test that started it.
    pub fn say(&self, line: impl Display) {
        println!("{} {line}", self.tag);
    }

    /// In a worker: says that it printed all its results.
    pub fn done(&self) {
        self.say("done");
    }
}

/// One worker process: its handle, its standard output and the thread
/// collecting its standard error.
struct Worker {
    child: Child,
    out: BufReader<ChildStdout>,
    err: Option<JoinHandle<String>>,
}

/// Worker processes of the current test binary, started by
/// [`Workers::start`]; the ones still running are killed if the test ends
/// early.
pub struct Workers {
    test: WorkerTest,
    workers: Vec<Worker>,
}

impl Workers {
    /// Starts `n` worker processes running `test`, each with the variables
    /// `env` in its environment, waits until every one of them says
    /// `ready`, then tells them all to go.
    ///
    /// # Panics
    ///
    /// If a worker cannot be started, or ends before it is ready (naming
    /// it, with its exit status and standard error).
    #[track_caller]
    pub fn start(test: &WorkerTest, n: usize, env: &[(&str, &str)]) -> Self {
        let exe = std::env::current_exe().expect("the test binary's path");
        let args = [
            "--ignored",
            "--exact",
            &test.name,
            "--nocapture",
            "--test-threads",
            "1",
        ];
        let workers = (0..n)
            .map(|i| {
                let mut child = Command::new(&exe)
                    .args(args)
                    .envs(env.iter().copied())
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap_or_else(|err| panic!("cannot start worker {i} ({}): {err}", test.name));
                let out = BufReader::new(child.stdout.take().expect("piped"));
                let mut stderr = child.stderr.take().expect("piped");
                let err = std::thread::spawn(move || {
                    let mut text = String::new();
                    let _ = stderr.read_to_string(&mut text);
                    text
                });
                Worker {
                    child,
                    out,
                    err: Some(err),
                }
            })
            .collect();
        let mut workers = Self {
            test: test.clone(),
            workers,
        };
        for i in 0..n {
            workers.expect(i, "ready");
        }
        for (i, worker) in workers.workers.iter_mut().enumerate() {
            let mut stdin = worker.child.stdin.take().expect("piped");
            stdin
                .write_all(b"go\n")
                .unwrap_or_else(|err| panic!("cannot tell worker {i} ({}) to go: {err}", test.name));
        }
        workers
    }

    /// The next line worker `i` said (without its tag).
    ///
    /// # Panics
    ///
    /// If the worker's output ends first, naming the worker with its exit
    /// status and standard error.
    #[track_caller]
    pub fn next_line(&mut self, i: usize) -> String {
        let tag = self.test.tag;
        let mut line = String::new();
        loop {
            line.clear();
            let read = self.workers[i].out.read_line(&mut line);
            if read.is_err() || read.is_ok_and(|n| n == 0) {
                let (status, stderr) = self.end(i);
                panic!(
                    "worker {i} of {} ({}) stopped before its next line: {status}; its standard error:\n{stderr}",
                    self.workers.len(),
                    self.test.name
                );
            }
            // The harness prints `test <name> ... ` before the first line.
            if let Some(at) = line.find(tag) {
                return line[at + tag.len()..].trim().to_owned();
            }
        }
    }

    /// Reads worker `i`'s next line and checks that it is `expected`.
    ///
    /// # Panics
    ///
    /// If it is not, or the worker stopped first, naming the worker.
    #[track_caller]
    pub fn expect(&mut self, i: usize, expected: &str) {
        let line = self.next_line(i);
        assert_eq!(
            line, expected,
            "worker {i} ({}) said {line:?} instead of {expected:?}",
            self.test.name
        );
    }

    /// Reads every worker's lines up to its `done` and waits for it to
    /// exit; returns each worker's lines, in the order the workers were
    /// started.
    ///
    /// # Panics
    ///
    /// If a worker stops before `done` or exits unsuccessfully, naming it,
    /// with its exit status and standard error.
    #[track_caller]
    pub fn finish(mut self) -> Vec<Vec<String>> {
        let mut outputs = Vec::new();
        for i in 0..self.workers.len() {
            let mut lines = Vec::new();
            loop {
                let line = self.next_line(i);
                if line == "done" {
                    break;
                }
                lines.push(line);
            }
            let (status, stderr) = self.end(i);
            assert!(
                status.success(),
                "worker {i} of {} ({}) failed: {status}; its standard error:\n{stderr}",
                self.workers.len(),
                self.test.name
            );
            outputs.push(lines);
        }
        outputs
    }

    /// Kills worker `i` (`SIGKILL` on Unix) and waits until it is gone.
    ///
    /// # Panics
    ///
    /// If the worker cannot be killed.
    #[track_caller]
    pub fn kill(&mut self, i: usize) {
        let child = &mut self.workers[i].child;
        child
            .kill()
            .unwrap_or_else(|err| panic!("cannot kill worker {i} ({}): {err}", self.test.name));
        let _ = child.wait();
    }

    /// Waits for worker `i` to exit: its exit status and standard error.
    fn end(&mut self, i: usize) -> (ExitStatus, String) {
        let worker = &mut self.workers[i];
        let status = worker
            .child
            .wait()
            .unwrap_or_else(|err| panic!("cannot wait for worker {i} ({}): {err}", self.test.name));
        let stderr = worker
            .err
            .take()
            .and_then(|err| err.join().ok())
            .unwrap_or_default();
        (status, stderr)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for worker in &mut self.workers {
            let _ = worker.child.kill();
            let _ = worker.child.wait();
        }
    }
}

/// In a worker: a multi-threaded runtime of two threads for its work.
///
/// # Panics
///
/// If the runtime cannot be built.
pub fn worker_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the worker's runtime")
}

/// The `N` space-separated fields of a worker's line.
///
/// # Panics
///
/// If the line has another number of fields, quoting it.
pub fn fields<const N: usize>(line: &str) -> [&str; N] {
    let fields: Vec<&str> = line.split(' ').collect();
    fields
        .try_into()
        .unwrap_or_else(|_| panic!("unexpected worker line {line:?}: not {N} fields"))
}
