//! The service's request histograms do not grow with the requests it
//! answers when nobody scrapes `/metrics`: the recorder the service
//! installs has its samples drained every second
//! ([`tollgate_server::metrics::UPKEEP_INTERVAL`]), off the async runtime.
//!
//! A test binary of its own: the counting allocator installed below counts
//! every allocation of the process, so nothing else may run beside it.

use std::time::{Duration, Instant};

use tollgate_test_support::counting_alloc::Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Samples recorded, as many requests would record.
const SAMPLES: usize = 1_000_000;

/// Heap bytes allocated and not yet freed, process-wide.
fn live() -> isize {
    tollgate_test_support::counting_alloc::live()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unscraped_request_histograms_are_drained_instead_of_growing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policies.yaml");
    std::fs::write(&file, "tollgate:\n  default: { limit: 10, window: 1m }\n").unwrap();
    // Building the service installs its recorder.
    let _server = tollgate_server::Server::builder()
        .config(&file)
        .listen("127.0.0.1:0".parse().unwrap())
        .watch_files(false)
        .reload_on_sighup(false)
        .bind()
        .await
        .unwrap();
    let histogram = metrics::histogram!(
        tollgate_server::metrics::DURATION,
        "protocol" => "test",
        "endpoint" => "samples"
    );
    histogram.record(0.001);
    let before = live();
    for _ in 0..SAMPLES {
        histogram.record(0.001);
    }
    let recorded = live() - before;
    println!("{SAMPLES} samples recorded: {recorded} bytes held until drained");
    // Each sample is kept (8 bytes) until drained; an upkeep during the
    // loop only lowers this.
    assert!(
        recorded > 0,
        "the recorder keeps no samples: the test measures nothing"
    );
    let deadline = Instant::now() + 5 * tollgate_server::metrics::UPKEEP_INTERVAL + Duration::from_secs(5);
    loop {
        // Freed blocks are reclaimed when the recorder is next touched.
        histogram.record(0.001);
        let held = live() - before;
        if held < 64 * 1024 {
            println!("drained: {held} bytes held");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{held} bytes still held by {SAMPLES} histogram samples nobody scraped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
