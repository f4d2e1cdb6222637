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
/// whether it serves the bench database), by the postmaster's children
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
            ended: postmaster(&postgres)
                .and_then(|pid| reaped_children_cpu_seconds(&pid.to_string()))
                .unwrap_or(0.0),
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
    /// The postmaster: its title is its command line (`…/postgres -D …`),
    /// where its children's read `postgres: …`.
    postmaster: bool,
}

/// The postmaster's pid.
fn postmaster(processes: &HashMap<u32, Process>) -> Option<u32> {
    processes.iter().find(|(_, p)| p.postmaster).map(|(&pid, _)| pid)
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
            let title = String::from_utf8_lossy(&title);
            let process = Process {
                cpu: cpu_seconds(&pid.to_string())?,
                own: title.contains(&title_part),
                postmaster: !title.starts_with("postgres: "),
            };
            Some((pid, process))
        })
        .collect()
}
