//! What a large Envoy configuration costs in memory: at most 1 KB per
//! descriptor once loaded, and no more after a reload of the unchanged file
//! (the previous set is freed).
//!
//! A test binary of its own: the counting allocator below counts every
//! allocation of the process, so nothing else may run beside it. The
//! figures are printed:
//!
//! ```text
//! cargo test -p tollgate-server --release --test envoy_memory -- --nocapture
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes allocated and not yet freed.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a
// counter is updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Descriptors in the file: each a limit of its own, with its own rate.
const DESCRIPTORS: usize = 20_000;

/// The most bytes a loaded descriptor may take.
const BUDGET: usize = 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loaded_envoy_descriptor_takes_at_most_a_kilobyte_and_a_reload_frees_the_old_set() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.yaml");
    let mut text = String::from("domain: big\ndescriptors:\n");
    for i in 0..DESCRIPTORS {
        text.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{ unit: minute, requests_per_unit: {} }}\n",
            1_000_000 + i
        ));
    }
    std::fs::write(&file, text).unwrap();
    let before = LIVE.load(Ordering::Relaxed);
    let server = tollgate_server::Server::builder()
        .config(&file)
        .listen("127.0.0.1:0".parse().unwrap())
        .grpc_listen("127.0.0.1:0".parse().unwrap())
        .watch_files(false)
        .reload_on_sighup(false)
        .bind()
        .await
        .unwrap();
    let loaded = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    let per_descriptor = loaded / DESCRIPTORS;
    println!(
        "{DESCRIPTORS} descriptors: {:.1} MB allocated, {per_descriptor} bytes per descriptor",
        loaded as f64 / 1e6
    );
    assert!(
        per_descriptor <= BUDGET,
        "{per_descriptor} bytes per descriptor, above the budget of {BUDGET}"
    );
    let reloader = server.reloader();
    reloader.reload().await.unwrap();
    // The limiters are kept and the rest of the old set is freed, on a
    // blocking thread after the swap: wait for it, up to a deadline. What
    // may stay is a tenth of the budget per descriptor.
    let bound = loaded + DESCRIPTORS * BUDGET / 10;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let reloaded = loop {
        let now = LIVE.load(Ordering::Relaxed).saturating_sub(before);
        if now <= bound || std::time::Instant::now() > deadline {
            break now;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    println!(
        "after a reload of the unchanged file: {:.1} MB",
        reloaded as f64 / 1e6
    );
    assert!(
        reloaded <= bound,
        "a reload grew the memory from {loaded} to {reloaded} bytes"
    );
    drop(server);
}
