//! Accepting connections: at most [`Limits::max_connections`] open at once
//! over both listeners, each connection (HTTP, or gRPC for the Envoy API)
//! served by [`connection`], and draining within [`Limits::drain`] when the
//! service stops.
//!
//! Each connection is served on one of the listener's [connection
//! threads](crate::threads) (the gRPC listener's), or on the accepting
//! runtime.
//!
//! At the cap, accepting pauses (new connections wait in the kernel's
//! listen backlog) until one closes, and the service says so once in the
//! log until the number falls again.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::connection::{self, Timeouts};
use crate::threads::ConnectionThreads;

/// What the listeners allow.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Open connections, both listeners together.
    pub(crate) max_connections: usize,
    /// How long clients may take.
    pub(crate) timeouts: Timeouts,
    /// How long draining may take before the connections still open are
    /// closed.
    pub(crate) drain: Duration,
    /// How long the service keeps serving, not ready, once told to stop
    /// and before its listeners close.
    pub(crate) drain_delay: Duration,
}

/// The open-connection budget both listeners take from.
#[derive(Clone)]
pub(crate) struct Budget {
    permits: Arc<Semaphore>,
    max: usize,
}

impl Budget {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// A permit for one more connection, waiting (and saying so in the log,
    /// once per time the cap is reached) while `max` are open.
    async fn acquire(&self, listener: &str, full: &mut bool) -> OwnedSemaphorePermit {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            *full = false;
            return permit;
        }
        if !*full {
            *full = true;
            tracing::warn!(
                "{} connections are open, the most --max-connections allows: the {listener} listener \
                 accepts no more until one closes (they wait in the listen backlog)",
                self.max
            );
        }
        // The semaphore is never closed.
        self.permits
            .clone()
            .acquire_owned()
            .await
            .expect("the connection budget is never closed")
    }
}

impl Budget {
    /// The next connection on `listener` (named `what` in the log) with its
    /// permit, taken first: at the cap, nothing is accepted.
    async fn accept(
        &self,
        listener: &TcpListener,
        what: &str,
        full: &mut bool,
    ) -> (TcpStream, OwnedSemaphorePermit) {
        let permit = self.acquire(what, full).await;
        (accept(listener, what).await, permit)
    }
}

/// Accepts on `listener`, retrying after errors such as running out of
/// file descriptors, which pass once connections close.
async fn accept(listener: &TcpListener, what: &str) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                return stream;
            }
            Err(err) => {
                tracing::error!(
                    "the {what} listener cannot accept a connection: {err}; trying again in 100 ms"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves `router` on `listener` (named `what` in the log: HTTP, or gRPC
/// for the Envoy API's routes) until `stop` completes, then closes the
/// listener and drains: returns once every connection has closed, or at
/// the drain deadline, closing those still open.
pub(crate) async fn serve_http(
    listener: TcpListener,
    what: &'static str,
    router: Router,
    limits: Limits,
    budget: Budget,
    threads: Option<Arc<ConnectionThreads>>,
    stop: impl Future<Output = ()>,
) {
    let (drain_tx, drain_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut full = false;
    tokio::pin!(stop);
    loop {
        let (stream, permit) = tokio::select! {
            accepted = budget.accept(&listener, what, &mut full) => accepted,
            () = &mut stop => break,
        };
        let router = router.clone();
        let drain = drain_rx.clone();
        match threads.as_deref().and_then(ConnectionThreads::pick) {
            Some((thread, seat)) => {
                // The socket leaves the accepting runtime's reactor and joins
                // its thread's: otherwise every event on it would be seen by
                // the accepting runtime and handed across threads to the
                // connection's task (a wake-up, a context switch and an
                // eventfd write per request).
                let stream = match stream.into_std() {
                    Ok(stream) => stream,
                    Err(err) => {
                        tracing::warn!(
                            "the {what} listener could not hand a connection to its thread: {err}"
                        );
                        continue;
                    }
                };
                connections.spawn_on(
                    async move {
                        match TcpStream::from_std(stream) {
                            Ok(stream) => connection::serve(stream, router, limits.timeouts, drain).await,
                            Err(err) => {
                                tracing::warn!("a {what} connection could not join its thread: {err}")
                            }
                        }
                        drop((permit, seat));
                    },
                    thread,
                )
            }
            None => connections.spawn(async move {
                connection::serve(stream, router, limits.timeouts, drain).await;
                drop(permit);
            }),
        };
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = drain_tx.send(true);
    tracing::info!(
        connections = connections.len(),
        "{what} listener closed; draining its connections"
    );
    let drained = tokio::time::timeout(limits.drain, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "{} {what} connections were still open after the drain timeout of {:?}: closed",
            connections.len(),
            limits.drain
        );
        connections.shutdown().await;
    }
}
