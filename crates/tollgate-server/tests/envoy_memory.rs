//! What a large Envoy configuration costs in memory: at most 1 KB per
//! descriptor once loaded, and no more after a reload of the unchanged file
//! (the previous set is freed).
//!
//! A test binary of its own: the counting allocator installed below counts
//! every allocation of the process, so nothing else may run beside it. The
//! figures are printed:
//!
//! ```text
//! cargo test -p tollgate-server --release --test envoy_memory -- --nocapture
//! ```

use tollgate_test_support::counting_alloc::Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Descriptors in the file: each a limit of its own, with its own rate.
const DESCRIPTORS: usize = 20_000;

/// The most bytes a loaded descriptor may take.
const BUDGET: usize = 1024;

/// Heap bytes allocated and not yet freed, process-wide.
fn live() -> usize {
    usize::try_from(tollgate_test_support::counting_alloc::live()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loaded_envoy_descriptor_takes_at_most_a_kilobyte_and_a_reload_frees_the_old_set() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.yaml");
    tollgate_test_support::envoy_files::write_one_limit_per_descriptor(&file, "big", DESCRIPTORS);
    let before = live();
    let server = tollgate_server::Server::builder()
        .config(&file)
        .listen("127.0.0.1:0".parse().unwrap())
        .grpc_listen("127.0.0.1:0".parse().unwrap())
        .watch_files(false)
        .reload_on_sighup(false)
        .bind()
        .await
        .unwrap();
    let loaded = live().saturating_sub(before);
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
        let now = live().saturating_sub(before);
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
