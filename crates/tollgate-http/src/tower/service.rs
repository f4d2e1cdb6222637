//! The service: decide, then call the inner service or reply.

use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::body::ReplyBody;
use super::future::{reply_response, ResponseFuture};
use super::settle::{edit, Settle};
use crate::engine::Verdict;
use crate::headers::RateHeaders;
use crate::rate_limit::RateLimit;
use crate::request::RequestInfo;
use tollgate::backend::Backend;
use tollgate::MemoryBackend;

/// A service that rate-limits requests before passing them to `S`.
///
/// With a backend that decides at once
/// ([`Limiter::decides_now`](tollgate::Limiter::decides_now): in memory,
/// whatever the backend's type) each request is decided within `call`:
/// an admitted one goes to the inner service at once, the one that was
/// polled ready. A backend that must be waited for (Redis) decides in the
/// response future, which then calls a clone of the inner service.
pub struct RateLimitService<S, B: Backend = MemoryBackend> {
    inner: S,
    config: RateLimit<B>,
}

impl<S, B: Backend> RateLimitService<S, B> {
    /// `inner`, limited as `config` says.
    pub fn new(inner: S, config: RateLimit<B>) -> Self {
        Self { inner, config }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, to change.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, without the limiter.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The configuration.
    pub fn config(&self) -> &RateLimit<B> {
        &self.config
    }
}

impl<S: Clone, B: Backend> Clone for RateLimitService<S, B> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S: std::fmt::Debug, B: Backend> std::fmt::Debug for RateLimitService<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

impl<S, B, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S, B>
where
    B: Backend,
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: ReplyBody + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let engine = self.config.engine();
        let info = RequestInfo::new(&req);
        if engine.skips(&info) {
            return ResponseFuture::allowed(self.inner.call(req), RateHeaders::None, None);
        }
        if engine.can_check() {
            // Decided on the whole request, which an admitted request then
            // passes on without being taken apart and put back together.
            let verdict = match engine.prepare(&info) {
                Ok(prepared) => engine.verdict_now(&prepared, &info),
                Err(reply) => Some(Verdict::Reply(*reply)),
            };
            match verdict {
                // Never a permit to hold: a concurrency policy's requests
                // take the awaited path.
                Some(Verdict::Allow(headers, charge, None)) => {
                    let after = Settle::boxed(&self.config, charge);
                    return ResponseFuture::allowed(self.inner.call(req), headers, after);
                }
                Some(Verdict::Reply(reply)) => return ResponseFuture::replied(reply),
                // A backend that decides now but failed, or one that could
                // not answer at once: decided again on the awaited path,
                // which reports the error.
                _ => {}
            }
        }
        self.call_awaited(req)
    }
}

impl<S, B: Backend> RateLimitService<S, B> {
    /// The response future for a limiter that must be waited for: decides
    /// in the future, then calls the inner service. Out of line, so that
    /// the in-memory path's code in `call` stays short.
    #[inline(never)]
    fn call_awaited<ReqBody, ResBody>(
        &mut self,
        req: Request<ReqBody>,
    ) -> ResponseFuture<S::Future, ResBody, S::Error>
    where
        // The bounds of the `Service` implementation, which calls this.
        S: Service<
                Request<ReqBody>,
                Response = Response<ResBody>,
                Future: Send + 'static,
                Error: Send + 'static,
            > + Clone
            + Send
            + 'static,
        ReqBody: Send + 'static,
        ResBody: ReplyBody + Send + 'static,
    {
        let (parts, body) = req.into_parts();
        // The instance that was polled ready serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        ResponseFuture::awaited(Box::pin(async move {
            let engine = config.engine();
            // The request view is dropped before the await: only the key
            // and resource, borrowed from `parts`, are held across it.
            let prepared = engine.prepare(&RequestInfo::from_http(&parts));
            let verdict = match prepared {
                Ok(prepared) => {
                    engine
                        .verdict(&prepared, || RequestInfo::from_http(&parts).is_grpc())
                        .await
                }
                Err(reply) => Verdict::Reply(*reply),
            };
            match verdict {
                Verdict::Allow(headers, charge, held) => {
                    // A permit is held through the service's call (dropped
                    // with this future) and then by the response body.
                    let mut response = inner.call(Request::from_parts(parts, body)).await?;
                    let status = response.status();
                    if let Some((charge, op)) =
                        edit(engine, charge.as_deref(), status, response.headers_mut())
                    {
                        engine.settle(charge, op).await;
                    }
                    headers.write_to(response.headers_mut());
                    Ok(match held {
                        Some(permit) => response.map(|body| body.hold_permit(permit)),
                        None => response,
                    })
                }
                Verdict::Reply(reply) => Ok(reply_response(reply)),
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::{ready, Future, Ready};
    use std::net::SocketAddr;
    use std::pin::pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Waker;
    use std::time::Duration;

    use tollgate::backend::store::StoreBackend;
    use tollgate::testing::MapStore;
    use tollgate::{Limiter, Limiters, Policy, Strategy};

    use super::*;
    use crate::tower::{PeerAddr, RateLimitBody};

    /// An inner service that counts its calls and its clones.
    #[derive(Default)]
    struct Counting {
        calls: usize,
        clones: Arc<AtomicUsize>,
    }

    impl Clone for Counting {
        fn clone(&self) -> Self {
            self.clones.fetch_add(1, Ordering::Relaxed);
            Self {
                calls: self.calls,
                clones: self.clones.clone(),
            }
        }
    }

    impl Service<Request<()>> for Counting {
        type Response = Response<RateLimitBody<&'static str>>;
        type Error = Infallible;
        type Future = Ready<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            self.calls += 1;
            ready(Ok(Response::new(RateLimitBody::new("ok"))))
        }
    }

    fn policy() -> Policy {
        Policy::new(Strategy::FixedWindow, 2, Duration::from_secs(60)).unwrap()
    }

    fn limiter() -> Limiter {
        Limiter::builder().policy(policy()).build().unwrap()
    }

    /// Calls `service` once from 192.0.2.1 and returns the status.
    fn status<B: Backend>(service: &mut RateLimitService<Counting, B>) -> u16 {
        let mut req = Request::new(());
        req.extensions_mut()
            .insert(PeerAddr(SocketAddr::from(([192, 0, 2, 1], 1000))));
        let mut future = pin!(service.call(req));
        match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(res)) => res.status().as_u16(),
            Poll::Ready(Err(never)) => match never {},
            Poll::Pending => panic!("an in-memory decision waited"),
        }
    }

    #[test]
    fn an_in_memory_limiter_calls_the_polled_service_without_cloning_it() {
        let mut service = RateLimitService::new(Counting::default(), RateLimit::new(limiter()));
        assert_eq!(
            [status(&mut service), status(&mut service), status(&mut service)],
            [200, 200, 429]
        );
        assert_eq!(service.get_ref().calls, 2);
        assert_eq!(service.get_ref().clones.load(Ordering::Relaxed), 0);
        service.get_mut().calls = 0;
        assert_eq!(service.into_inner().calls, 0);
    }

    #[test]
    fn an_in_memory_limiter_on_a_backend_chosen_at_run_time_calls_the_polled_service_without_cloning_it() {
        // Another type than `MemoryBackend`, in memory at run time: the
        // backend a policy file chooses.
        let backend = tollgate_config::AnyBackend::Memory(tollgate::MemoryBackend::new());
        let limiter = Limiter::builder()
            .policy(policy())
            .backend(backend)
            .build()
            .unwrap();
        assert!(limiter.decides_now());
        let mut service = RateLimitService::new(Counting::default(), RateLimit::new(limiter));
        assert_eq!(
            [status(&mut service), status(&mut service), status(&mut service)],
            [200, 200, 429]
        );
        // Decided in `call`: the polled instance served both admissions.
        assert_eq!(service.get_ref().calls, 2);
        assert_eq!(service.get_ref().clones.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn shared_limiters_decide_in_call_and_follow_their_replacements() {
        let per_minute = |limit| Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(60)).unwrap();
        let limiters = Arc::new(Limiters::builder().default_policy(per_minute(2)).build().unwrap());
        let mut service = RateLimitService::new(Counting::default(), RateLimit::new(limiters.clone()));
        assert_eq!(
            [status(&mut service), status(&mut service), status(&mut service)],
            [200, 200, 429]
        );
        // The application replaces the policy through its own handle; the
        // key keeps the two units it spent.
        limiters
            .replace(Limiters::builder().default_policy(per_minute(3)))
            .unwrap();
        assert_eq!([status(&mut service), status(&mut service)], [200, 429]);
        assert_eq!(service.get_ref().calls, 3);
        assert_eq!(service.get_ref().clones.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_limiter_that_must_be_awaited_is_decided_in_the_future_by_the_polled_service() {
        // A store that answers at once, behind the store adapter, which
        // never decides now: every decision is awaited, yet none waits.
        let limiter = Limiter::builder()
            .policy(policy())
            .backend(StoreBackend::new(MapStore::default()))
            .build()
            .unwrap();
        assert!(!limiter.decides_now());
        let mut service = RateLimitService::new(Counting::default(), RateLimit::new(limiter));
        assert_eq!(
            [status(&mut service), status(&mut service), status(&mut service)],
            [200, 200, 429]
        );
        // Each call hands the polled instance to its future and keeps a clone.
        assert_eq!(service.get_ref().clones.load(Ordering::Relaxed), 3);
        assert_eq!(service.get_ref().calls, 0);
    }

    /// A service answering with `http_body_util`'s `Full<Bytes>`.
    #[derive(Clone)]
    struct Hello;

    impl Service<Request<()>> for Hello {
        type Response = Response<http_body_util::Full<bytes::Bytes>>;
        type Error = Infallible;
        type Future = Ready<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            ready(Ok(Response::new(http_body_util::Full::new("hello".into()))))
        }
    }

    /// The one frame of a `Full` body, as text.
    fn text(body: http_body_util::Full<bytes::Bytes>) -> String {
        use http_body::Body;
        let mut body = pin!(body);
        match body.as_mut().poll_frame(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Some(Ok(frame))) => String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap(),
            other => panic!("no data frame: {other:?}"),
        }
    }

    #[test]
    fn responses_and_replies_keep_the_inner_body_type() {
        let mut service = RateLimitService::new(Hello, RateLimit::new(limiter()));
        let mut texts = Vec::new();
        for _ in 0..3 {
            let mut req = Request::new(());
            req.extensions_mut()
                .insert(PeerAddr(SocketAddr::from(([192, 0, 2, 1], 1000))));
            let mut future = pin!(service.call(req));
            // The response's type is the inner service's: `Response<Full<Bytes>>`.
            let res: Response<http_body_util::Full<bytes::Bytes>> =
                match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                    Poll::Ready(Ok(res)) => res,
                    Poll::Ready(Err(never)) => match never {},
                    Poll::Pending => panic!("an in-memory decision waited"),
                };
            let status = res.status().as_u16();
            let mut text = text(res.into_body());
            // The fixed window's end depends on the wall clock.
            text.truncate("rate limit exceeded".len());
            texts.push((status, text));
        }
        assert_eq!(
            texts,
            [
                (200, "hello".to_owned()),
                (200, "hello".to_owned()),
                (429, "rate limit exceeded".to_owned()),
            ]
        );
    }
}
