//! The CPU time a run costs: the PostgreSQL server's (every process whose
//! command is `postgres`, read from `/proc`, and those of them that ended,
//! from the postmaster's reaped children) and the load client's.

use std::collections::HashMap;

use tollgate_test_support::process_cpu::{cpu_seconds, reaped_children_cpu_seconds};

/// What a run reads before and after its measurement.
pub(crate) struct Meter {
    /// The bench database's name, to tell its backends from the rest.
    database: String,
    /// The load client's process: this one, or the Node.js driver.
    client: String,
}

/// The CPU seconds used so far by each `postgres` process (by pid, and
/// whether it serves the bench database), by the postmasters' children
/// that ended, and by the client.
pub(crate) struct Reading {
    postgres: HashMap<u32, (f64, bool)>,
    ended: f64,
    client: f64,
}

/// CPU µs per decision between two readings.
#[derive(Clone, Copy, Default)]
pub(crate) struct CpuPerDecision {
    /// Every `postgres` process: the server's background processes, every
    /// backend (other databases' too).
    pub(crate) postgres_us: f64,
    /// The backends connected to the bench database only.
    pub(crate) own_backends_us: f64,
    /// The load client.
    pub(crate) client_us: f64,
}

impl Meter {
    /// A meter of the server's processes and of `client` (a pid, or
    /// `self`).
    pub(crate) fn new(database: &str, client: impl Into<String>) -> Self {
        Self {
            database: database.to_owned(),
            client: client.into(),
        }
    }

    /// The CPU time used so far.
    pub(crate) fn read(&self) -> Reading {
        let postgres = postgres_processes(&self.database);
        Reading {
            ended: ended_children(&postgres),
            postgres: postgres
                .into_iter()
                .map(|(pid, p)| (pid, (p.cpu, p.own)))
                .collect(),
            client: cpu_seconds(&self.client).unwrap_or(f64::NAN),
        }
    }
}

impl Reading {
    /// Every `postgres` process's CPU so far, the ended ones' included.
    fn total(&self) -> f64 {
        self.ended + self.postgres.values().map(|&(cpu, _)| cpu).sum::<f64>()
    }

    /// The CPU per decision from `self` to `later`, over `decisions`. The
    /// server's counts every process, the living and, through the
    /// postmaster, those that ended; the bench database's backends count
    /// from their reading before (or from zero if they started after).
    pub(crate) fn until(&self, later: &Reading, decisions: f64) -> CpuPerDecision {
        let all = later.total() - self.total();
        let own: f64 = later
            .postgres
            .iter()
            .filter(|(_, &(_, is_own))| is_own)
            .map(|(pid, &(after, _))| {
                let before = self.postgres.get(pid).map_or(0.0, |&(cpu, _)| cpu);
                if after >= before {
                    after - before
                } else {
                    after
                }
            })
            .sum();
        let per = |seconds: f64| seconds * 1e6 / decisions;
        CpuPerDecision {
            postgres_us: per(all),
            own_backends_us: per(own),
            client_us: per(later.client - self.client),
        }
    }
}

/// A `postgres` process as read from `/proc`.
struct Process {
    cpu: f64,
    /// A backend of the bench database.
    own: bool,
    /// Its parent's pid.
    parent: u32,
}

/// The CPU of the ended children of every postmaster (a `postgres`
/// process whose parent is not one: one per server on the machine).
fn ended_children(processes: &HashMap<u32, Process>) -> f64 {
    processes
        .iter()
        .filter(|(_, p)| !processes.contains_key(&p.parent))
        .filter_map(|(pid, _)| reaped_children_cpu_seconds(&pid.to_string()))
        .sum()
}

/// The parent's pid of process `pid`, from `/proc/<pid>/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name in parentheses: the state, then the parent.
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

/// Every process whose command (`/proc/<pid>/comm`) is `postgres`: its
/// CPU seconds so far, and whether its title names `database` (a backend
/// of the bench database: `postgres: 15/main: user database host …`).
fn postgres_processes(database: &str) -> HashMap<u32, Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    let title_part = format!(" {database} ");
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            if comm.trim_end() != "postgres" {
                return None;
            }
            let title = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let process = Process {
                cpu: cpu_seconds(&pid.to_string())?,
                own: String::from_utf8_lossy(&title).contains(&title_part),
                parent: parent_of(pid)?,
            };
            Some((pid, process))
        })
        .collect()
}
