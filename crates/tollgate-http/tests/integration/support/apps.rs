//! The same application on both stacks, served on 127.0.0.1 with the
//! middleware in front:
//!
//! - `GET /` → `ok`, `POST /` → `posted`
//! - `GET /users/{id}` → `user {id}`
//! - `POST /echo` → the `x-test` header and the body, echoed
//! - `GET /stream` → `first;`, then `second` once the test opens the gate
//! - `GET /status/{code}` → an empty response with status `code`
//! - `GET /used/{value}` → `used`, with `x-tokens-used: {value}`
//! - `GET /panic` → the handler panics

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::Semaphore;
use tollgate::backend::Backend;
use tollgate_http::RateLimit;

/// The response header of `GET /used/{value}`.
pub const TOKENS_USED: &str = "x-tokens-used";

/// Which middleware serves the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stack {
    /// The tower layer on axum.
    Axum,
    /// The actix-web middleware.
    Actix,
}

/// A running server.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Opened by the test to let `/stream` send its second chunk.
    pub gate: Arc<Semaphore>,
}

/// Serves the application behind `config` on `stack`.
pub async fn start<B: Backend>(stack: Stack, config: RateLimit<B>) -> Server {
    let gate = Arc::new(Semaphore::new(0));
    let addr = match stack {
        Stack::Axum => axum_app::start(config, gate.clone()).await,
        Stack::Actix => actix_app::start(config, gate.clone()),
    };
    Server { addr, gate }
}

/// Serves `GET /` behind `cheap` and `GET /costly` behind `costly`, each
/// route with a middleware of its own (axum: a layer on the route;
/// actix-web: `wrap` on the resource), for costs per route.
pub async fn start_per_route<B: Backend>(
    stack: Stack,
    cheap: RateLimit<B>,
    costly: RateLimit<B>,
) -> SocketAddr {
    match stack {
        Stack::Axum => {
            use axum::routing::get;
            let app = axum::Router::new()
                .route("/", get(|| async { "ok" }).layer(cheap.layer()))
                .route("/costly", get(|| async { "costly" }).layer(costly.layer()));
            axum_app::serve(app).await
        }
        Stack::Actix => {
            use actix_web::{web, App};
            let (cheap, costly) = (cheap.actix(), costly.actix());
            actix_app::serve(move || {
                App::new()
                    .service(
                        web::resource("/")
                            .wrap(cheap.clone())
                            .route(web::get().to(|| async { "ok" })),
                    )
                    .service(
                        web::resource("/costly")
                            .wrap(costly.clone())
                            .route(web::get().to(|| async { "costly" })),
                    )
            })
        }
    }
}

/// `first;`, then `second` once `gate` has a permit.
fn gated_stream(gate: Arc<Semaphore>) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
    futures_util::stream::unfold(0u8, move |step| {
        let gate = gate.clone();
        async move {
            match step {
                0 => Some((Ok(Bytes::from_static(b"first;")), 1)),
                1 => {
                    gate.acquire().await.ok()?.forget();
                    Some((Ok(Bytes::from_static(b"second")), 2))
                }
                _ => None,
            }
        }
    })
}

mod axum_app {
    use super::*;
    use axum::body::Body;
    use axum::extract::{Path, State};
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::{get, post};
    use axum::Router;

    pub async fn start<B: Backend>(config: RateLimit<B>, gate: Arc<Semaphore>) -> SocketAddr {
        let app = Router::new()
            .route("/", get(|| async { "ok" }).post(|| async { "posted" }))
            .route(
                "/users/{id}",
                get(|Path(id): Path<String>| async move { format!("user {id}") }),
            )
            .route(
                "/echo",
                post(|headers: HeaderMap, body: Bytes| async move {
                    echo(headers.get("x-test").map(|v| v.as_bytes()), &body)
                }),
            )
            .route(
                "/stream",
                get(
                    |State(gate): State<Arc<Semaphore>>| async move { Body::from_stream(gated_stream(gate)) },
                ),
            )
            .route(
                "/status/{code}",
                get(|Path(code): Path<u16>| async move { StatusCode::from_u16(code).expect("a status") }),
            )
            .route(
                "/used/{value}",
                get(|Path(value): Path<String>| async move { ([(TOKENS_USED, value)], "used") }),
            )
            .route("/panic", get(panics))
            .layer(config.layer())
            .with_state(gate);
        serve(app).await
    }

    /// Serves `app` with the peer address recorded.
    pub async fn serve(app: Router) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        tokio::spawn(async move {
            axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
                .await
                .expect("axum server");
        });
        addr
    }
}

mod actix_app {
    use super::*;
    use actix_web::http::StatusCode;
    use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};

    pub fn start<B: Backend>(config: RateLimit<B>, gate: Arc<Semaphore>) -> SocketAddr {
        let middleware = config.actix();
        serve(move || {
            App::new()
                .wrap(middleware.clone())
                .app_data(web::Data::new(gate.clone()))
                .route("/", web::get().to(|| async { "ok" }))
                .route("/", web::post().to(|| async { "posted" }))
                .route(
                    "/users/{id}",
                    web::get().to(|id: web::Path<String>| async move { format!("user {id}") }),
                )
                .route(
                    "/echo",
                    web::post().to(|req: HttpRequest, body: Bytes| async move {
                        echo(req.headers().get("x-test").map(|v| v.as_bytes()), &body)
                    }),
                )
                .route(
                    "/stream",
                    web::get().to(|gate: web::Data<Arc<Semaphore>>| async move {
                        HttpResponse::Ok().streaming(gated_stream(gate.get_ref().clone()))
                    }),
                )
                .route(
                    "/status/{code}",
                    web::get().to(|code: web::Path<u16>| async move {
                        HttpResponse::new(StatusCode::from_u16(*code).expect("a status"))
                    }),
                )
                .route(
                    "/used/{value}",
                    web::get().to(|value: web::Path<String>| async move {
                        HttpResponse::Ok()
                            .insert_header((TOKENS_USED, value.into_inner()))
                            .body("used")
                    }),
                )
                .route("/panic", web::get().to(panics))
        })
    }

    /// Serves the applications `app` makes (one per worker) on 127.0.0.1,
    /// on an actix system of its own until the test process ends.
    pub fn serve<F, T, B>(app: F) -> SocketAddr
    where
        F: Fn() -> App<T> + Send + Clone + 'static,
        T: actix_web::dev::ServiceFactory<
                actix_web::dev::ServiceRequest,
                Config = (),
                Response = actix_web::dev::ServiceResponse<B>,
                Error = actix_web::Error,
                InitError = (),
            > + 'static,
        B: actix_web::body::MessageBody + 'static,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("local address");
        std::thread::spawn(move || {
            actix_rt::System::new().block_on(async move {
                HttpServer::new(app)
                    .workers(1)
                    // A client that closes its connection while a streamed
                    // body waits is noticed at once, not at the next write
                    // (which frees a concurrency policy's slot).
                    .h1_allow_half_closed(false)
                    .disable_signals()
                    .shutdown_timeout(0)
                    .listen(listener)
                    .expect("listen")
                    .run()
                    .await
                    .expect("actix server");
            });
        });
        addr
    }
}

/// What `/panic` does.
async fn panics() -> &'static str {
    panic!("the handler of /panic panics")
}

/// What `/echo` answers.
fn echo(header: Option<&[u8]>, body: &[u8]) -> String {
    format!(
        "x-test={} body={}",
        String::from_utf8_lossy(header.unwrap_or(b"-")),
        String::from_utf8_lossy(body)
    )
}

/// Runs each named scenario `async fn name(stack: Stack)` as one test per
/// stack, in modules `axum` and `actix`.
#[macro_export]
macro_rules! on_both_stacks {
    ($($name:ident),* $(,)?) => {
        mod axum {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::apps::Stack::Axum).await
                }
            )*
        }
        mod actix {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::apps::Stack::Actix).await
                }
            )*
        }
    };
}
