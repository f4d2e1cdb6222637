//! One HTTP connection (HTTP/1.1 or h2c): served by hyper, watched for
//! slow and idle clients, and closed without losing a request when the
//! service drains.
//!
//! - **Header-read timeout.** An HTTP/1.1 request head must arrive whole
//!   within [`Timeouts::header_read`] of its first byte (of the connection's
//!   start, for the first request); a client trickling its headers is cut
//!   off, holding a connection for no longer than that.
//! - **Idle timeout.** A connection with no request in flight and nothing
//!   received for [`Timeouts::idle`] is closed gracefully (HTTP/2: GOAWAY).
//!   On HTTP/2 only requests count: frames that start none (pings,
//!   settings, a request head trickled in but never finished) do not keep
//!   it open, so a slow or idle HTTP/2 client holds its connection for at
//!   most the idle timeout after its last response.
//! - **Draining.** When the service stops, every response on an HTTP/1.1
//!   connection carries `Connection: close`, so a connection closes after
//!   its request in flight; a connection with no request in flight is
//!   closed at once unless bytes of a request have already reached it
//!   (they are read and answered first). HTTP/2 connections get GOAWAY,
//!   which tells the client which streams were taken.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, Version};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tower::ServiceExt;

/// How long clients may take: set with the server builder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// From a request head's first byte to its end (HTTP/1.1).
    pub(crate) header_read: Duration,
    /// With no request in flight and nothing received.
    pub(crate) idle: Duration,
}

/// What a connection's parts tell its watcher, in milliseconds since the
/// connection was accepted.
#[derive(Default)]
struct Activity {
    /// When the last response was done or, on HTTP/1.1, the last byte was
    /// received.
    last: AtomicU64,
    /// When the first byte of a request head not yet complete arrived,
    /// plus one (0: none pending).
    head_since: AtomicU64,
    /// Requests whose response is not yet done.
    in_flight: AtomicUsize,
    /// The connection speaks HTTP/2 (its first bytes were the preface).
    http2: AtomicBool,
    /// Bytes received so far, up to the four that tell HTTP/2 from
    /// HTTP/1.1.
    sniffed: AtomicUsize,
}

/// The start of HTTP/2's connection preface.
const H2_PREFIX: &[u8] = b"PRI ";

/// Serves `stream` with `router` until the connection ends, the client is
/// too slow, or draining (`draining` turns true) has closed it.
pub(crate) async fn serve(
    stream: TcpStream,
    router: Router,
    timeouts: Timeouts,
    mut draining: watch::Receiver<bool>,
) {
    let opened = Instant::now();
    let fd = raw_fd(&stream);
    let activity = Arc::new(Activity::default());
    // The first request's head is timed from the connection's start.
    activity.head_since.store(1, Ordering::Relaxed);
    let stopping = Arc::new(AtomicBool::new(*draining.borrow()));
    let io = TokioIo::new(Watched {
        stream,
        opened,
        activity: activity.clone(),
    });
    let service = Tracked {
        router,
        opened,
        activity: activity.clone(),
        stopping: stopping.clone(),
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    loop {
        let now = elapsed_ms(opened);
        let check = next_check(&activity, timeouts, now, stopping.load(Ordering::Relaxed));
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!("connection ended with an error: {err}");
                }
                return;
            }
            changed = draining.changed(), if !stopping.load(Ordering::Relaxed) => {
                if changed.is_err() || *draining.borrow() {
                    stopping.store(true, Ordering::Relaxed);
                }
            }
            () = tokio::time::sleep_until(opened + Duration::from_millis(check)) => {}
        }
        match after_wake(&activity, timeouts, opened, &stopping, fd) {
            Wake::Serve => {}
            Wake::End => return,
            Wake::ShutDown => {
                // An idle HTTP/1.1 connection closes at once, an HTTP/2 one
                // after GOAWAY and its streams in flight. The client has the
                // header-read timeout to take part (HTTP/2 waits for the ack
                // of a PING): one that ignores it is dropped then.
                connection.as_mut().graceful_shutdown();
                match tokio::time::timeout(timeouts.header_read, connection.as_mut()).await {
                    Ok(Err(err)) => tracing::debug!("connection ended with an error: {err}"),
                    Ok(Ok(())) => {}
                    Err(_) => tracing::debug!(
                        "the client did not close within {:?} of being asked to: connection dropped",
                        timeouts.header_read
                    ),
                }
                return;
            }
        }
    }
}

/// What a connection does after a wake-up that did not end it (a timeout
/// may be due, or draining has begun).
enum Wake {
    /// It goes on serving.
    Serve,
    /// It ends at once: a request head took too long.
    End,
    /// It shuts down gracefully: idle, or draining with nothing in flight
    /// and no request head pending.
    ShutDown,
}

/// What the connection of `activity`, opened at `opened`, does on waking:
/// ends when a request head took longer than the header-read timeout
/// (HTTP/1.1 only), shuts down when idle for the idle timeout or when
/// `stopping` with nothing in flight, no request head pending and no
/// bytes from the client waiting on `fd`; else goes on serving.
#[inline]
fn after_wake(
    activity: &Activity,
    timeouts: Timeouts,
    opened: Instant,
    stopping: &AtomicBool,
    fd: Fd,
) -> Wake {
    let now = elapsed_ms(opened);
    let in_flight = activity.in_flight.load(Ordering::Acquire);
    let head_since = activity.head_since.load(Ordering::Acquire);
    let http2 = activity.http2.load(Ordering::Relaxed);
    if !http2
        && in_flight == 0
        && head_since > 0
        && now.saturating_sub(head_since - 1) >= millis(timeouts.header_read)
    {
        tracing::debug!(
            "a request head took longer than {:?}: connection closed",
            timeouts.header_read
        );
        return Wake::End;
    }
    let idle =
        in_flight == 0 && now.saturating_sub(activity.last.load(Ordering::Acquire)) >= millis(timeouts.idle);
    let drain_now = stopping.load(Ordering::Relaxed)
        && in_flight == 0
        && (http2 || head_since == 0 || head_since == 1 && activity.sniffed.load(Ordering::Relaxed) == 0)
        && !bytes_waiting(fd);
    if idle || drain_now {
        Wake::ShutDown
    } else {
        Wake::Serve
    }
}

/// The next time, in milliseconds since the connection opened, at which
/// something may be due: a timeout, or (draining) another look at whether
/// the connection may be closed.
fn next_check(activity: &Activity, timeouts: Timeouts, now: u64, stopping: bool) -> u64 {
    if stopping {
        return now + 5;
    }
    let idle = activity.last.load(Ordering::Acquire) + millis(timeouts.idle);
    // HTTP/2 has no head timeout (its idle timeout bounds slow heads).
    let head = match activity.head_since.load(Ordering::Acquire) {
        _ if activity.http2.load(Ordering::Relaxed) => u64::MAX,
        0 => u64::MAX,
        since => since - 1 + millis(timeouts.header_read),
    };
    idle.min(head).max(now + 1)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 2)
}

fn elapsed_ms(opened: Instant) -> u64 {
    u64::try_from(opened.elapsed().as_millis()).unwrap_or(u64::MAX / 2)
}

#[cfg(unix)]
type Fd = std::os::fd::RawFd;
#[cfg(not(unix))]
type Fd = ();

#[cfg(unix)]
fn raw_fd(stream: &TcpStream) -> Fd {
    std::os::fd::AsRawFd::as_raw_fd(stream)
}

#[cfg(not(unix))]
fn raw_fd(_: &TcpStream) -> Fd {}

/// Whether bytes from the client wait in the socket, unread. The
/// descriptor is the connection's own: the connection future that owns the
/// stream is alive in the caller.
#[cfg(unix)]
fn bytes_waiting(fd: Fd) -> bool {
    let mut byte = 0u8;
    // SAFETY: `fd` is an open socket for as long as the caller holds the
    // connection, and the buffer is one valid byte.
    let n = unsafe {
        libc::recv(
            fd,
            std::ptr::addr_of_mut!(byte).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

#[cfg(not(unix))]
fn bytes_waiting(_: Fd) -> bool {
    false
}

/// The TCP stream, recording what arrives.
struct Watched {
    stream: TcpStream,
    opened: Instant,
    activity: Arc<Activity>,
}

impl Watched {
    fn received(&self, bytes: &[u8]) {
        let activity = &self.activity;
        let now = elapsed_ms(self.opened);
        if !activity.http2.load(Ordering::Relaxed) {
            activity.last.store(now, Ordering::Release);
        }
        let sniffed = activity.sniffed.load(Ordering::Relaxed);
        if sniffed < H2_PREFIX.len() {
            let take = (H2_PREFIX.len() - sniffed).min(bytes.len());
            if bytes[..take] == H2_PREFIX[sniffed..sniffed + take] {
                activity.sniffed.store(sniffed + take, Ordering::Relaxed);
                if sniffed + take == H2_PREFIX.len() {
                    activity.http2.store(true, Ordering::Relaxed);
                }
            } else {
                activity.sniffed.store(usize::MAX, Ordering::Relaxed);
            }
        }
        if activity.in_flight.load(Ordering::Acquire) == 0 && activity.head_since.load(Ordering::Acquire) == 0
        {
            activity.head_since.store(now + 1, Ordering::Release);
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = poll {
            if buf.filled().len() > before {
                self.received(&buf.filled()[before..]);
            }
        }
        poll
    }
}

/// Writes exactly as the stream does.
impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The router, counting requests in flight and closing HTTP/1.1
/// connections after their response while draining.
#[derive(Clone)]
struct Tracked {
    router: Router,
    opened: Instant,
    activity: Arc<Activity>,
    stopping: Arc<AtomicBool>,
}

/// Counts a request in flight until dropped.
struct InFlight {
    opened: Instant,
    activity: Arc<Activity>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.activity
            .last
            .store(elapsed_ms(self.opened), Ordering::Release);
        self.activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl hyper::service::Service<Request<Incoming>> for Tracked {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.activity.in_flight.fetch_add(1, Ordering::AcqRel);
        // The head is complete: the next one is timed from its first byte.
        self.activity.head_since.store(0, Ordering::Release);
        let guard = InFlight {
            opened: self.opened,
            activity: self.activity.clone(),
        };
        let http1 = request.version() < Version::HTTP_2;
        let router = self.router.clone();
        let stopping = self.stopping.clone();
        Box::pin(async move {
            let Ok(mut response) = router.oneshot(request.map(Body::new)).await;
            if http1 && stopping.load(Ordering::Relaxed) {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            drop(guard);
            Ok(response)
        })
    }
}
