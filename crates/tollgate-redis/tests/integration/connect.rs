//! Connecting: URL forms that work (TCP with a database number, password,
//! unix sockets) and clear errors at construction for those that cannot.

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tollgate::backend::BackendErrorKind;
use tollgate::{Limiter, Strategy};
use tollgate_redis::{ConnectError, ConnectErrorKind, RedisBackend};
use tollgate_test_support::redis::{free_port, socket_path, RedisServer};

async fn limiter(backend: RedisBackend) -> Limiter<RedisBackend> {
    Limiter::builder()
        .backend(backend)
        .strategy(Strategy::FixedWindow)
        .limit(2)
        .window(Duration::from_secs(3_600))
        .build()
        .unwrap()
}

#[tokio::test]
async fn database_number_selects_the_database() {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&format!("{}/3", server.url()))
        .await
        .unwrap();
    let limiter = limiter(backend).await;
    assert!(limiter.allow("k").await.unwrap().allowed);
    assert_eq!(
        server.cli(&["-n", "3", "EXISTS", "tollgate::fixed_window:k"]),
        "1"
    );
    assert_eq!(
        server.cli(&["-n", "0", "EXISTS", "tollgate::fixed_window:k"]),
        "0"
    );
}

#[tokio::test]
async fn unix_sockets_work_with_both_schemes() {
    let dir = tempfile::tempdir().unwrap();
    let sock = socket_path(dir.path());
    let server = RedisServer::start_with(&["--unixsocket", &sock.display().to_string()]);
    for url in [
        format!("redis+unix://{}", sock.display()),
        format!("unix://{}?db=2", sock.display()),
    ] {
        let limiter = limiter(RedisBackend::connect(&url).await.unwrap()).await;
        assert!(limiter.allow(&url).await.unwrap().allowed, "{url}");
    }
    assert_eq!(server.cli(&["-n", "2", "DBSIZE"]), "1");
}

#[tokio::test]
async fn passwords_are_sent_and_wrong_ones_are_named() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let port = server.port();

    let ok = RedisBackend::connect(&format!("redis://:s3cret@127.0.0.1:{port}"))
        .await
        .unwrap();
    assert!(limiter(ok).await.allow("k").await.unwrap().allowed);
    let ok = RedisBackend::connect(&format!("redis://default:s3cret@127.0.0.1:{port}/1"))
        .await
        .unwrap();
    assert!(limiter(ok).await.allow("k").await.unwrap().allowed);

    let err = RedisBackend::connect(&format!("redis://:wrong@127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::Authentication, "{err}");
    let message = err.to_string();
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(message.contains("password"), "{message}");
    assert!(!message.contains("wrong"), "the password leaked: {message}");

    let err = RedisBackend::connect(&server.url()).await.unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::Authentication, "{err}");
    assert!(err.to_string().contains("password"), "{err}");
}

#[tokio::test]
async fn unparseable_urls_are_configuration_errors() {
    for url in [
        "",
        "localhost:6379",
        "http://127.0.0.1:6379",
        "redis://127.0.0.1:notaport",
        "redis://:pw@[::1",
    ] {
        let err = RedisBackend::connect_in_background(url).unwrap_err();
        assert_eq!(err.kind(), ConnectErrorKind::InvalidUrl, "{url}: {err}");
        let err = RedisBackend::connect(url).await.unwrap_err();
        assert_eq!(err.kind(), ConnectErrorKind::InvalidUrl, "{url}: {err}");
        assert!(err.to_string().contains("not a valid Redis URL"), "{err}");
        assert!(!err.to_string().contains(":pw@"), "the password leaked: {err}");
        match tollgate::Error::from(err) {
            tollgate::Error::Config(config) => assert_eq!(config.field(), "url"),
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }
    let err = RedisBackend::connect_cluster::<&str>(&[]).await.unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::InvalidUrl, "{err}");
    let err = RedisBackend::builder()
        .connect_cluster_in_background::<&str>(&[])
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::InvalidUrl, "{err}");
}

fn fixed_window(backend: &RedisBackend, fail_open: bool) -> Limiter<RedisBackend> {
    Limiter::builder()
        .backend(backend.clone())
        .strategy(Strategy::FixedWindow)
        .limit(2)
        .window(Duration::from_secs(3_600))
        .fail_policy(if fail_open {
            tollgate::FailPolicy::Open
        } else {
            tollgate::FailPolicy::Closed
        })
        .build()
        .unwrap()
}

/// Polls `condition` every 10 ms until it holds, for at most ten seconds.
async fn eventually(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition().await {
        assert!(Instant::now() < deadline, "not within ten seconds: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_connection_serves_once_a_late_server_is_up() {
    let port = free_port(); // nothing listens there yet
    let url = format!("redis://:s3cret@127.0.0.1:{port}");
    let backend = RedisBackend::builder()
        .timeout(Duration::from_secs(2))
        .connect_in_background(&url)
        .unwrap();
    let closed = fixed_window(&backend, false);
    let open = fixed_window(&backend, true);

    // Down: decisions follow the fail policy, with an error naming the URL.
    let err = match closed.allow("k").await {
        Err(tollgate::Error::Backend(err)) => err,
        other => panic!("expected a backend error, got {other:?}"),
    };
    assert_eq!(err.kind(), BackendErrorKind::Unavailable, "{err}");
    let message = err.to_string();
    for expected in [
        format!("cannot use Redis at redis://:***@127.0.0.1:{port}: not connected yet"),
        "the last attempt failed: unreachable: nothing accepts connections there".to_owned(),
    ] {
        assert!(message.contains(&expected), "{message}");
    }
    assert!(!message.contains("s3cret"), "the password leaked: {message}");
    let source = std::error::Error::source(&err)
        .and_then(|source| source.downcast_ref::<ConnectError>())
        .expect("the connection error is the source");
    assert_eq!(source.kind(), ConnectErrorKind::NotConnected);
    assert_eq!(source.target(), format!("redis://:***@127.0.0.1:{port}"));
    assert!(!backend.is_connected());
    let d = open.allow("k").await.unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 0));
    assert_eq!(open.fail_open_events(), 1);

    // Up: the same limiters decide on Redis.
    let mut server = RedisServer::start_on(port, &["--requirepass", "s3cret"]);
    eventually("connected", async || backend.is_connected()).await;
    let d = closed.allow("k").await.unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 1));
    let d = open.allow("k").await.unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 0));
    assert!(!open.allow("k").await.unwrap().allowed, "the limit holds");
    assert_eq!(open.fail_open_events(), 1);
    let exists = [
        "-a",
        "s3cret",
        "--no-auth-warning",
        "EXISTS",
        "tollgate::fixed_window:k",
    ];
    assert_eq!(server.cli(&exists), "1");

    // Killed and restarted: decisions fail, then recover by themselves.
    server.kill();
    assert!(closed.allow("k").await.is_err());
    server.restart();
    eventually("decisions after a restart", async || {
        closed.allow("k2").await.is_ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_connection_to_a_running_server_serves_the_first_decision() {
    let server = RedisServer::start();
    let backend = RedisBackend::builder()
        .timeout(Duration::from_secs(2))
        .connect_in_background(&server.url())
        .unwrap();
    // The first decision waits for the first attempt instead of failing.
    let d = fixed_window(&backend, false).allow("k").await.unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 1));
    assert!(backend.is_connected());
}

#[tokio::test]
async fn a_refused_connection_is_named() {
    let port = free_port();
    let err = RedisBackend::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::Unreachable, "{err}");
    assert!(err.to_string().contains("nothing accepts connections"), "{err}");
    assert!(err.to_string().contains(&port.to_string()), "{err}");
    assert!(matches!(tollgate::Error::from(err), tollgate::Error::Backend(_)));
}

/// A listener on a free port that treats every connection with `serve`.
async fn fake_server<F, Fut>(serve: F) -> u16
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream));
        }
    });
    port
}

#[tokio::test]
async fn a_port_that_speaks_another_protocol_is_not_redis() {
    let port = fake_server(|mut stream| async move {
        let _ = stream
            .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    })
    .await;
    let err = RedisBackend::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::NotRedis, "{err}");
    assert!(err.to_string().contains("Redis protocol"), "{err}");
}

#[tokio::test]
async fn a_port_that_hangs_up_is_not_redis() {
    let port = fake_server(|stream| async move { drop(stream) }).await;
    let err = RedisBackend::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::NotRedis, "{err}");
    assert!(err.to_string().contains("closed the connection"), "{err}");
}

#[tokio::test]
async fn a_port_that_never_answers_times_out() {
    let port = fake_server(|stream| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(stream);
    })
    .await;
    let started = std::time::Instant::now();
    let err = RedisBackend::builder()
        .connect_timeout(Duration::from_millis(300))
        .connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::Timeout, "{err}");
    assert!(err.to_string().contains("no answer"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_background_cluster_connection_names_its_seeds_until_connected() {
    let port = free_port(); // nothing listens there
    let backend = RedisBackend::builder()
        .connect_cluster_in_background(&[format!("redis://user:pw@127.0.0.1:{port}")])
        .unwrap();
    assert!(backend.is_cluster());
    assert!(!backend.is_connected());
    let err = match fixed_window(&backend, false).allow("k").await {
        Err(tollgate::Error::Backend(err)) => err,
        other => panic!("expected a backend error, got {other:?}"),
    };
    assert_eq!(err.kind(), BackendErrorKind::Unavailable, "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "cannot use Redis at cluster seed redis://user:***@127.0.0.1:{port}: not connected yet"
        )),
        "{message}"
    );
    assert!(!message.contains("pw@"), "the password leaked: {message}");
}
