//! Pinning a bench's threads to cores, shared by the benches that
//! include it (`#[path = "support/cpu.rs"] mod cpu;`).

/// Pins the calling thread to the `n`-th CPU it may run on (Linux only;
/// elsewhere the scheduler places it), so that a thread keeps one core
/// from round to round, as a server's pinned workers do.
pub fn pin_to_cpu(n: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: `cpu_set_t` is plain data, and the calls read and write only
    // the set passed to them.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) != 0 {
            return;
        }
        let Some(cpu) = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &allowed))
            .nth(n)
        else {
            return;
        };
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = n;
}
