//! Envoy's rate-limit API through a tonic client built from the same
//! protos.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{rate_limit::Unit, Code};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use tollgate::clock::Clock;
use tollgate::clock::ManualClock;
use tollgate::{Limiter, Policy, Strategy};
use tonic::transport::Channel;

use crate::support::{self, start, Running};

/// The guide's example configuration (docs/service.md).
fn example() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/serve/ratelimit.yaml");
    std::fs::read_to_string(path).unwrap()
}

/// A descriptor of `entries`, with its own hits when given.
pub(crate) fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        hits_addend: hits.map(|value| UInt64Value { value }),
        ..Default::default()
    }
}

/// A service with the guide's Envoy file and a gRPC client of it.
pub(crate) struct Envoy {
    pub(crate) server: Running,
    client: RateLimitServiceClient<Channel>,
    clock: ManualClock,
    _dir: tempfile::TempDir,
}

/// A server on a clock `offset` after a day boundary.
pub(crate) async fn envoy(offset: Duration) -> Envoy {
    envoy_serving(&example(), offset).await
}

/// A server of the Envoy file `text` on a clock `offset` after a day
/// boundary.
async fn envoy_serving(text: &str, offset: Duration) -> Envoy {
    envoy_with(text, offset, tollgate_server::HeaderMode::RateLimit).await
}

/// [`envoy_serving`], its answers carrying the `headers`.
async fn envoy_with(text: &str, offset: Duration, headers: tollgate_server::HeaderMode) -> Envoy {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "edge.yaml", text);
    let clock = ManualClock::new(Duration::from_secs(20_000 * 86_400) + offset);
    let server = start(
        support::builder(&[&file])
            .grpc_listen(support::any_port())
            .envoy_headers(headers)
            .clock(clock.clone()),
    )
    .await;
    let client = RateLimitServiceClient::connect(format!("http://{}", server.grpc.unwrap()))
        .await
        .unwrap();
    Envoy {
        server,
        client,
        clock,
        _dir: dir,
    }
}

impl Envoy {
    pub(crate) async fn ask(
        &mut self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
        hits: u32,
    ) -> RateLimitResponse {
        let request = RateLimitRequest {
            domain: domain.to_owned(),
            descriptors,
            hits_addend: hits,
        };
        self.client.should_rate_limit(request).await.unwrap().into_inner()
    }

    pub(crate) async fn one(&mut self, entries: &[(&str, &str)], hits: u32) -> RateLimitResponse {
        self.ask("edge", vec![descriptor(entries, None)], hits).await
    }

    /// What `user` has left this hour, charging nothing.
    async fn user_left(&mut self, user: &str) -> u32 {
        let response = self
            .ask("edge", vec![descriptor(&[("user", user)], Some(0))], 0)
            .await;
        response.statuses[0].limit_remaining
    }
}

fn code(c: Code) -> i32 {
    c as i32
}

fn reference(limit: u64, window: Duration, clock: &ManualClock) -> Limiter {
    Limiter::builder()
        .policy(Policy::new(Strategy::FixedWindow, limit, window).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap()
}

fn duration(d: Duration) -> Option<envoy_types::pb::google::protobuf::Duration> {
    Some(envoy_types::pb::google::protobuf::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_descriptor_is_decided_exactly_with_hits_and_headers() {
    let mut envoy = envoy(Duration::from_millis(12_250)).await;
    let reference = reference(3, Duration::from_secs(60), &envoy.clock);
    for hits in [1u32, 0, 2, 1, 3] {
        envoy.clock.advance(Duration::from_millis(100));
        let response = envoy.one(&[("remote_address", "10.0.0.1")], hits).await;
        // hits_addend 0 is 1, as in Envoy.
        let want = reference.check_n("10.0.0.1", u64::from(hits.max(1)));
        let status = &response.statuses[0];
        let expected = if want.allowed { Code::Ok } else { Code::OverLimit };
        assert_eq!(response.overall_code, code(expected), "hits {hits}");
        assert_eq!(status.code, code(expected));
        assert_eq!(u64::from(status.limit_remaining), want.remaining, "hits {hits}");
        assert_eq!(status.duration_until_reset, duration(want.reset));
        let limit = status.current_limit.as_ref().unwrap();
        assert_eq!((limit.requests_per_unit, limit.unit), (3, Unit::Minute as i32));
        let header = |name: &str| {
            response
                .response_headers_to_add
                .iter()
                .find(|h| h.key == name)
                .map(|h| h.value.clone())
        };
        assert_eq!(header("ratelimit-remaining"), Some(want.remaining.to_string()));
        assert_eq!(header("ratelimit-limit"), Some("3".to_owned()));
        let retry = want
            .retry_after
            .map(|d| d.as_nanos().div_ceil(1_000_000_000).to_string());
        assert_eq!(header("retry-after"), retry);
    }
    envoy.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_descriptors_are_all_or_nothing() {
    let mut envoy = envoy(Duration::from_secs(1)).await;
    let both = || {
        vec![
            descriptor(&[("remote_address", "10.0.0.2")], None),
            descriptor(&[("user", "alice")], None),
        ]
    };
    for _ in 0..3 {
        let response = envoy.ask("edge", both(), 1).await;
        assert_eq!(response.overall_code, code(Code::Ok));
    }
    assert_eq!(envoy.user_left("alice").await, 2);
    // The address is used up: the request is over the limit, and the user's
    // limit is not charged.
    for _ in 0..3 {
        let response = envoy.ask("edge", both(), 1).await;
        assert_eq!(response.overall_code, code(Code::OverLimit));
        assert_eq!(response.statuses[0].code, code(Code::OverLimit));
        assert_eq!(response.statuses[1].code, code(Code::Ok));
        assert_eq!(response.statuses[1].limit_remaining, 2);
    }
    assert_eq!(envoy.user_left("alice").await, 2);
    // The user first: charged, then given back when the address denies.
    let user_first = vec![
        descriptor(&[("user", "alice")], None),
        descriptor(&[("remote_address", "10.0.0.2")], None),
    ];
    let response = envoy.ask("edge", user_first, 1).await;
    assert_eq!(response.overall_code, code(Code::OverLimit));
    assert_eq!(response.statuses[1].code, code(Code::OverLimit));
    // Given back, the user's limit reports what it has, not what it had
    // while charged.
    assert_eq!(response.statuses[0].code, code(Code::Ok));
    assert_eq!(response.statuses[0].limit_remaining, 2);
    assert_eq!(envoy.user_left("alice").await, 2);
    // The same key twice in one request counts twice: 2 + 2 fit in 5, a
    // third pair does not, and charges nothing.
    let twice = || {
        vec![
            descriptor(&[("user", "bob")], None),
            descriptor(&[("user", "bob")], None),
        ]
    };
    assert_eq!(envoy.ask("edge", twice(), 1).await.overall_code, code(Code::Ok));
    assert_eq!(envoy.ask("edge", twice(), 1).await.overall_code, code(Code::Ok));
    let third = envoy.ask("edge", twice(), 1).await;
    assert_eq!(third.overall_code, code(Code::OverLimit));
    assert_eq!(third.statuses[0].limit_remaining, 1);
    assert_eq!(envoy.user_left("bob").await, 1);
    // A blocked descriptor (0 per unit) denies the whole request.
    let blocked = vec![
        descriptor(&[("remote_address", "50.0.0.5")], None),
        descriptor(&[("user", "carol")], None),
    ];
    let response = envoy.ask("edge", blocked, 1).await;
    assert_eq!(response.overall_code, code(Code::OverLimit));
    assert_eq!(
        response.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        0
    );
    let into_second = Duration::from_nanos(envoy.clock.now_nanos() % 1_000_000_000);
    assert_eq!(
        response.statuses[0].duration_until_reset,
        duration(Duration::from_secs(1) - into_second)
    );
    assert_eq!(envoy.user_left("carol").await, 5);
    envoy.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_domains_and_descriptors_are_ok_and_unlimited_is_unlimited() {
    let mut envoy = envoy(Duration::ZERO).await;
    for _ in 0..10 {
        let response = envoy
            .ask("other", vec![descriptor(&[("user", "x")], None)], 1)
            .await;
        assert_eq!(response.overall_code, code(Code::Ok));
        assert_eq!(response.statuses.len(), 1);
        for entries in [
            &[("nope", "x")][..],
            &[("user", "x"), ("extra", "y")],
            &[("tier", "gold")],
            &[],
        ] {
            let response = envoy.one(entries, 1).await;
            assert_eq!(response.overall_code, code(Code::Ok), "{entries:?}");
            assert_eq!(response.statuses[0].current_limit, None);
        }
        let response = envoy.one(&[("internal", "svc")], 1).await;
        assert_eq!(response.overall_code, code(Code::Ok));
        assert_eq!(response.statuses[0].limit_remaining, u32::MAX);
    }
    let status = envoy
        .client
        .should_rate_limit(RateLimitRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    envoy.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_answers_ok_and_counts() {
    let mut envoy = envoy(Duration::ZERO).await;
    let first = envoy.one(&[("path", "/shadow")], 1).await;
    assert_eq!(
        (first.overall_code, first.statuses[0].limit_remaining),
        (code(Code::Ok), 0)
    );
    for _ in 0..3 {
        // Over the limit, but OK; and it does not block the other descriptor.
        let response = envoy
            .ask(
                "edge",
                vec![
                    descriptor(&[("path", "/shadow")], None),
                    descriptor(&[("user", "dave")], None),
                ],
                1,
            )
            .await;
        assert_eq!(response.overall_code, code(Code::Ok));
        assert_eq!(response.statuses[0].code, code(Code::Ok));
    }
    assert_eq!(envoy.user_left("dave").await, 2);
    let metrics = reqwest::get(envoy.server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tollgate_server_shadow_denied_total{resource=\"edge.path=/shadow\"}")),
        "{metrics}"
    );
    envoy.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_are_aligned_to_the_minute_and_the_hour() {
    // Half a second before a new hour (and so a new minute).
    let mut envoy = envoy(Duration::from_millis(3 * 3_600_000 - 500)).await;
    for _ in 0..3 {
        assert_eq!(
            envoy.one(&[("remote_address", "10.0.0.3")], 1).await.overall_code,
            code(Code::Ok)
        );
    }
    for _ in 0..5 {
        assert_eq!(
            envoy.one(&[("user", "erin")], 1).await.overall_code,
            code(Code::Ok)
        );
    }
    for entries in [&[("remote_address", "10.0.0.3")], &[("user", "erin")]] {
        let response = envoy.one(entries, 1).await;
        assert_eq!(response.overall_code, code(Code::OverLimit));
        assert_eq!(
            response.statuses[0].duration_until_reset,
            duration(Duration::from_millis(500))
        );
    }
    envoy.clock.advance(Duration::from_millis(499));
    assert_eq!(
        envoy.one(&[("user", "erin")], 1).await.overall_code,
        code(Code::OverLimit)
    );
    envoy.clock.advance(Duration::from_millis(1));
    let minute = envoy.one(&[("remote_address", "10.0.0.3")], 1).await;
    assert_eq!(
        (minute.overall_code, minute.statuses[0].limit_remaining),
        (code(Code::Ok), 2)
    );
    assert_eq!(
        minute.statuses[0].duration_until_reset,
        duration(Duration::from_secs(60))
    );
    let hour = envoy.one(&[("user", "erin")], 1).await;
    assert_eq!(
        (hour.overall_code, hour.statuses[0].limit_remaining),
        (code(Code::Ok), 4)
    );
    assert_eq!(
        hour.statuses[0].duration_until_reset,
        duration(Duration::from_secs(3_600))
    );
    envoy.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacing_limit_drops_the_replaced_one() {
    let mut envoy = envoy(Duration::ZERO).await;
    let gold = || descriptor(&[("tier", "gold"), ("user", "frank")], None);
    let special = || descriptor(&[("tier", "special"), ("user", "frank")], None);
    for _ in 0..4 {
        let response = envoy.ask("edge", vec![gold(), special()], 1).await;
        assert_eq!(response.overall_code, code(Code::Ok));
        assert_eq!(response.statuses[0].current_limit, None);
        assert_eq!(
            response.statuses[1]
                .current_limit
                .as_ref()
                .unwrap()
                .requests_per_unit,
            10
        );
    }
    // Alone, the gold limit applies and was never charged.
    let alone = envoy.ask("edge", vec![gold()], 1).await;
    assert_eq!(
        (alone.overall_code, alone.statuses[0].limit_remaining),
        (code(Code::Ok), 1)
    );
    envoy.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envoy_file_that_fails_to_parse_reports_its_own_mistake() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        // A duplicate key, which the kind-of-file probe cannot read either.
        ("domain: d\ndescriptors:\n  - key: a\n    key: b\n", "duplicate"),
        ("domain: d\ndomain: e\n", "duplicate"),
        // Too deep.
        (
            &*format!("domain: d\ndescriptors: {}{}\n", "[".repeat(200), "]".repeat(200)),
            "",
        ),
    ];
    for (text, wanted) in cases {
        let file = support::write(dir.path(), "rl.yaml", text);
        let err = support::builder(&[&file]).bind().await.unwrap_err().to_string();
        assert!(!err.contains("unknown field"), "{text}: {err}");
        assert!(!err.contains("tollgate"), "{text}: {err}");
        assert!(err.contains(wanted), "{text}: {err}");
    }
}

/// The requests admitted under the `resource` label, from the Prometheus
/// text `metrics`.
fn allowed(metrics: &str, resource: &str) -> f64 {
    let label = format!("resource=\"{resource}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("tollgate_allowed_total{") && l.contains(&label))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domains_limits_are_counted_together_unless_detailed() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(
        dir.path(),
        "m.yaml",
        "domain: counted\ndescriptors:\n  - key: plain\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n  \
         - key: other\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n  - key: detailed\n    \
         detailed_metric: true\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n",
    );
    let server = start(support::builder(&[&file]).grpc_listen(support::any_port())).await;
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.grpc.unwrap()))
        .await
        .unwrap();
    for key in ["plain", "other", "detailed"] {
        let request = RateLimitRequest {
            domain: "counted".to_owned(),
            descriptors: vec![descriptor(&[(key, "x")], None)],
            hits_addend: 1,
        };
        client.should_rate_limit(request).await.unwrap();
    }
    let metrics = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(allowed(&metrics, "envoy:counted"), 2.0, "{metrics}");
    assert_eq!(allowed(&metrics, "counted.detailed"), 1.0, "{metrics}");
    assert!(!metrics.contains("resource=\"counted.plain\""), "{metrics}");
    // Asking for detail on reload gives the limit its own series, and it
    // keeps what it spent.
    std::fs::write(
        &file,
        "domain: counted\ndescriptors:\n  - key: plain\n    detailed_metric: true\n    rate_limit: { unit: minute, \
         requests_per_unit: 5 }\n",
    )
    .unwrap();
    server.reloader.reload().await.unwrap();
    let request = RateLimitRequest {
        domain: "counted".to_owned(),
        descriptors: vec![descriptor(&[("plain", "x")], None)],
        hits_addend: 1,
    };
    let response = client.should_rate_limit(request).await.unwrap().into_inner();
    assert_eq!(response.statuses[0].limit_remaining, 3);
    let metrics = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(allowed(&metrics, "counted.plain"), 1.0, "{metrics}");
    server.stop().await;
}

/// An AI gateway's sequence over Envoy's API: a check with `hits_addend`
/// 0 before the request, then the tokens it used as the hits of a rule
/// under `charge: always`. Every report counts, admitted or not; the check
/// counts nothing; the request limit beside it counts only admitted
/// requests, and does not stop the tokens from being counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_under_charge_always_count_every_token() {
    let file = "
domain: ai
descriptors:
  - key: tenant
    rate_limit: { unit: hour, requests_per_unit: 1000 }
    charge: always
    descriptors:
      - key: model
        rate_limit: { unit: hour, requests_per_unit: 3 }
";
    let mut envoy = envoy_serving(file, Duration::ZERO).await;
    let tokens = |hits| descriptor(&[("tenant", "acme")], Some(hits));
    let requests = || descriptor(&[("tenant", "acme"), ("model", "big")], Some(1));
    let mut used = 0;
    for report in [400, 500, 300] {
        let check = envoy.ask("ai", vec![tokens(0)], 1).await;
        assert_eq!(check.overall_code, code(Code::Ok), "{used} of 1000 used");
        assert_eq!(check.statuses[0].limit_remaining, 1000 - used as u32);
        let request = envoy.ask("ai", vec![requests()], 1).await;
        assert_eq!(request.overall_code, code(Code::Ok));
        // The report: 300 more than were left the third time, counted all
        // the same.
        let reported = envoy.ask("ai", vec![tokens(report)], 1).await;
        used += report;
        let fits = used <= 1000;
        assert_eq!(reported.overall_code == code(Code::Ok), fits, "{used}");
        assert_eq!(
            reported.statuses[0].limit_remaining,
            1000u32.saturating_sub(used as u32)
        );
    }
    // The budget is spent: the next check is over the limit until the hour ends.
    let check = envoy.ask("ai", vec![tokens(0)], 1).await;
    assert_eq!(check.overall_code, code(Code::OverLimit));
    assert_eq!(
        check.statuses[0].duration_until_reset,
        duration(Duration::from_secs(3_600))
    );
    // A request over its own limit (the 4th of 3) still has its tokens
    // counted: a report with the request is charged whatever the request
    // limit decides.
    let beta_model = || descriptor(&[("tenant", "beta"), ("model", "big")], Some(1));
    for _ in 0..3 {
        assert_eq!(
            envoy.ask("ai", vec![beta_model()], 1).await.overall_code,
            code(Code::Ok)
        );
    }
    let both = envoy
        .ask(
            "ai",
            vec![descriptor(&[("tenant", "beta")], Some(100)), beta_model()],
            1,
        )
        .await;
    assert_eq!(both.overall_code, code(Code::OverLimit));
    assert_eq!(both.statuses[0].code, code(Code::Ok));
    assert_eq!(both.statuses[1].code, code(Code::OverLimit));
    let left = envoy
        .ask("ai", vec![descriptor(&[("tenant", "beta")], Some(0))], 1)
        .await;
    assert_eq!(left.statuses[0].limit_remaining, 900);
    envoy.server.stop().await;
}

/// A descriptor that names its own `limit` is limited by it, as
/// envoyproxy/ratelimit honours it: whatever the file configures for the
/// descriptor, keyed by its entries, its count kept while the limit
/// changes within the unit, another unit counting apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_may_name_its_own_limit() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
    let mut envoy = envoy(Duration::from_secs(7)).await;
    let named = |entries: &[(&str, &str)], requests: u32, unit: Unit| {
        let mut d = descriptor(entries, None);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: requests,
            unit: unit as i32,
        });
        d
    };
    // Nothing configures `tenant`: its own limit applies, 3 a minute.
    for left in [2, 1, 0] {
        let r = envoy
            .ask("edge", vec![named(&[("tenant", "acme")], 3, Unit::Minute)], 1)
            .await;
        assert_eq!(
            (r.overall_code, r.statuses[0].limit_remaining),
            (code(Code::Ok), left)
        );
        let limit = r.statuses[0].current_limit.clone().unwrap();
        assert_eq!((limit.requests_per_unit, limit.unit), (3, Unit::Minute as i32));
    }
    let over = envoy
        .ask("edge", vec![named(&[("tenant", "acme")], 3, Unit::Minute)], 1)
        .await;
    assert_eq!(over.overall_code, code(Code::OverLimit));
    assert_eq!(
        over.statuses[0].duration_until_reset,
        duration(Duration::from_secs(53))
    );
    // The plan changes within the minute: the 3 spent count.
    let raised = envoy
        .ask("edge", vec![named(&[("tenant", "acme")], 5, Unit::Minute)], 1)
        .await;
    assert_eq!(
        (raised.overall_code, raised.statuses[0].limit_remaining),
        (code(Code::Ok), 1)
    );
    // Another unit counts apart.
    let hourly = envoy
        .ask("edge", vec![named(&[("tenant", "acme")], 10, Unit::Hour)], 1)
        .await;
    assert_eq!(hourly.statuses[0].limit_remaining, 9);
    // Other entries, other counts: the key holds every entry's key and value.
    let other = envoy
        .ask("edge", vec![named(&[("team", "acme")], 3, Unit::Minute)], 1)
        .await;
    assert_eq!(other.statuses[0].limit_remaining, 2);
    // A configured descriptor's own limit replaces the file's (5 an hour).
    for expected in [Code::Ok, Code::OverLimit] {
        let r = envoy
            .ask("edge", vec![named(&[("user", "erin")], 1, Unit::Minute)], 1)
            .await;
        assert_eq!(r.overall_code, code(expected));
    }
    assert_eq!(
        envoy.user_left("erin").await,
        5,
        "the file's limit of erin is untouched"
    );
    // 0: over the limit; an unknown unit: refused.
    let zero = envoy
        .ask("edge", vec![named(&[("tenant", "zed")], 0, Unit::Second)], 1)
        .await;
    assert_eq!(zero.overall_code, code(Code::OverLimit));
    let request = RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![named(&[("tenant", "acme")], 3, Unit::Unknown)],
        hits_addend: 1,
    };
    let status = envoy.client.should_rate_limit(request).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("descriptors[0].limit.unit"),
        "{}",
        status.message()
    );
    envoy.server.stop().await;
}

/// envoyproxy/ratelimit's later fields, end to end: wildcards anywhere in
/// a value, `share_threshold` (one count for every value a wildcard
/// matches), `quota_mode` (OVER_LIMIT only when every quota is spent, the
/// other descriptors then charged nothing), and `value_to_metric` and
/// `metadata` read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcards_shared_thresholds_and_quotas_decide_as_envoyproxy_ratelimit() {
    let file = "
domain: parity
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    value_to_metric: true
    rate_limit: { unit: hour, requests_per_unit: 3 }
  - key: path
    value: /v*/items/*
    metadata: { owner: catalog }
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: plan
    value: monthly
    quota_mode: true
    rate_limit: { unit: hour, requests_per_unit: 2 }
  - key: plan
    value: bonus
    quota_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 10 }
";
    let mut envoy = envoy_serving(file, Duration::ZERO).await;
    let one = |entries: &[(&str, &str)]| vec![descriptor(entries, None)];
    for (value, expected) in [
        ("files/a", Code::Ok),
        ("files/b", Code::Ok),
        ("files/c", Code::Ok),
        ("files/d", Code::OverLimit),
    ] {
        let r = envoy.ask("parity", one(&[("files", value)]), 1).await;
        assert_eq!(
            r.overall_code,
            code(expected),
            "{value}: one count for every file"
        );
    }
    for (value, expected) in [
        ("/v1/items/1", Code::Ok),
        ("/v1/items/1", Code::OverLimit),
        ("/v2/items/1", Code::Ok),
    ] {
        let r = envoy.ask("parity", one(&[("path", value)]), 1).await;
        assert_eq!(r.overall_code, code(expected), "{value}");
    }
    let unmatched = envoy.ask("parity", one(&[("path", "/items/1")]), 1).await;
    assert_eq!(
        unmatched.statuses[0].current_limit, None,
        "the fixed parts need their own characters"
    );
    let quotas = || {
        vec![
            descriptor(&[("plan", "monthly")], None),
            descriptor(&[("plan", "bonus")], None),
            descriptor(&[("user", "ann")], None),
        ]
    };
    // Both quotas have budget; then only the monthly one; then none.
    let first = envoy.ask("parity", quotas(), 1).await;
    assert_eq!(first.overall_code, code(Code::Ok));
    let second = envoy.ask("parity", quotas(), 1).await;
    assert_eq!(
        second.overall_code,
        code(Code::Ok),
        "one quota with budget is enough"
    );
    assert_eq!(
        second.statuses[1].code,
        code(Code::OverLimit),
        "the bonus quota is spent"
    );
    let third = envoy.ask("parity", quotas(), 1).await;
    assert_eq!(third.overall_code, code(Code::OverLimit), "every quota is spent");
    assert_eq!(
        third.statuses[2].limit_remaining, 8,
        "the user's limit reports itself uncharged"
    );
    let user = envoy
        .ask("parity", vec![descriptor(&[("user", "ann")], Some(0))], 0)
        .await;
    assert_eq!(
        user.statuses[0].limit_remaining, 8,
        "charged for the two requests admitted only"
    );
    envoy.server.stop().await;
}

/// `--envoy-headers x-ratelimit`: the answers ask Envoy for
/// `X-RateLimit-*`, as envoyproxy/ratelimit does with its header names set
/// to them; `off`: none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answers_headers_are_named_as_configured() {
    for (mode, expected) in [
        (
            tollgate_server::HeaderMode::Legacy,
            vec!["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"],
        ),
        (tollgate_server::HeaderMode::Off, vec![]),
    ] {
        let mut envoy = envoy_with(&example(), Duration::from_secs(1), mode).await;
        let response = envoy.one(&[("user", "dana")], 1).await;
        let mut names: Vec<&str> = response
            .response_headers_to_add
            .iter()
            .map(|h| h.key.as_str())
            .collect();
        names.sort_unstable();
        assert_eq!(names, expected, "{mode:?}");
        if let Some(remaining) = response
            .response_headers_to_add
            .iter()
            .find(|h| h.key == "x-ratelimit-remaining")
        {
            assert_eq!(remaining.value, "4");
        }
        envoy.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_that_opts_in_counts_months_by_the_calendar() {
    let text = "domain: billing\ncalendar: { time_zone: Europe/Berlin }\ndescriptors:\n  - key: tenant\n    \
                rate_limit: { unit: month, requests_per_unit: 2 }\n";
    // 2024-10-31T22:59:59.5Z: half a second before November in Berlin
    // (midnight CET), nowhere near a boundary of Envoy's 30-day months.
    let mut envoy = envoy_serving(text, Duration::from_millis(2_415_599_500)).await;
    let acme = || vec![descriptor(&[("tenant", "acme")], None)];
    for _ in 0..2 {
        assert_eq!(envoy.ask("billing", acme(), 1).await.overall_code, code(Code::Ok));
    }
    let over = envoy.ask("billing", acme(), 1).await;
    assert_eq!(over.overall_code, code(Code::OverLimit));
    assert_eq!(
        over.statuses[0].duration_until_reset,
        duration(Duration::from_millis(500))
    );
    envoy.clock.advance(Duration::from_millis(500));
    let november = envoy.ask("billing", acme(), 1).await;
    assert_eq!(november.overall_code, code(Code::Ok));
    assert_eq!(november.statuses[0].limit_remaining, 1);
    // To 1 December, midnight CET: November's 30 days.
    assert_eq!(
        november.statuses[0].duration_until_reset,
        duration(Duration::from_secs(30 * 86_400))
    );
    envoy.server.stop().await;
}
