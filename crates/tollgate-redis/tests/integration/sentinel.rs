//! Redis Sentinel: decisions go to the primary the sentinel names, follow
//! a failover to the promoted replica, and a wrong name or an unreachable
//! sentinel is a clear error.

use std::time::{Duration, Instant};

use tollgate::{Limiter, Strategy};
use tollgate_redis::{ConnectErrorKind, RedisBackend};
use tollgate_test_support::redis::sentinel::{wait_for, Sentinel, MASTER};
use tollgate_test_support::redis::{free_port, RedisServer};

const LIMIT: u64 = 5;

fn fixed_window(backend: &RedisBackend) -> Limiter<RedisBackend> {
    Limiter::builder()
        .backend(backend.clone())
        .strategy(Strategy::FixedWindow)
        .limit(LIMIT)
        .window(Duration::from_secs(3_600))
        .build()
        .unwrap()
}

/// How many of `tries` requests for `key` are admitted; panics on an error.
async fn admitted(limiter: &Limiter<RedisBackend>, key: &str, tries: u64) -> u64 {
    let mut admitted = 0;
    for _ in 0..tries {
        if limiter.allow(key).await.expect("decision").allowed {
            admitted += 1;
        }
    }
    admitted
}

/// Kills the primary and makes decisions on `key` until one is admitted
/// (on the promoted replica, within 10 s): how many failed meanwhile, and
/// how long after the kill the first succeeded.
async fn fail_over(setup: &mut Sentinel, limiter: &Limiter<RedisBackend>, key: &str) -> (u32, Duration) {
    setup.primary.kill();
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(10);
    let mut failed = 0;
    loop {
        match limiter.allow(key).await {
            Ok(decision) => {
                assert!(decision.allowed);
                break;
            }
            Err(_) => failed += 1,
        }
        assert!(
            Instant::now() < deadline,
            "no decision succeeded within 10 s of the primary's death ({failed} failed); sentinel \
             names port {:?}",
            setup.primary_port()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (failed, killed.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_follow_a_failover_to_the_promoted_replica() {
    let mut setup = Sentinel::start();
    let backend = RedisBackend::builder()
        .connect_sentinel(MASTER, &[setup.url()])
        .await
        .unwrap();
    assert!(backend.is_sentinel() && !backend.is_cluster());
    let limiter = fixed_window(&backend);
    assert_eq!(admitted(&limiter, "before", 2 * LIMIT).await, LIMIT);
    assert_eq!(
        setup.primary.cli(&["EXISTS", "tollgate::fixed_window:before"]),
        "1"
    );

    // A background connection through the same sentinel serves too.
    let background = RedisBackend::builder()
        .connect_sentinel_in_background(MASTER, &[setup.url()])
        .unwrap();
    assert!(background.is_sentinel());
    let late = fixed_window(&background);
    assert!(late.allow("background").await.unwrap().allowed);

    // Kill the primary: the sentinel promotes the replica, and decisions
    // resume on it (each failed one meanwhile is an error, not a hang).
    let (failed, resumed) = fail_over(&mut setup, &limiter, "after").await;
    assert!(failed > 0, "decisions cannot have succeeded on a killed primary");
    assert_eq!(setup.primary_port(), Some(setup.replica.port()));
    assert!(setup.replica.cli(&["ROLE"]).starts_with("master"));
    // Exact on the new primary: the first decision above counted.
    assert_eq!(admitted(&limiter, "after", 2 * LIMIT).await, LIMIT - 1);
    assert_eq!(admitted(&limiter, "fresh", 2 * LIMIT).await, LIMIT);
    assert_eq!(
        setup.replica.cli(&["EXISTS", "tollgate::fixed_window:fresh"]),
        "1"
    );
    // A calendar window, its boundaries sent with each call, is exact on
    // the promoted primary too.
    let year = tollgate::calendar::Calendar::new(tollgate::calendar::Period::Year, "UTC", None).unwrap();
    let calendar = Limiter::builder()
        .backend(backend.clone())
        .policy(tollgate::Limit::per_calendar(LIMIT, year).unwrap().into())
        .build()
        .unwrap();
    assert_eq!(admitted(&calendar, "yearly", 2 * LIMIT).await, LIMIT);
    // The background connection finds the new primary as well.
    let deadline = Instant::now() + Duration::from_secs(5);
    while late.allow("background-after").await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the background connection never resumed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("decisions resumed {resumed:?} after the primary was killed ({failed} failed)");
}

#[tokio::test]
async fn a_wrong_primary_name_is_named() {
    let primary = RedisServer::start();
    let sentinel = RedisServer::start_sentinel(&format!(
        "sentinel monitor {MASTER} 127.0.0.1 {} 1\n",
        primary.port()
    ));
    let err = RedisBackend::connect_sentinel("no-such-primary", &[sentinel.url()])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::NoPrimary, "{err}");
    let message = err.to_string();
    assert!(message.contains("\"no-such-primary\""), "{message}");
    assert!(message.contains(&sentinel.port().to_string()), "{message}");
    // The right name through the same sentinel works.
    assert!(RedisBackend::connect_sentinel(MASTER, &[sentinel.url()])
        .await
        .is_ok());
}

#[tokio::test]
async fn unreachable_sentinels_are_named() {
    let ports = [free_port(), free_port()];
    let urls: Vec<String> = ports.iter().map(|p| format!("redis://127.0.0.1:{p}")).collect();
    let err = RedisBackend::connect_sentinel(MASTER, &urls).await.unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::Unreachable, "{err}");
    let message = err.to_string();
    for port in ports {
        assert!(message.contains(&port.to_string()), "{message}");
    }
    assert!(message.contains("no sentinel answered"), "{message}");

    let err = RedisBackend::connect_sentinel(MASTER, &[] as &[&str])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::InvalidUrl, "{err}");
    let err = RedisBackend::connect_sentinel("", &urls).await.unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::InvalidUrl, "{err}");
}

#[tokio::test]
async fn a_server_given_as_a_sentinel_is_named() {
    let server = RedisServer::start();
    let err = RedisBackend::connect_sentinel(MASTER, &[server.url()])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::NotRedis, "{err}");
    assert!(err.to_string().contains("sentinel"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_leave_a_demoted_primary_for_the_promoted_one() {
    let setup = Sentinel::start();
    let backend = RedisBackend::connect_sentinel(MASTER, &[setup.url()])
        .await
        .unwrap();
    let limiter = fixed_window(&backend);
    assert_eq!(admitted(&limiter, "before", 2 * LIMIT).await, LIMIT);

    // A failover that keeps the old primary running: the sentinel promotes
    // the replica, and the old primary is turned into its replica (as the
    // sentinel does some seconds later), answering writes with READONLY on
    // the connection still open to it.
    assert_eq!(setup.sentinel.cli(&["SENTINEL", "FAILOVER", MASTER]), "OK");
    wait_for("the sentinel to name the promoted replica", || {
        setup.primary_port() == Some(setup.replica.port())
    });
    let replica_port = setup.replica.port().to_string();
    assert_eq!(
        setup.primary.cli(&["REPLICAOF", "127.0.0.1", &replica_port]),
        "OK"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut read_only = 0;
    for probe in 0.. {
        let key = format!("probe{probe}");
        match limiter.allow(key.as_str()).await {
            Ok(_)
                if setup
                    .replica
                    .cli(&["EXISTS", &format!("tollgate::fixed_window:{key}")])
                    == "1" =>
            {
                break
            }
            Ok(_) => {}
            Err(err) => {
                assert!(err.to_string().contains("read only replica"), "{err}");
                read_only += 1;
            }
        }
        assert!(
            Instant::now() < deadline,
            "decisions did not move to the promoted replica within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(read_only > 0, "the demoted primary must have refused a decision");
    // Every decision now goes to the new primary, and exactly.
    assert_eq!(admitted(&limiter, "fresh", 2 * LIMIT).await, LIMIT);
    assert_eq!(
        setup.replica.cli(&["EXISTS", "tollgate::fixed_window:fresh"]),
        "1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_protected_primary_is_reached_with_its_credentials() {
    const PRIMARY_PW: &str = "primary-secret-7f3a";
    const SENTINEL_PW: &str = "sentinel-secret-91c2";
    let mut setup = Sentinel::start_with(Some(PRIMARY_PW), Some(SENTINEL_PW));
    let secret_free = |message: &str| {
        assert!(
            !message.contains(PRIMARY_PW) && !message.contains(SENTINEL_PW),
            "a password leaked: {message}"
        );
    };

    // The right passwords (the sentinel's in its URL) on database 3: the
    // decisions are exact, and their state is in database 3 of the primary.
    let builder = RedisBackend::builder()
        .sentinel_primary_auth(None, PRIMARY_PW)
        .sentinel_primary_db(3);
    secret_free(&format!("{builder:?}"));
    let backend = builder
        .clone()
        .connect_sentinel(MASTER, &[setup.url()])
        .await
        .unwrap();
    secret_free(&format!("{backend:?}"));
    let limiter = fixed_window(&backend);
    assert_eq!(admitted(&limiter, "auth", 2 * LIMIT).await, LIMIT);
    let key = "tollgate::fixed_window:auth";
    assert_eq!(setup.server_cli(&setup.primary, &["-n", "3", "EXISTS", key]), "1");
    assert_eq!(setup.server_cli(&setup.primary, &["EXISTS", key]), "0");
    // In the background too.
    let background = builder
        .clone()
        .connect_sentinel_in_background(MASTER, &[setup.url()])
        .unwrap();
    assert_eq!(admitted(&fixed_window(&background), "auth", 1).await, 0);

    // The ACL user named explicitly (`default`, which requirepass sets).
    let with_user = RedisBackend::builder()
        .sentinel_primary_auth(Some("default"), PRIMARY_PW)
        .connect_sentinel(MASTER, &[setup.url()])
        .await
        .unwrap();
    assert_eq!(
        admitted(&fixed_window(&with_user), "user", 2 * LIMIT).await,
        LIMIT
    );
    // An ACL user of its own, whose password is not the default user's.
    let acl = [
        "ACL",
        "SETUSER",
        "limiter",
        "on",
        ">limiter-pw-2b8e",
        "~*",
        "&*",
        "+@all",
    ];
    assert_eq!(setup.server_cli(&setup.primary, &acl), "OK");
    let as_limiter = RedisBackend::builder()
        .sentinel_primary_auth(Some("limiter"), "limiter-pw-2b8e")
        .connect_sentinel(MASTER, &[setup.url()])
        .await
        .unwrap();
    assert_eq!(
        admitted(&fixed_window(&as_limiter), "acl", 2 * LIMIT).await,
        LIMIT
    );
    let err = RedisBackend::builder()
        .sentinel_primary_auth(Some("limiter"), PRIMARY_PW)
        .connect_sentinel(MASTER, &[setup.url()])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::Authentication, "{err}");
    assert!(!err.to_string().contains(PRIMARY_PW), "{err}");

    // A wrong password for the primary, none, and none for the sentinel:
    // each an authentication error naming the primary and whose password
    // is wanted, without a password.
    let sentinel_port = setup.sentinel.port().to_string();
    let primary_addr = format!("at 127.0.0.1:{}", setup.primary.port());
    let unauthenticated = format!("redis://127.0.0.1:{sentinel_port}");
    let attempts = [
        (Some("wrong-password"), setup.url(), primary_addr.as_str()),
        (None, setup.url(), primary_addr.as_str()),
        (Some(PRIMARY_PW), unauthenticated, "in its URL"),
    ];
    for (password, url, blamed) in attempts {
        let mut builder = RedisBackend::builder();
        if let Some(password) = password {
            builder = builder.sentinel_primary_auth(None, password);
        }
        let err = builder
            .connect_sentinel(MASTER, &[url.as_str()])
            .await
            .unwrap_err();
        let message = err.to_string();
        assert_eq!(err.kind(), ConnectErrorKind::Authentication, "{message}");
        assert!(message.contains(&format!("primary \"{MASTER}\"")), "{message}");
        assert!(message.contains(&sentinel_port), "{message}");
        assert!(message.contains("sentinel_primary_auth"), "{message}");
        assert!(message.contains(blamed), "{message}");
        secret_free(&message);
        secret_free(&format!("{err:?}"));
    }

    // A negative database is refused before connecting.
    let err = RedisBackend::builder()
        .sentinel_primary_db(-1)
        .connect_sentinel(MASTER, &[setup.url()])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ConnectErrorKind::InvalidSetting, "{err}");
    assert_eq!(err.target(), "sentinel_primary_db");

    // After a failover, the promoted replica is logged in to as well, on
    // the same database.
    setup.wait_until_promotable();
    let (failed, _) = fail_over(&mut setup, &limiter, "after").await;
    assert!(failed > 0, "decisions cannot have succeeded on a killed primary");
    assert_eq!(admitted(&limiter, "after", 2 * LIMIT).await, LIMIT - 1);
    let key = "tollgate::fixed_window:after";
    assert_eq!(setup.server_cli(&setup.replica, &["-n", "3", "EXISTS", key]), "1");
}
