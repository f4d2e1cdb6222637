//! Worker processes for the tests across operating-system processes: the
//! test binary re-run as ignored tests, which print tagged lines.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout};

/// Worker processes, killed if the test ends early.
pub struct Workers(pub Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Reads a worker's output up to the next line holding `tag`, returning
/// what follows the tag (`None` at the end of its output). The harness
/// prints `test <name> ... ` before the first line.
pub fn next_tagged(out: &mut BufReader<ChildStdout>, tag: &str) -> Option<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            return None;
        }
        if let Some(at) = line.find(tag) {
            return Some(line[at + tag.len()..].trim().to_owned());
        }
    }
}
