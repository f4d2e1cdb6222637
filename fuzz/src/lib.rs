//! What several fuzz targets share: a `tollgate serve` configured as an
//! operator would configure it, answered in-process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate_server::__in_process::InProcess;
use tollgate_server::Server;

/// The policy file the service runs with: every strategy, a compound
/// policy, shadow mode, `charge: always`, a calendar quota, key lists, a
/// deny cache and leases.
const POLICIES: &str = r#"
tollgate:
  strategy: sliding_window
  deny_cache: true
  exempt: [10.0.0.0/8, health-checker]
  deny: ["192.0.2.66"]
  default: { limit: 100, window: 1m }
  resources:
    login: { limit: 5, window: 1m, deny: ["198.51.100.0/24"] }
    search: { limit: 50, window: 1s, strategy: token_bucket, deny_cache: false }
    export: { limit: 10, window: 1h, strategy: fixed_window, shadow: true }
    tokens: { limit: 100000, window: 1h, strategy: fixed_window, charge: always }
    leaky: { limit: 20, window: 10s, strategy: leaky_bucket }
    monthly:
      limit: 1000
      strategy: fixed_window
      calendar: { period: month, time_zone: Europe/Berlin, anchor: "2026-01-15T09:00:00" }
    api:
      limits:
        - { limit: 10, window: 1s, strategy: token_bucket }
        - { limit: 1000, window: 1h }
"#;

/// The Envoy rate-limit configuration it serves beside the policy file.
const ENVOY: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: remote_address
    value: 50.0.0.5
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 5 }
  - key: path
    value: /shadow
    rate_limit: { unit: minute, requests_per_unit: 1 }
    shadow_mode: true
  - key: internal
    rate_limit: { unlimited: true }
  - key: plan
    value: monthly
    rate_limit: { unit: month, requests_per_unit: 100 }
  - key: tier
    value: gold
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 2, name: gold_user }
  - key: tier
    value: special
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 10, replaces: [{ name: gold_user }] }
"#;

/// The service and the runtime that answers it, made once per process.
pub struct Service {
    /// A single-threaded runtime: each input is answered to its end.
    pub runtime: tokio::runtime::Runtime,
    /// The routes of both listeners.
    pub routes: InProcess,
    /// The service's clock, moved by the targets.
    pub clock: ManualClock,
    /// The bound service, kept for the process's life (its listeners stay
    /// bound; nothing connects to them).
    _server: Server,
}

/// The service, bound on loopback (nothing connects: every request is a
/// call) with files in a directory of its own.
pub fn service() -> &'static Service {
    static SERVICE: OnceLock<Service> = OnceLock::new();
    SERVICE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tollgate-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for the configuration");
        let write = |name: &str, text: &str| -> PathBuf {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("the configuration written");
            path
        };
        let policies = write("policies.yaml", POLICIES);
        let envoy = write("ratelimit.yaml", ENVOY);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let clock = ManualClock::new(Duration::from_secs(1_800_000_000));
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let server = runtime
            .block_on(
                Server::builder()
                    .config(policies)
                    .config(envoy)
                    .listen(loopback)
                    .clock(clock.clone())
                    .watch_files(false)
                    .reload_on_sighup(false)
                    .bind(),
            )
            .expect("the service starts");
        // Read at start and never again (no watching, no SIGHUP).
        let _ = std::fs::remove_dir_all(&dir);
        let routes = InProcess::new(&server);
        Service {
            runtime,
            routes,
            clock,
            _server: server,
        }
    })
}
