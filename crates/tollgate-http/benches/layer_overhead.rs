//! The latency the tower layer adds to a request, in memory, beside
//! `tower_governor` as a baseline: the same axum router called bare, with
//! tollgate's layer and with tower_governor's, on pre-built requests keyed
//! by peer address (axum's `ConnectInfo`, which both read) over 65,536
//! clients, with no network; and tollgate's layer on a policy of two
//! limits (a compound policy), whose IETF fields list both; and with the
//! optional work configured: a skip rule that does not hold, and a refund
//! of server errors (each 200 response is looked at and settles nothing).
//! A second baseline, "limiter in a bare layer", wraps the same in-memory
//! limiter in the least a layer can do ([`Bare`]), which tells the cost
//! of the limiter itself from that of the middleware's options.
//!
//! ```sh
//! cargo bench -p tollgate-http --bench layer_overhead
//! ```
//!
//! With `LAYER_OVERHEAD_TIME=N` and case names as arguments, the cases
//! take turns for several rounds of N requests each
//! (`LAYER_OVERHEAD_ROUNDS`, 7 unless set), and it prints each case's
//! fastest and median round in nanoseconds per request, and its median
//! ratio to the last case named within the same round (see [`time`]):
//!
//! ```sh
//! LAYER_OVERHEAD_TIME=20000 LAYER_OVERHEAD_ROUNDS=40 target/release/deps/layer_overhead-* \
//!     "router alone" "tollgate, allowed, headers off" "tower_governor, allowed, headers off"
//! ```
//!
//! With `LAYER_OVERHEAD_CALLS=N` and a case's name as the only argument,
//! it sends N requests through that case and nothing else, for an
//! instruction counter (see [`count`]).
//!
//! Under an instruction counter such as callgrind a request takes about 50
//! times longer than natively, so on the system clock each client's state
//! would expire and be deleted between its visits, which does not happen
//! in a timed run. In the counting mode tollgate's limiters therefore run
//! on a [`ManualClock`] that each request moves on by [`COUNT_STEP`], about
//! the time a request takes natively: a count then follows the path a
//! timed run takes. (governor keeps every client's state, whatever the
//! clock.)

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use criterion::{BatchSize, Criterion};
use http::{Request, Response};
use tollgate::clock::ManualClock;
use tollgate::{Limit, Limiter, Policy, Strategy};
use tollgate_http::{HeaderMode, IpGrouping, RateLimit, Skip};
use tower::{Service, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

/// Distinct client addresses the requests rotate through: each comes back
/// every 65,536 requests.
const CLIENTS: u32 = 65_536;

/// Requests per second per client that no client exhausts: every request
/// is admitted.
const GENEROUS: u64 = 500;

const SECOND: Duration = Duration::from_secs(1);

/// How far the counting mode's clock moves per request.
const COUNT_STEP: Duration = Duration::from_micros(1);

/// The counting mode's clock, set before any case is built; timed runs
/// leave it unset and use the system clock.
static COUNT_CLOCK: OnceLock<ManualClock> = OnceLock::new();

/// Runs a future that never waits (in-memory limiter, immediate handler).
fn run<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the benchmarked service waited"),
    }
}

/// Pre-built requests from rotating client addresses, recorded the way
/// `into_make_service_with_connect_info` records them.
fn requests() -> impl FnMut() -> Request<Body> {
    let mut n = 0u32;
    move || {
        n = (n + 1) % CLIENTS;
        let mut req = Request::get("/").body(Body::empty()).unwrap();
        let addr = SocketAddr::from(([10, 0, (n >> 8) as u8, n as u8], 40_000));
        req.extensions_mut().insert(ConnectInfo(addr));
        req
    }
}

/// The router every case shares: one route answering `hello`.
fn router() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

fn limiter(limit: u64, window: Duration) -> Limiter {
    let policy = Policy::new(Strategy::TokenBucket, limit, window).unwrap();
    build(policy)
}

/// A limiter on `policy`, on the counting mode's clock when it is set.
fn build(policy: Policy) -> Limiter {
    let builder = Limiter::builder().policy(policy);
    match COUNT_CLOCK.get() {
        Some(clock) => builder.clock(clock.clone()).build().unwrap(),
        None => builder.build().unwrap(),
    }
}

fn bench(c: &mut Criterion, name: &str, expected: u16, router: Router) {
    let mut service = router.into_service::<Body>();
    let mut next = requests();
    // The status every measured request gets (admitted or denied as meant).
    let status = run(async { service.ready().await.unwrap().call(next()).await.unwrap() }).status();
    assert_eq!(status, expected, "{name}");
    c.bench_function(name, |b| {
        b.iter_batched(
            &mut next,
            |req| -> Response<Body> {
                run(async { service.ready().await.unwrap().call(req).await.unwrap() })
            },
            BatchSize::SmallInput,
        )
    });
}

fn tollgate(headers: HeaderMode, limit: u64, window: Duration) -> Router {
    router().layer(RateLimit::new(limiter(limit, window)).headers(headers).layer())
}

/// A compound policy that admits every measured request: the generous
/// burst limit and an hourly limit as generous.
fn compound(headers: HeaderMode) -> Router {
    let policy = Policy::compound([
        Limit::new(Strategy::TokenBucket, GENEROUS, SECOND).unwrap(),
        Limit::new(
            Strategy::SlidingWindow,
            GENEROUS * 3600,
            Duration::from_secs(3600),
        )
        .unwrap(),
    ])
    .unwrap();
    router().layer(RateLimit::new(build(policy)).headers(headers).layer())
}

fn governor(headers: bool) -> Router {
    // The same rate as `limiter(GENEROUS)`: one token per 2 ms, a burst of
    // 500.
    let mut config = GovernorConfigBuilder::default();
    config.per_millisecond(2).burst_size(GENEROUS as u32);
    if headers {
        let config = config.use_headers().finish().unwrap();
        router().layer(GovernorLayer::new(Arc::new(config)))
    } else {
        router().layer(GovernorLayer::new(Arc::new(config.finish().unwrap())))
    }
}

/// A router whose every measured request is denied: one request per hour
/// per client, after a first round over every client.
fn denied() -> Router {
    let denied = tollgate(HeaderMode::RateLimit, 1, Duration::from_secs(3600));
    let mut warm = denied.clone().into_service::<Body>();
    let mut next = requests();
    for _ in 0..CLIENTS {
        run(async { warm.ready().await.unwrap().call(next()).await.unwrap() });
    }
    denied
}

/// The least a layer around tollgate's in-memory limiter can do, as a
/// second baseline: the key from axum's `ConnectInfo` ([`IpGrouping`]'s
/// text, as tollgate-http keys it), one [`Limiter::check`], and the inner
/// service's future as the response future (429 when denied). What
/// tollgate-http's layer costs beyond it is the price of its options
/// (extractors, costs, resources, headers, replies, settling charges).
#[derive(Clone)]
struct Bare<S> {
    inner: S,
    limiter: Arc<Limiter>,
}

/// The response future of [`Bare`]: the inner service's, or a denial.
enum BareFuture<F> {
    Inner(F),
    Denied,
}

impl<F: Future<Output = Result<Response<Body>, E>> + Unpin, E> Future for BareFuture<F> {
    type Output = Result<Response<Body>, E>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            BareFuture::Inner(future) => std::pin::Pin::new(future).poll(cx),
            BareFuture::Denied => {
                let mut response = Response::new(Body::empty());
                *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                Poll::Ready(Ok(response))
            }
        }
    }
}

impl<S> Service<Request<Body>> for Bare<S>
where
    S: Service<Request<Body>, Response = Response<Body>>,
    S::Future: Unpin,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BareFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|info| info.0.ip());
        let Some(peer) = peer else {
            return BareFuture::Denied;
        };
        let key = IpGrouping::new().key(peer);
        if self.limiter.check(key.as_bytes()).allowed {
            BareFuture::Inner(self.inner.call(req))
        } else {
            BareFuture::Denied
        }
    }
}

/// The router behind [`Bare`] on the allowed case's limiter.
fn bare() -> Router {
    let limiter = Arc::new(limiter(GENEROUS, SECOND));
    router().layer(tower::layer::layer_fn(move |inner| Bare {
        inner,
        limiter: limiter.clone(),
    }))
}

/// A case: its name, the status each measured request gets, and how to
/// build its router (only the case being run is built, so that no other
/// case's limiter works in the background of a count).
type Case = (&'static str, u16, fn() -> Router);

/// The allowed case with `configure` applied to its configuration.
fn configured(configure: fn(RateLimit) -> RateLimit) -> Router {
    let config = RateLimit::new(limiter(GENEROUS, SECOND)).headers(HeaderMode::RateLimit);
    router().layer(configure(config).layer())
}

/// Every case.
fn cases() -> [Case; 12] {
    [
        ("router alone", 200, router),
        ("tollgate, allowed, RateLimit-* headers", 200, || {
            tollgate(HeaderMode::RateLimit, GENEROUS, SECOND)
        }),
        ("tollgate, allowed, headers off", 200, || {
            tollgate(HeaderMode::Off, GENEROUS, SECOND)
        }),
        ("tower_governor, allowed, headers", 200, || governor(true)),
        ("tower_governor, allowed, headers off", 200, || governor(false)),
        ("limiter in a bare layer, allowed", 200, bare),
        ("tollgate, allowed, IETF draft headers", 200, || {
            tollgate(HeaderMode::IetfDraft, GENEROUS, SECOND)
        }),
        ("tollgate, denied (429 reply)", 429, denied),
        ("tollgate, allowed, 2 limits, RateLimit-* headers", 200, || {
            compound(HeaderMode::RateLimit)
        }),
        ("tollgate, allowed, 2 limits, IETF draft headers", 200, || {
            compound(HeaderMode::IetfDraft)
        }),
        ("tollgate, allowed, a skip rule that does not hold", 200, || {
            configured(|c| c.skip(Skip::path("/healthz")))
        }),
        ("tollgate, allowed, no charge for server errors", 200, || {
            configured(RateLimit::no_charge_on_server_errors)
        }),
    ]
}

fn layer_overhead(c: &mut Criterion) {
    for (name, expected, router) in cases() {
        bench(c, name, expected, router());
    }
}

/// The case named `name`: its name, the status its requests get, and its
/// router as a service (only this case's router is built).
fn case(name: &str) -> (&'static str, u16, axum::routing::RouterIntoService<Body>) {
    let (name, expected, router) = cases()
        .into_iter()
        .find(|(case, ..)| *case == name)
        .unwrap_or_else(|| panic!("no case {name:?}"));
    (name, expected, router().into_service::<Body>())
}

/// Sends `calls` requests through the case named `name`, outside
/// criterion, for a counter such as `perf stat -e instructions:u`, which
/// other work on the machine does not disturb. The cost of a case is its
/// count less that of `router alone` with the same `calls`, over `calls`.
fn count(name: &str, calls: u64) {
    let clock = COUNT_CLOCK.get_or_init(|| ManualClock::new(Duration::from_secs(1_700_000_000)));
    let (name, expected, mut service) = case(name);
    let mut next = requests();
    for _ in 0..calls {
        clock.advance(COUNT_STEP);
        let req = next();
        let res = run(async { service.ready().await.unwrap().call(req).await.unwrap() });
        assert_eq!(res.status(), expected, "{name}");
    }
}

/// Rounds of the timing mode unless `LAYER_OVERHEAD_ROUNDS` says otherwise.
const TIME_ROUNDS: usize = 7;

/// One case's result in the timing mode: times in nanoseconds per
/// request.
struct Timing {
    name: &'static str,
    fastest: f64,
    median: f64,
    /// The median over rounds of this case's time over the last case's in
    /// the same round.
    to_last: f64,
}

/// The median of `values`, which it sorts.
fn median_of(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The timing mode: each case named in `names` runs `rounds` rounds of
/// `calls` requests (response dropped included), the cases taking turns
/// round by round; the requests of a round are built before it is timed.
/// A change in the machine's speed (other work on a shared machine) then
/// reaches the cases of one round alike, so the ratio of two cases within
/// each round, over many short rounds, compares them far more steadily
/// than criterion's estimates, taken one case after the other, do. The
/// docs/performance.md quotes criterion.
fn time(names: &[String], calls: u64, rounds: usize) -> Vec<Timing> {
    let mut cases: Vec<_> = names
        .iter()
        .map(|name| {
            let (name, expected, service) = case(name);
            (name, expected, service, requests(), Vec::with_capacity(rounds))
        })
        .collect();
    for _ in 0..rounds {
        for (name, expected, service, next, times) in &mut cases {
            let requests: Vec<_> = (0..calls).map(|_| next()).collect();
            let start = std::time::Instant::now();
            for req in requests {
                let res = run(async { service.ready().await.unwrap().call(req).await.unwrap() });
                assert_eq!(res.status(), *expected, "{name}");
            }
            times.push(start.elapsed().as_nanos() as f64 / calls as f64);
        }
    }
    let last: Vec<f64> = cases.last().map(|case| case.4.clone()).unwrap_or_default();
    cases
        .into_iter()
        .map(|(name, .., mut times)| {
            // Paired by round, before the times are sorted.
            let mut ratios: Vec<f64> = times.iter().zip(&last).map(|(t, l)| t / l).collect();
            let median = median_of(&mut times);
            Timing {
                name,
                fastest: times[0],
                median,
                to_last: median_of(&mut ratios),
            }
        })
        .collect()
}

// `criterion_group!` defines an undocumented public function.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::layer_overhead);
}

fn main() {
    // `LAYER_OVERHEAD_CALLS=N layer_overhead CASE`: the counting mode.
    if let Ok(calls) = std::env::var("LAYER_OVERHEAD_CALLS") {
        let calls = calls.parse().expect("LAYER_OVERHEAD_CALLS is a count");
        let name = std::env::args().nth(1).expect("the case to run");
        count(&name, calls);
        return;
    }
    // `LAYER_OVERHEAD_TIME=N layer_overhead CASE...`: the timing mode.
    if let Ok(calls) = std::env::var("LAYER_OVERHEAD_TIME") {
        let calls = calls.parse().expect("LAYER_OVERHEAD_TIME is a count");
        let rounds = std::env::var("LAYER_OVERHEAD_ROUNDS").map_or(TIME_ROUNDS, |r| {
            r.parse()
                .ok()
                .filter(|&r| r > 0)
                .expect("LAYER_OVERHEAD_ROUNDS is a count")
        });
        let names: Vec<String> = std::env::args().skip(1).collect();
        println!("case\tfastest ns\tmedian ns\tto last case (median of rounds)");
        for t in time(&names, calls, rounds) {
            println!("{}\t{:.0}\t{:.0}\t{:.3}", t.name, t.fastest, t.median, t.to_last);
        }
        return;
    }
    group::benches();
    Criterion::default().configure_from_args().final_summary();
}
