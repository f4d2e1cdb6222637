//! The CPU time a process has used, read from `/proc` (Linux), for
//! benchmarks that report a server's CPU time per request.

/// The CPU time (user and system) process `pid` (or `self`) has used so
/// far, in seconds; `None` where `/proc/<pid>/stat` cannot be read.
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may
    // hold spaces: state is the first, utime the 12th and stime the 13th.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ').skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / ticks_per_second())
}

/// The CPU time (user and system) of the children that process `pid` has
/// waited for (`cutime` and `cstime`), in seconds: what its processes that
/// ended have used; `None` where `/proc/<pid>/stat` cannot be read.
pub fn reaped_children_cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ').skip(13);
    let cutime: u64 = fields.next()?.parse().ok()?;
    let cstime: u64 = fields.next()?.parse().ok()?;
    Some((cutime + cstime) as f64 / ticks_per_second())
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 on Linux), read once.
fn ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_used_cpu_time_and_it_grows() {
        let before = super::cpu_seconds("self").unwrap();
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = super::cpu_seconds("self").unwrap();
        assert!(
            after >= before + 0.01,
            "{before} s then {after} s after 50 ms of work"
        );
        assert_eq!(super::cpu_seconds("no-such-process"), None);
    }

    #[test]
    fn a_child_waited_for_counts_once_it_has_ended() {
        let before = super::reaped_children_cpu_seconds("self").unwrap();
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"])
            .status()
            .unwrap();
        assert!(status.success());
        let after = super::reaped_children_cpu_seconds("self").unwrap();
        assert!(
            after >= before + 0.01,
            "{before} s then {after} s after a child's busy loop"
        );
    }
}
