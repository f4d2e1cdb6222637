//! The server's time per decision, by strategy, beside a minimal GCRA
//! script measured the same way in the same run.
//!
//! ```sh
//! nice -n 10 cargo bench -p tollgate-redis --bench server_cost
//! ```
//!
//! Redis runs scripts and functions on one core, so the server time of a
//! decision bounds what one server decides per second. The benchmark starts
//! its own `redis-server` (no persistence) and reads that time from the
//! server itself: `usec_per_call` of `FCALL` or `EVALSHA` in
//! `INFO commandstats`, reset with `CONFIG RESETSTAT` before each
//! measurement. It is little affected by the client's speed, though not
//! immune to other load on the machine.
//!
//! Each row is measured twice, each time right after the minimal script
//! (`GET`, `TIME`, `SET` with `PX`; see [`MINIMAL_GCRA`]) is measured the
//! same way:
//!
//! - **function**: the backend as it runs on Redis 7, calling its function
//!   library (`FCALL`), against the minimal script loaded as a function;
//! - **script**: the backend's fallback for servers without functions
//!   (`EVALSHA`; forced here by an ACL user refused `FCALL` and `FUNCTION`),
//!   against the minimal script run with `EVALSHA`.
//!
//! Every decision is admitted (a million per second, or per hour for the
//! compound policy's sliding window), so both sides take the path that
//! reads, computes and writes, on keys cycling through [`KEYS`] names.
//! `TOLLGATE_BENCH_CALLS` sets the decisions per measurement (default
//! 20,000).

use std::time::Duration;

use tokio::runtime::Runtime;
use tollgate::{Limit, Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

/// The minimal GCRA decision: one key holding the theoretical arrival time,
/// read with `GET`, the server's clock read with `TIME`, the new time
/// written with `SET … PX`. ARGV: the limit, the emission interval in
/// microseconds, the cost. Returns allowed, remaining, reset and retry
/// after in microseconds, as the backend's scripts do.
const MINIMAL_GCRA: &str = r#"
local key = KEYS[1]
local limit, interval, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', key))
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
if not tat or tat < now then
  tat = now
end
local burst = limit * interval
local new_tat = tat + cost * interval
if new_tat - now > burst then
  return { 0, 0, tat - now, new_tat - now - burst }
end
redis.call('SET', key, string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000))
return { 1, math.floor((burst - (new_tat - now)) / interval), new_tat - now, -1 }
"#;

/// The name of the minimal script as a library function.
const MINIMAL_FUNCTION: &str = "bench_minimal_gcra";

/// Keys the decisions cycle through.
const KEYS: usize = 100;
/// A limit every decision passes.
const LIMIT: u64 = 1_000_000;
const WINDOW: Duration = Duration::from_secs(1);

/// How a measurement reaches the server.
#[derive(Clone, Copy, PartialEq)]
enum Path {
    Function,
    Script,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Function => "function",
            Path::Script => "script",
        }
    }

    /// The command whose `usec_per_call` this path measures.
    fn command(self) -> &'static str {
        match self {
            Path::Function => "fcall",
            Path::Script => "evalsha",
        }
    }
}

/// Every strategy, then a compound policy of a token bucket (a million a
/// second) and a sliding window (a million an hour).
fn policies() -> Vec<(String, Policy)> {
    let mut policies: Vec<(String, Policy)> = Strategy::ALL
        .iter()
        .map(|&s| {
            (
                s.to_string(),
                Policy::new(s, LIMIT, WINDOW).expect("valid policy"),
            )
        })
        .collect();
    let compound = Policy::compound([
        Limit::new(Strategy::TokenBucket, LIMIT, WINDOW).expect("valid limit"),
        Limit::new(Strategy::SlidingWindow, LIMIT, Duration::from_secs(3_600)).expect("valid limit"),
    ])
    .expect("valid policy");
    policies.push(("compound (token 1s + sliding 1h)".to_owned(), compound));
    policies
}

/// `usec_per_call` of `command` since the last `CONFIG RESETSTAT`, and
/// its number of calls.
fn usec_per_call(server: &RedisServer, command: &str) -> (f64, u64) {
    let stats = server.cli(&["INFO", "commandstats"]);
    let line = stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
        .unwrap_or_else(|| panic!("no {command} calls in INFO commandstats:\n{stats}"));
    let field = |name: &str| {
        line.split(',')
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    (field("usec_per_call"), field("calls") as u64)
}

/// Runs `calls` decisions with `decide(i)` after `CONFIG RESETSTAT` and
/// returns the server's µs per call of `path`'s command; checks that every
/// decision was that command.
fn measure<F: std::future::Future<Output = ()>>(
    rt: &Runtime,
    server: &RedisServer,
    path: Path,
    calls: usize,
    decide: impl Fn(usize) -> F,
) -> f64 {
    // Warm up: loads the function or script, fills the keys.
    rt.block_on(async {
        for i in 0..KEYS {
            decide(i).await;
        }
    });
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");
    rt.block_on(async {
        for i in 0..calls {
            decide(i).await;
        }
    });
    let (usec, counted) = usec_per_call(server, path.command());
    assert_eq!(counted, calls as u64, "every decision was one {}", path.command());
    usec
}

fn main() {
    let calls: usize = std::env::var("TOLLGATE_BENCH_CALLS")
        .ok()
        .map(|v| v.parse().expect("TOLLGATE_BENCH_CALLS: a number of calls"))
        .unwrap_or(20_000);
    let server = RedisServer::start();
    let info = server.cli(&["INFO", "server"]);
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let connect = |url: &str| {
        rt.block_on(
            RedisBackend::builder()
                .timeout(Duration::from_secs(5))
                .connect(url),
        )
        .expect("connect to the benchmark server")
    };
    let with_functions = connect(&server.url());
    // A user refused functions: the backend falls back to scripts.
    let with_scripts = connect(&server.url_without_functions());

    // The minimal script, as a script and as a function.
    let minimal_sha = server.cli(&["SCRIPT", "LOAD", MINIMAL_GCRA]);
    let library = format!(
        "#!lua name=bench_minimal\nredis.register_function('{MINIMAL_FUNCTION}', function(KEYS, ARGV)\n{MINIMAL_GCRA}\nend)"
    );
    assert_eq!(
        server.cli(&["FUNCTION", "LOAD", "REPLACE", &library]),
        "bench_minimal"
    );
    let client = redis::Client::open(server.url()).unwrap();
    let raw = rt
        .block_on(client.get_multiplexed_async_connection())
        .expect("connect to the benchmark server");
    let keys: Vec<String> = (0..KEYS).map(|i| format!("key-{i}")).collect();
    let minimal_keys: Vec<String> = (0..KEYS).map(|i| format!("minimal:{i}")).collect();
    let minimal = |path: Path| {
        let (verb, target) = match path {
            Path::Function => ("FCALL", MINIMAL_FUNCTION),
            Path::Script => ("EVALSHA", minimal_sha.as_str()),
        };
        measure(&rt, &server, path, calls, |i| {
            let mut conn = raw.clone();
            let mut cmd = redis::cmd(verb);
            cmd.arg(target).arg(1).arg(&minimal_keys[i % KEYS]);
            cmd.arg(LIMIT).arg(1).arg(1);
            async move {
                let reply: Vec<i64> = cmd.query_async(&mut conn).await.expect("minimal decision");
                assert_eq!(reply[0], 1, "the minimal script admits");
            }
        })
    };

    println!(
        "redis-server {version}; {calls} decisions per measurement; server µs per call (INFO commandstats)"
    );
    println!();
    println!("| policy | path | tollgate µs/call | minimal GCRA µs/call | ratio (target ≤ 1.15×) |");
    println!("| --- | --- | --- | --- | --- |");
    for (name, policy) in policies() {
        for path in [Path::Function, Path::Script] {
            let backend = match path {
                Path::Function => &with_functions,
                Path::Script => &with_scripts,
            };
            let limiter = Limiter::builder()
                .backend(backend.clone())
                .policy(policy)
                .resource("bench")
                .build()
                .expect("valid policy");
            let baseline = minimal(path);
            let usec = measure(&rt, &server, path, calls, |i| {
                let decision = limiter.allow(&keys[i % KEYS]);
                async move {
                    assert!(
                        decision.await.expect("decision").allowed,
                        "every decision is admitted"
                    );
                }
            });
            assert_eq!(
                backend.uses_functions(),
                path == Path::Function,
                "the {} path",
                path.name()
            );
            println!(
                "| {name} | {} | {usec:.2} | {baseline:.2} | {:.2}× |",
                path.name(),
                usec / baseline
            );
        }
    }
}
