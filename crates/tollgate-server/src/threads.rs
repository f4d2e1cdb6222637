//! The connection threads: each runs a single-threaded async runtime, and
//! every connection is served wholly on one of them, the one serving the
//! fewest connections when it is accepted.
//!
//! A few HTTP/2 connections carry many requests each (Envoy opens one or
//! two per worker pool). On a work-stealing runtime, a connection's
//! streams, each a task of its own, are taken by whichever worker is free,
//! and every request crosses threads twice (the request read by the
//! connection's task, its answer written back by it): the threads wake
//! each other, and on a busy machine a request waits whenever the thread
//! it needs is not running. Served on one thread, a connection's requests
//! run in turn, in the order they arrived, with no thread woken for them;
//! the connections, spread over the threads, use every core.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The threads, until dropped (which stops them: a connection still on one
/// is closed).
pub(crate) struct ConnectionThreads {
    threads: Vec<Thread>,
}

/// One connection thread.
struct Thread {
    handle: Handle,
    /// Connections it serves now.
    open: Arc<AtomicUsize>,
    /// Completes the thread's `block_on` when sent or dropped.
    _stop: oneshot::Sender<()>,
}

/// A connection's place on a thread, released when the connection ends.
pub(crate) struct Seat {
    open: Arc<AtomicUsize>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnectionThreads {
    /// Starts `count` threads (none for 0: connections are then served on
    /// the runtime that accepts them).
    ///
    /// # Errors
    ///
    /// The error of a runtime or a thread that could not be started.
    pub(crate) fn start(count: usize) -> std::io::Result<Self> {
        let mut threads = Vec::with_capacity(count);
        for i in 0..count {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let handle = runtime.handle().clone();
            let (stop, stopped) = oneshot::channel::<()>();
            std::thread::Builder::new()
                .name(format!("tollgate-conn-{i}"))
                .spawn(move || {
                    // Runs the connections spawned onto the runtime until
                    // the threads are dropped; dropping the runtime then
                    // closes any still open.
                    let _ = runtime.block_on(stopped);
                })?;
            threads.push(Thread {
                handle,
                open: Arc::new(AtomicUsize::new(0)),
                _stop: stop,
            });
        }
        Ok(Self { threads })
    }

    /// The runtime of the thread serving the fewest connections, with the
    /// new connection's seat on it; `None` without threads.
    pub(crate) fn pick(&self) -> Option<(&Handle, Seat)> {
        let thread = self
            .threads
            .iter()
            .min_by_key(|thread| thread.open.load(Ordering::Relaxed))?;
        thread.open.fetch_add(1, Ordering::Relaxed);
        Some((
            &thread.handle,
            Seat {
                open: thread.open.clone(),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_go_to_the_least_busy_thread_and_run_there() {
        let threads = ConnectionThreads::start(2).unwrap();
        let (first, a) = threads.pick().unwrap();
        let first = first.clone();
        let (second, b) = threads.pick().unwrap();
        let second = second.clone();
        let names = |handle: &Handle| {
            let (tx, rx) = std::sync::mpsc::channel();
            handle.spawn(async move {
                tx.send(std::thread::current().name().map(str::to_owned)).unwrap();
            });
            rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap()
        };
        let (one, two) = (names(&first), names(&second));
        assert_ne!(one, two, "two connections share a thread while another is free");
        assert!(one.unwrap().starts_with("tollgate-conn-"));
        drop(a);
        // The first thread is free again: the next connection goes there.
        let (third, _c) = threads.pick().unwrap();
        assert_eq!(names(third), names(&first));
        drop(b);
        assert!(ConnectionThreads::start(0).unwrap().pick().is_none());
    }
}
