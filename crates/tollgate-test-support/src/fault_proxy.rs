//! A TCP proxy that injects network faults between clients and a server
//! (a Redis): added latency with jitter, a bandwidth limit, stalls, dropped
//! connections, black holes, half-open sockets and one-way partitions. The
//! machines the tests run on cannot route a namespace through `tc netem`,
//! so the faults are made here, on the byte streams, and changed while the
//! proxy runs ([`FaultProxy::set`]).
//!
//! Every accepted connection gets one thread per direction, which reads
//! what arrives and forwards it as the faults in force say. Threads, not
//! an async runtime, so that the proxy never shares a runtime (or its
//! stalls) with the code under test.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The faults in force; [`Faults::default`] is a healthy link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Added to every chunk in each direction before it is forwarded.
    pub latency: Duration,
    /// Each chunk's latency varies by up to this much either way (a chunk
    /// is never sent before the one before it).
    pub jitter: Duration,
    /// The most bytes a second in each direction (0: no limit).
    pub bytes_per_second: u64,
    /// Nothing is forwarded either way, and nothing is closed: what is
    /// sent waits, and goes on when the stall ends.
    pub stall: bool,
    /// New connections are accepted and never answered: their bytes are
    /// read and dropped. Connections already open are not touched.
    pub black_hole: bool,
    /// A one-way partition: what the client sends reaches the server (so
    /// its commands run), what the server answers is held back; when the
    /// partition ends, each connection that had a reply held is dropped,
    /// its replies lost, as TCP would end it. (A byte stream never loses
    /// bytes and goes on: the replies after a lost one would be read as
    /// the answers of other commands.)
    pub replies_lost: bool,
    /// The fraction of replies lost, in millionths (independent of
    /// `replies_lost`, which loses all): each chunk from the server is
    /// dropped with this probability, and its connection then dropped, as
    /// a reply cut off in flight breaks the stream.
    pub reply_loss_ppm: u32,
}

/// The proxy's state, shared with its threads.
struct Shared {
    upstream: SocketAddr,
    faults: Mutex<Faults>,
    /// Woken when the faults change (a stall ends).
    changed: Condvar,
    /// Bumped to drop every open connection.
    generation: AtomicU64,
    /// Connections accepted so far, and open now.
    accepted: AtomicU64,
    open: AtomicU64,
    stopping: AtomicBool,
    /// A small random state for jitter and loss.
    rng: Mutex<u64>,
    /// The client sockets of half-open connections, kept open (silent)
    /// until the proxy stops: dropping the last handle would send a FIN.
    held: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn faults(&self) -> Faults {
        *self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A pseudo-random number (xorshift), enough for jitter and loss.
    fn random(&self) -> u64 {
        let mut state = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        let mut x = *state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *state = x;
        x
    }

    /// Waits while the link stalls; `false` when the connection of
    /// `generation` was dropped meanwhile, or the proxy stops.
    fn wait_while_stalled(&self, generation: u64) -> bool {
        let mut faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        while faults.stall {
            if self.dropped(generation) {
                return false;
            }
            faults = self
                .changed
                .wait_timeout(faults, Duration::from_millis(20))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        !self.dropped(generation)
    }

    fn dropped(&self, generation: u64) -> bool {
        self.stopping.load(Ordering::Relaxed) || self.generation.load(Ordering::Relaxed) != generation
    }
}

/// A running fault-injecting proxy to one upstream address; stopped (and
/// every connection closed) when dropped.
pub struct FaultProxy {
    shared: Arc<Shared>,
    addr: SocketAddr,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// A proxy on a free loopback port forwarding to `upstream`, healthy
    /// until told otherwise.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
        let addr = listener.local_addr().expect("the proxy's address");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let shared = Arc::new(Shared {
            upstream,
            faults: Mutex::new(Faults::default()),
            changed: Condvar::new(),
            generation: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            open: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            rng: Mutex::new(0x9E37_79B9_7F4A_7C15 ^ u64::from(addr.port())),
            held: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || accept_loop(&listener, &shared))
        };
        Self {
            shared,
            addr,
            acceptor: Some(acceptor),
        }
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://` URL of the proxy, for a Redis upstream.
    pub fn redis_url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Puts `faults` in force, for open connections and new ones.
    pub fn set(&self, faults: Faults) {
        *self.shared.faults.lock().unwrap_or_else(PoisonError::into_inner) = faults;
        self.shared.changed.notify_all();
    }

    /// Back to a healthy link.
    pub fn heal(&self) {
        self.set(Faults::default());
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        self.shared.faults()
    }

    /// Drops every open connection at once, both ways (the clients see
    /// their connection reset or closed); new ones are accepted as the
    /// faults say.
    pub fn drop_connections(&self) {
        self.shared.generation.fetch_add(1, Ordering::Relaxed);
        self.shared.changed.notify_all();
    }

    /// Makes every open connection half-open: the server's side is closed
    /// and the client's is left open and silent, as when the server's host
    /// vanished without a FIN reaching the client. New connections are
    /// accepted as the faults say.
    pub fn half_open(&self) {
        // The forwarding threads of this generation stop without closing
        // the client's socket (see `pump`).
        self.shared.generation.fetch_add(1 << 32, Ordering::Relaxed);
        self.shared.changed.notify_all();
    }

    /// Connections accepted since the proxy started.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Connections open now (both directions still forwarding).
    pub fn open(&self) -> u64 {
        self.shared.open.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        self.shared.changed.notify_all();
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for held in self
            .shared
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            let _ = held.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stopping.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                let shared = Arc::clone(shared);
                std::thread::spawn(move || serve(client, &shared));
            }
            Err(err) if err.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(2)),
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// One connection: a black hole, or forwarded both ways until either side
/// closes or the proxy drops it.
fn serve(client: TcpStream, shared: &Arc<Shared>) {
    let _ = client.set_nodelay(true);
    let generation = shared.generation.load(Ordering::Relaxed);
    if shared.faults().black_hole {
        swallow(client, shared, generation);
        return;
    }
    let Ok(server) = TcpStream::connect_timeout(&shared.upstream, Duration::from_secs(2)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = server.set_nodelay(true);
    shared.open.fetch_add(1, Ordering::Relaxed);
    let (Ok(client_r), Ok(server_r)) = (client.try_clone(), server.try_clone()) else {
        shared.open.fetch_sub(1, Ordering::Relaxed);
        return;
    };
    let up = {
        let shared = Arc::clone(shared);
        std::thread::spawn(move || pump(client_r, server, &shared, generation, Direction::Request))
    };
    pump(server_r, client, shared, generation, Direction::Reply);
    let _ = up.join();
    shared.open.fetch_sub(1, Ordering::Relaxed);
}

/// Reads and drops what `client` sends until the proxy drops it.
fn swallow(mut client: TcpStream, shared: &Shared, generation: u64) {
    let _ = client.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = [0u8; 4096];
    while !shared.dropped(generation) {
        match client.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
    let _ = client.shutdown(Shutdown::Both);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client to server.
    Request,
    /// Server to client.
    Reply,
}

/// Forwards `from` to `to` as the faults say, until `from` closes, the
/// proxy drops the connection (both sockets shut), or makes it half-open
/// (the server's socket shut, the client's left open and silent).
fn pump(mut from: TcpStream, to: TcpStream, shared: &Shared, generation: u64, direction: Direction) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = vec![0u8; 16 * 1024];
    let Some(line) = DelayLine::start(&to) else {
        let _ = from.shutdown(Shutdown::Both);
        return;
    };
    let mut pacing = Pacing::new();
    loop {
        if shared.dropped(generation) {
            close(&from, &to, shared, generation, direction);
            line.finish();
            return;
        }
        let n = match from.read(&mut buf) {
            Ok(n) if n > 0 => n,
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            // The other direction's thread closed it: as the proxy said.
            _ if shared.dropped(generation) => {
                close(&from, &to, shared, generation, direction);
                line.finish();
                return;
            }
            Ok(_) => {
                // What is on its way arrives first, then the end.
                line.finish();
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Err(_) => {
                let _ = to.shutdown(Shutdown::Both);
                line.finish();
                return;
            }
        };
        let arrived = Instant::now();
        if !shared.wait_while_stalled(generation) {
            close(&from, &to, shared, generation, direction);
            line.finish();
            return;
        }
        let faults = shared.faults();
        if direction == Direction::Reply && lose_reply(&from, &to, shared, generation, &faults) {
            line.finish();
            return;
        }
        let due = pacing.due(&faults, shared, arrived, n);
        if !line.send(due, &buf[..n]) {
            let _ = from.shutdown(Shutdown::Both);
            line.finish();
            return;
        }
    }
}

/// Closes the connection of `from` and `to` that the proxy dropped: the
/// server's socket is shut; the client's too, unless the proxy made the
/// connection half-open since `generation`, when the reply direction keeps
/// the client's socket open and silent.
fn close(from: &TcpStream, to: &TcpStream, shared: &Shared, generation: u64, direction: Direction) {
    let now = shared.generation.load(Ordering::Relaxed);
    let half_open = now >> 32 != generation >> 32;
    let (server, client) = match direction {
        Direction::Request => (to, from),
        Direction::Reply => (from, to),
    };
    let _ = server.shutdown(Shutdown::Both);
    if half_open {
        if let (Direction::Reply, Ok(kept)) = (direction, client.try_clone()) {
            shared
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(kept);
        }
    } else {
        let _ = client.shutdown(Shutdown::Both);
    }
}

/// Whether a reply read from `from` is lost as `faults` say: held while
/// replies are lost and then lost with the connection, or cut off in
/// flight at the reply loss rate. A lost reply shuts both sockets.
fn lose_reply(from: &TcpStream, to: &TcpStream, shared: &Shared, generation: u64, faults: &Faults) -> bool {
    if faults.replies_lost {
        // Held until the partition ends, then lost with the
        // connection.
        let mut current = shared.faults.lock().unwrap_or_else(PoisonError::into_inner);
        while current.replies_lost && !shared.dropped(generation) {
            current = shared
                .changed
                .wait_timeout(current, Duration::from_millis(20))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(current);
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
        return true;
    }
    if faults.reply_loss_ppm > 0 && shared.random() % 1_000_000 < u64::from(faults.reply_loss_ppm) {
        // A reply cut off in flight: the stream is broken.
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
        return true;
    }
    false
}

/// When the chunks of one direction are due at the other end.
struct Pacing {
    /// When the last chunk is due, so that jitter never reorders.
    last_due: Instant,
    /// When the bandwidth limit lets the wire take the next chunk.
    wire_free: Instant,
}

impl Pacing {
    /// Pacing from now, with nothing sent yet.
    fn new() -> Self {
        Pacing {
            last_due: Instant::now(),
            wire_free: Instant::now(),
        }
    }

    /// When a chunk of `n` bytes that `arrived` is due at the other end:
    /// after the bandwidth limit and the latency with its jitter, and
    /// never before the chunk before it.
    fn due(&mut self, faults: &Faults, shared: &Shared, arrived: Instant, n: usize) -> Instant {
        let mut delay = faults.latency;
        if !faults.jitter.is_zero() {
            let span = faults.jitter.as_nanos() as u64;
            let offset = shared.random() % (2 * span + 1);
            delay = (delay + Duration::from_nanos(offset)).saturating_sub(faults.jitter);
        }
        // The wire takes one chunk after another at the bandwidth limit;
        // the latency delays each, without spacing them out.
        let mut sent = arrived;
        if let Some(nanos) = (n as u64 * 1_000_000_000).checked_div(faults.bytes_per_second) {
            self.wire_free = self.wire_free.max(arrived) + Duration::from_nanos(nanos);
            sent = self.wire_free;
        }
        let due = (sent + delay).max(self.last_due);
        self.last_due = due;
        due
    }
}

/// Chunks written on at their due times, in order, by a thread of their
/// own: a chunk read while an earlier one waits out its latency is not
/// held behind it, as on a link, where latency delays every chunk but does
/// not space them out.
struct DelayLine {
    chunks: std::sync::mpsc::Sender<(Instant, Vec<u8>)>,
    writer: JoinHandle<()>,
}

impl DelayLine {
    /// A line writing to `to`; `None` when the socket cannot be shared.
    fn start(to: &TcpStream) -> Option<Self> {
        let mut out = to.try_clone().ok()?;
        let (chunks, due) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
        let writer = std::thread::spawn(move || {
            for (at, chunk) in due {
                let wait = at.saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
                if out.write_all(&chunk).is_err() {
                    return;
                }
            }
        });
        Some(Self { chunks, writer })
    }

    /// Queues `chunk` to be written at `due`; false once a write failed.
    fn send(&self, due: Instant, chunk: &[u8]) -> bool {
        !self.writer.is_finished() && self.chunks.send((due, chunk.to_vec())).is_ok()
    }

    /// Writes what is queued (or fails at once on a closed socket) and
    /// stops.
    fn finish(self) {
        drop(self.chunks);
        let _ = self.writer.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on a free port.
    fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut stream = stream;
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 || stream.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn client(proxy: &FaultProxy) -> TcpStream {
        let stream = TcpStream::connect(proxy.addr()).unwrap();
        stream.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        stream
    }

    fn round_trip(stream: &mut TcpStream) -> Option<Duration> {
        let started = Instant::now();
        stream.write_all(b"ping").ok()?;
        let mut buf = [0u8; 4];
        stream.read_exact(&mut buf).ok()?;
        assert_eq!(&buf, b"ping");
        Some(started.elapsed())
    }

    #[test]
    fn a_healthy_link_forwards_and_latency_delays_each_way() {
        let proxy = FaultProxy::start(echo());
        let mut stream = client(&proxy);
        assert!(round_trip(&mut stream).unwrap() < Duration::from_millis(100));
        proxy.set(Faults {
            latency: Duration::from_millis(40),
            jitter: Duration::from_millis(10),
            ..Faults::default()
        });
        let rtt = round_trip(&mut stream).unwrap();
        assert!(rtt >= Duration::from_millis(60), "{rtt:?}: 30 to 50 ms each way");
        assert_eq!(proxy.accepted(), 1);
    }

    #[test]
    fn lost_replies_stalls_and_black_holes_answer_nothing() {
        let proxy = FaultProxy::start(echo());
        let mut stream = client(&proxy);
        proxy.set(Faults {
            replies_lost: true,
            ..Faults::default()
        });
        assert!(round_trip(&mut stream).is_none(), "the reply is held back");
        proxy.heal();
        // And lost with its connection when the partition ends.
        let mut buf = [0u8; 4];
        stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert!(matches!(stream.read(&mut buf), Ok(0) | Err(_)));
        proxy.set(Faults {
            stall: true,
            ..Faults::default()
        });
        let mut fresh = client(&proxy);
        assert!(round_trip(&mut fresh).is_none(), "stalled");
        proxy.heal();
        // What waited in the stall goes on.
        let mut buf = [0u8; 4];
        fresh.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        fresh.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        proxy.set(Faults {
            black_hole: true,
            ..Faults::default()
        });
        let mut holed = client(&proxy);
        assert!(round_trip(&mut holed).is_none(), "accepted, never answered");
    }

    #[test]
    fn dropped_and_half_open_connections() {
        let proxy = FaultProxy::start(echo());
        let mut stream = client(&proxy);
        assert!(round_trip(&mut stream).is_some());
        proxy.drop_connections();
        let mut buf = [0u8; 4];
        stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        // Closed: the read ends (0 bytes or a reset), without waiting out
        // its timeout.
        let started = Instant::now();
        let read = stream.read(&mut buf);
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        assert!(started.elapsed() < Duration::from_secs(1));
        let mut half = client(&proxy);
        assert!(round_trip(&mut half).is_some());
        proxy.half_open();
        // Open and silent: the read waits out its timeout.
        half.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        half.write_all(b"ping").unwrap();
        let read = half.read(&mut buf);
        assert!(
            matches!(&read, Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)),
            "{read:?}"
        );
    }
}
