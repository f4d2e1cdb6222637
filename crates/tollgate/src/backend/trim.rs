//! Handing memory that the process has freed back to the operating system.
//!
//! glibc's allocator keeps freed blocks in its heaps for reuse. After a
//! million keys expire, the tables give back every byte they held, yet the
//! process can stay tens of megabytes above its baseline for as long as it
//! runs, depending on how the freed blocks lie in the heap. `malloc_trim`
//! returns those free pages to the kernel. Other allocators (musl, jemalloc,
//! mimalloc as a global allocator) manage this themselves; there this is a
//! no-op, or trims a glibc heap that then holds little.

/// Asks glibc to return free heap memory to the kernel (a few tens of
/// microseconds after a million keys expired); a no-op elsewhere.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn release_free_memory() {
    extern "C" {
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
    // SAFETY: malloc_trim takes no pointers and only releases memory that is
    // already free; glibc locks its own arenas, so any thread may call it.
    unsafe {
        malloc_trim(0);
    }
}

/// Asks the allocator to return free memory (nothing to do on this target).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn release_free_memory() {}
