//! The CPU time a run costs: the PostgreSQL server's (every process whose
//! command is `postgres`, read from `/proc`) and the load client's.

use std::collections::HashMap;

use tollgate_test_support::process_cpu::cpu_seconds;

/// What a run reads before and after its measurement.
pub(crate) struct Meter {
    /// The bench database's name, to tell its backends from the rest.
    database: String,
    /// The load client's process: this one, or the Node.js driver.
    client: String,
}

/// The CPU seconds used so far by each `postgres` process (by pid, and
/// whether it serves the bench database), and by the client.
pub(crate) struct Reading {
    postgres: HashMap<u32, (f64, bool)>,
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
        Reading {
            postgres: postgres_processes(&self.database),
            client: cpu_seconds(&self.client).unwrap_or(f64::NAN),
        }
    }
}

impl Reading {
    /// The CPU per decision from `self` to `later`, over `decisions`. A
    /// process that started in between counts from zero; one that ended in
    /// between is missed (the runs keep their connections open).
    pub(crate) fn until(&self, later: &Reading, decisions: f64) -> CpuPerDecision {
        let (mut all, mut own) = (0.0, 0.0);
        for (pid, &(after, is_own)) in &later.postgres {
            let before = self.postgres.get(pid).map_or(0.0, |&(cpu, _)| cpu);
            let used = (after - before).max(0.0);
            all += used;
            if is_own {
                own += used;
            }
        }
        let per = |seconds: f64| seconds * 1e6 / decisions;
        CpuPerDecision {
            postgres_us: per(all),
            own_backends_us: per(own),
            client_us: per(later.client - self.client),
        }
    }
}

/// Every process whose command (`/proc/<pid>/comm`) is `postgres`: its
/// CPU seconds so far, and whether its title names `database` (a backend
/// of the bench database: `postgres: 15/main: user database host …`).
fn postgres_processes(database: &str) -> HashMap<u32, (f64, bool)> {
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
            let own = String::from_utf8_lossy(&title).contains(&title_part);
            Some((pid, (cpu_seconds(&pid.to_string())?, own)))
        })
        .collect()
}
