//! The latency the tower layer adds to a request, in memory: the same
//! trivial service called with and without the layer, on pre-built
//! requests, with no network.
//!
//! ```sh
//! cargo bench -p tollgate-http --bench layer_overhead
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_main, BatchSize, Criterion};
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Request, Response};
use http_body_util::Empty;
use tollgate::{Limiter, Strategy};
use tollgate_http::{HeaderMode, PeerAddr, RateLimit};
use tower::{service_fn, Layer, Service, ServiceExt};

/// Distinct client addresses the requests rotate through: each comes back
/// every 65,536 requests, well within its budget.
const CLIENTS: u32 = 65_536;

/// Runs a future that never waits (in-memory limiter, immediate service).
fn run<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the benchmarked service waited"),
    }
}

/// Pre-built requests from rotating client addresses.
fn requests() -> impl FnMut() -> Request<Empty<Bytes>> {
    let mut n = 0u32;
    move || {
        n = (n + 1) % CLIENTS;
        let mut req = Request::get("/").body(Empty::new()).unwrap();
        let addr = SocketAddr::from(([10, 0, (n >> 8) as u8, n as u8], 40_000));
        req.extensions_mut().insert(PeerAddr(addr));
        req
    }
}

fn limiter(limit: u64) -> Limiter {
    Limiter::builder()
        .strategy(Strategy::TokenBucket)
        .limit(limit)
        .window(Duration::from_secs(1))
        .build()
        .unwrap()
}

fn bench<S>(c: &mut Criterion, name: &str, mut service: S)
where
    S: Service<Request<Empty<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    let mut next = requests();
    c.bench_function(name, |b| {
        b.iter_batched(
            &mut next,
            |req| run(async { service.ready().await.unwrap().call(req).await.unwrap() }),
            BatchSize::SmallInput,
        )
    });
}

fn layer_overhead(c: &mut Criterion) {
    // A service that answers at once, with a content type as real ones do.
    let inner = service_fn(|_req: Request<Empty<Bytes>>| async {
        let mut res = Response::new(Empty::<Bytes>::new());
        res.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        Ok::<_, Infallible>(res)
    });
    bench(c, "service alone", inner);

    // 500 per second per client, which no client exhausts: every request is
    // admitted.
    let layer = RateLimit::new(limiter(500)).layer();
    bench(c, "with layer, allowed, RateLimit-* headers", layer.layer(inner));

    let layer = RateLimit::new(limiter(500))
        .headers(HeaderMode::IetfDraft)
        .layer();
    bench(c, "with layer, allowed, IETF draft headers", layer.layer(inner));

    // One request per second per client: after the first round, all denied
    // (each client returns within the second).
    let layer = RateLimit::new(limiter(1)).layer();
    bench(c, "with layer, denied (429 reply)", layer.layer(inner));
}

// `criterion_group!` defines an undocumented public function.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::layer_overhead);
}
criterion_main!(group::benches);
