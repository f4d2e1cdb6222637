//! Two `tollgate serve` processes on one Redis behind a bad network (a
//! `FaultProxy` between them and Redis), answering `POST /v1/decide` from
//! keep-alive clients on two resources at once, one with leases, under a
//! policy file that fails closed or falls back (the fail policy is the
//! file's). The parent puts a fault in force while they serve, heals it,
//! and checks what SEMANTICS.md promises:
//!
//! - no key is admitted beyond its limit by the store, counting every
//!   request answered 503 (no decision) or by the fallback as charged;
//! - each process's fallback admits at most its own limit;
//! - each client's p99 answer time stays within the backend's timeout
//!   (200 ms, the default) plus one scheduling quantum;
//! - with a fallback, the first request of the fault is answered by it
//!   within the timeout plus a quantum, and then at once (the breaker);
//! - after the heal, the store decides again within a second;
//! - across 100 partitions, no process keeps descriptors, memory or
//!   connections.
//!
//! `TOLLGATE_FLEET_REPEAT=5` runs each scenario five times.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate_test_support::fault_proxy::Faults;
use tollgate_test_support::redis::behind_proxies::{BehindProxies, Kind};
use tollgate_test_support::redis::cluster::Cluster;
use tollgate_test_support::redis::free_port;
use tollgate_test_support::redis::sentinel::MASTER;

use crate::support::Serve;

const SERVERS: usize = 2;
const LIMIT: u64 = 300;
const FALLBACK_LIMIT: u64 = 40;
/// `tollgate serve`'s Redis timeout: the backend's default.
const TIMEOUT: Duration = tollgate_redis::DEFAULT_TIMEOUT;
/// Slack past the timeout: scheduling of the processes, the clients and
/// the proxy's threads on a loaded 2-core machine.
const QUANTUM: Duration = Duration::from_millis(100);
const PHASES: [&str; 3] = ["before", "during", "after"];
const RESOURCES: [&str; 2] = ["plain", "leased"];

/// The fail policy of a scenario's file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FailPolicy {
    Closed,
    Fallback,
}

/// The file: with the deny cache off, so that every request reaches the
/// store through the faults (a denied key would otherwise be answered
/// locally until its window ends, a day from now).
fn policies(store: &str, fail: FailPolicy) -> String {
    let fallback = match fail {
        FailPolicy::Closed => String::new(),
        FailPolicy::Fallback => format!("  fallback: {{ limit: {FALLBACK_LIMIT}, window: 1d }}\n"),
    };
    format!(
        "tollgate:
{store}
  strategy: fixed_window
  deny_cache: false
{fallback}  default: {{ limit: {LIMIT}, window: 1d }}
  resources:
    plain: {{ limit: {LIMIT}, window: 1d }}
    leased: {{ limit: {LIMIT}, window: 1d, lease: {{ max_units: 10, max_age: 1s }} }}
"
    )
}

/// The policy file's lines naming the store `redis` (through its
/// proxies).
fn store(redis: &BehindProxies) -> String {
    match redis {
        BehindProxies::Standalone { proxy, .. } => format!("  redis_url: {}", proxy.redis_url()),
        BehindProxies::Sentinel { setup, .. } => {
            format!(
                "  redis_sentinel: {{ master: {MASTER}, urls: [\"{}\"] }}",
                setup.url()
            )
        }
        BehindProxies::Cluster { proxies, .. } => {
            let seeds: Vec<String> = Cluster::proxy_urls(proxies)
                .iter()
                .map(|u| format!("\"{u}\""))
                .collect();
            format!("  redis_cluster: [{}]", seeds.join(", "))
        }
    }
}

/// A keep-alive HTTP/1.1 client of one server.
struct Client {
    port: u16,
    stream: Option<BufReader<TcpStream>>,
}

/// What one `POST /v1/decide` was answered.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Answer {
    /// Decided by the store: admitted or not.
    Store(bool),
    /// Decided by the fallback: admitted or not.
    Fallback(bool),
    /// 503: no decision (possibly charged).
    Failed,
}

impl Client {
    fn new(port: u16) -> Self {
        Self { port, stream: None }
    }

    fn decide(&mut self, resource: &str, key: &str, cost: u64) -> (Answer, u64) {
        let body = format!(r#"{{"resource": "{resource}", "key": "{key}", "cost": {cost}}}"#);
        let request = format!(
            "POST /v1/decide HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        for _ in 0..2 {
            if self.stream.is_none() {
                let stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                stream.set_nodelay(true).unwrap();
                self.stream = Some(BufReader::new(stream));
            }
            let stream = self.stream.as_mut().unwrap();
            if stream.get_mut().write_all(request.as_bytes()).is_err() {
                self.stream = None;
                continue;
            }
            match read_response(stream) {
                Some((status, body)) => return parse(status, &body),
                // The server closed an idle connection: once more on a new
                // one (the request was never read).
                None => self.stream = None,
            }
        }
        panic!("the server on port {} did not answer", self.port);
    }
}

fn read_response(stream: &mut BufReader<TcpStream>) -> Option<(u16, String)> {
    let mut line = String::new();
    if stream.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status: u16 = line.split(' ').nth(1)?.parse().ok()?;
    let mut length = 0;
    loop {
        line.clear();
        stream.read_line(&mut line).ok()?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; length];
    stream.read_exact(&mut body).ok()?;
    Some((status, String::from_utf8(body).ok()?))
}

fn parse(status: u16, body: &str) -> (Answer, u64) {
    match status {
        503 => (Answer::Failed, 0),
        200 => {
            let allowed = body.contains(r#""allowed":true"#);
            let remaining = body
                .split(r#""remaining":"#)
                .nth(1)
                .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok())
                .unwrap();
            if body.contains(r#""fallback":true"#) {
                (Answer::Fallback(allowed), remaining)
            } else {
                (Answer::Store(allowed), remaining)
            }
        }
        other => panic!("answered {other}: {body}"),
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    /// Admitted by the store.
    admitted: u64,
    /// Admitted by the fallback.
    fallback: u64,
    /// Decided by the fallback, admitted or not: the store failed.
    fell_back: u64,
    /// Answered 503: no decision.
    failed: u64,
}

#[derive(Default)]
struct Record {
    counts: HashMap<(usize, &'static str, &'static str), Counts>,
    latencies_us: Vec<u32>,
    fault_at: Option<Instant>,
    heal_at: Option<Instant>,
    first_fallback: HashMap<usize, Duration>,
    fallback_during_us: Vec<u32>,
    recovered: HashMap<(usize, &'static str), Duration>,
}

/// Two servers, a Redis, the proxy between them and their clients.
struct Fleet {
    topology: BehindProxies,
    servers: Vec<(Serve, u16)>,
    phase: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    record: Arc<Mutex<Record>>,
    clients: Vec<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Fleet {
    fn start(kind: Kind, fail: FailPolicy) -> Self {
        let topology = BehindProxies::start(kind);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("policies.yaml");
        std::fs::write(&file, policies(&store(&topology), fail)).unwrap();
        let servers: Vec<(Serve, u16)> = (0..SERVERS).map(|_| start_server(&file)).collect();
        let mut fleet = Self {
            topology,
            servers,
            phase: Arc::new(AtomicUsize::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            record: Arc::new(Mutex::new(Record::default())),
            clients: Vec::new(),
            _dir: dir,
        };
        // Warmed up: every resource decided once through the proxy.
        for (_, port) in &fleet.servers {
            for resource in RESOURCES {
                assert!(matches!(
                    Client::new(*port).decide(resource, "warm-up", 0).0,
                    Answer::Store(_)
                ));
            }
        }
        for server in 0..SERVERS {
            for resource in RESOURCES {
                fleet
                    .clients
                    .push(client(server, fleet.servers[server].1, resource, &fleet));
            }
        }
        fleet
    }

    fn fault(&self, faults: Faults) {
        self.topology.set(faults);
        self.record.lock().unwrap().fault_at = Some(Instant::now());
        self.phase.store(1, Ordering::Relaxed);
    }

    fn heal(&self) {
        self.topology.heal();
        self.record.lock().unwrap().heal_at = Some(Instant::now());
        self.phase.store(2, Ordering::Relaxed);
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for client in self.clients.drain(..) {
            client.join().unwrap();
        }
    }

    /// Each server's open descriptors and resident memory (KiB).
    fn usage(&self) -> Vec<(usize, u64)> {
        self.servers
            .iter()
            .map(|(serve, _)| {
                let pid = serve.pid();
                let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count);
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let rss = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                    .unwrap_or(0);
                (fds, rss)
            })
            .collect()
    }
}

fn start_server(file: &Path) -> (Serve, u16) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let serve = Serve::start(&["--config", file.to_str().unwrap(), "--listen", &listen]);
    serve.wait_for_log("serving HTTP");
    (serve, port)
}

/// A client deciding `resource` on `server` without pause until told to
/// stop, recording every answer.
fn client(server: usize, port: u16, resource: &'static str, fleet: &Fleet) -> std::thread::JoinHandle<()> {
    let (phase, stop, record) = (fleet.phase.clone(), fleet.stop.clone(), fleet.record.clone());
    std::thread::spawn(move || {
        let mut client = Client::new(port);
        while !stop.load(Ordering::Relaxed) {
            let at = PHASES[phase.load(Ordering::Relaxed)];
            let started = Instant::now();
            let (answer, _) = client.decide(resource, at, 1);
            let now = Instant::now();
            let took = now - started;
            let mut record = record.lock().unwrap();
            record
                .latencies_us
                .push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
            let counts = record.counts.entry((server, resource, at)).or_default();
            match answer {
                Answer::Store(allowed) => counts.admitted += u64::from(allowed),
                Answer::Fallback(allowed) => {
                    counts.fallback += u64::from(allowed);
                    counts.fell_back += 1;
                }
                Answer::Failed => counts.failed += 1,
            }
            let after_fault = record.fault_at.is_some_and(|fault| started >= fault);
            if resource == "plain" && at == "during" {
                record
                    .fallback_during_us
                    .push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
                if after_fault && matches!(answer, Answer::Fallback(_)) {
                    record.first_fallback.entry(server).or_insert(took);
                }
            }
            if let (Answer::Store(_), Some(heal)) = (answer, record.heal_at) {
                if started >= heal {
                    record.recovered.entry((server, resource)).or_insert(now - heal);
                }
            }
            drop(record);
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

fn percentile(values: &mut [u32], p: usize) -> Duration {
    values.sort_unstable();
    Duration::from_micros(u64::from(values[(values.len() * p / 100).min(values.len() - 1)]))
}

/// The bounds every scenario checks.
fn check_bounds(fleet: &Fleet, scenario: &str) {
    // A failover forgets what the replica had not received: one more
    // window's budget at most (docs/redis.md, "Failover and restarts").
    let failovers = fleet.topology.failovers();
    let record = fleet.record.lock().unwrap();
    for resource in RESOURCES {
        for phase in PHASES {
            let mut total = Counts::default();
            for server in 0..SERVERS {
                let counts = record
                    .counts
                    .get(&(server, resource, phase))
                    .copied()
                    .unwrap_or_default();
                assert!(
                    counts.fallback <= FALLBACK_LIMIT,
                    "{scenario}: {resource} {phase}: server {server}'s fallback admitted {}",
                    counts.fallback
                );
                total.admitted += counts.admitted;
                total.failed += counts.failed + counts.fell_back;
            }
            assert!(
                total.admitted <= LIMIT * (1 + failovers),
                "{scenario}: {resource} {phase}: {} admitted by the store over a limit of {LIMIT} \
                 ({failovers} failovers)",
                total.admitted
            );
            if resource == "plain" {
                // What the store holds, read by a peek once healed.
                let (answer, remaining) = Client::new(fleet.servers[0].1).decide(resource, phase, 0);
                assert!(
                    matches!(answer, Answer::Store(_)),
                    "{scenario}: the peek: {answer:?}"
                );
                let held = LIMIT - remaining;
                assert!(
                    (failovers > 0 || held >= total.admitted) && held <= total.admitted + total.failed,
                    "{scenario}: {resource} {phase}: the store holds {held}, {} admitted, {} failed",
                    total.admitted,
                    total.failed
                );
            }
        }
    }
    let mut latencies = record.latencies_us.clone();
    let p99 = percentile(&mut latencies, 99);
    assert!(
        p99 <= TIMEOUT + QUANTUM,
        "{scenario}: the clients' p99 is {p99:?} ({} requests)",
        latencies.len()
    );
    // A circuit breaker's probe may take two timeouts (its PING, then its
    // decision), nothing longer.
    let max = Duration::from_micros(u64::from(*latencies.last().unwrap()));
    assert!(max <= 2 * TIMEOUT + QUANTUM, "{scenario}: a request took {max:?}");
    eprintln!(
        "{scenario}: {} requests, p99 {p99:?}, max {max:?}, recovered {:?}, first fallback answers {:?}",
        latencies.len(),
        record.recovered.values().max(),
        record.first_fallback,
    );
}

fn check_recovery(fleet: &Fleet, scenario: &str) {
    let record = fleet.record.lock().unwrap();
    for server in 0..SERVERS {
        for resource in RESOURCES {
            let recovered = record.recovered.get(&(server, resource)).unwrap_or_else(|| {
                panic!("{scenario}: server {server} never decided {resource} on the store again")
            });
            assert!(
                *recovered <= Duration::from_secs(1),
                "{scenario}: server {server} decided {resource} on the store again {recovered:?} after the heal"
            );
        }
    }
}

fn repetitions() -> usize {
    std::env::var("TOLLGATE_FLEET_REPEAT").map_or(1, |n| n.parse().unwrap())
}

/// A healthy second, `faults` for `hold`, two healed seconds; the bounds
/// checked. Returns the fleet, stopped, for the scenario's own checks.
fn scenario(name: &str, kind: Kind, fail: FailPolicy, faults: Faults, hold: Duration) -> Fleet {
    scenario_with(name, kind, fail, faults, hold, |_| {})
}

/// As [`scenario`], with `midway` done one second into the fault.
fn scenario_with(
    name: &str,
    kind: Kind,
    fail: FailPolicy,
    faults: Faults,
    hold: Duration,
    midway: impl FnOnce(&BehindProxies),
) -> Fleet {
    let mut fleet = Fleet::start(kind, fail);
    std::thread::sleep(Duration::from_secs(1));
    fleet.fault(faults);
    let second = Duration::from_secs(1).min(hold);
    std::thread::sleep(second);
    midway(&fleet.topology);
    std::thread::sleep(hold - second);
    fleet.heal();
    std::thread::sleep(Duration::from_secs(2));
    fleet.stop();
    check_bounds(&fleet, name);
    fleet
}

#[test]
fn two_servers_under_latency_with_jitter_hold_their_bounds() {
    for _ in 0..repetitions() {
        let faults = Faults {
            latency: Duration::from_millis(50),
            jitter: Duration::from_millis(20),
            ..Faults::default()
        };
        let fleet = scenario(
            "serve-latency",
            Kind::Standalone,
            FailPolicy::Closed,
            faults,
            Duration::from_secs(3),
        );
        let record = fleet.record.lock().unwrap();
        let failed: u64 = record.counts.values().map(|c| c.failed).sum();
        let requests = record.latencies_us.len() as u64;
        eprintln!("serve-latency: {failed} of {requests} requests answered 503");
    }
}

#[test]
fn two_servers_losing_five_percent_of_replies_never_over_admit() {
    for _ in 0..repetitions() {
        let faults = Faults {
            reply_loss_ppm: 50_000,
            ..Faults::default()
        };
        let fleet = scenario(
            "serve-loss",
            Kind::Standalone,
            FailPolicy::Closed,
            faults,
            Duration::from_secs(3),
        );
        check_recovery(&fleet, "serve-loss");
    }
}

#[test]
fn two_servers_partitioned_for_ten_seconds_fall_back_and_decide_again_after_the_heal() {
    for _ in 0..repetitions() {
        let faults = Faults {
            stall: true,
            black_hole: true,
            ..Faults::default()
        };
        let fleet = scenario(
            "serve-partition",
            Kind::Standalone,
            FailPolicy::Fallback,
            faults,
            Duration::from_secs(10),
        );
        check_recovery(&fleet, "serve-partition");
        let record = fleet.record.lock().unwrap();
        for server in 0..SERVERS {
            let first = record.first_fallback.get(&server).copied();
            let first = first.unwrap_or_else(|| panic!("server {server}: the fallback never decided"));
            assert!(
                first <= TIMEOUT + QUANTUM,
                "server {server}: the fallback answered the first request of the partition after {first:?}"
            );
        }
        let mut during = record.fallback_during_us.clone();
        let median = percentile(&mut during, 50);
        assert!(
            median < QUANTUM,
            "the fallback's median answer took {median:?}: no breaker"
        );
        for ((server, resource, _), counts) in &record.counts {
            assert_eq!(
                counts.failed, 0,
                "server {server}: a {resource} request under a fallback got no decision"
            );
        }
    }
}

#[test]
fn two_servers_whose_replies_are_lost_for_a_while_never_over_admit() {
    for _ in 0..repetitions() {
        let faults = Faults {
            replies_lost: true,
            ..Faults::default()
        };
        let fleet = scenario(
            "serve-one-way",
            Kind::Standalone,
            FailPolicy::Fallback,
            faults,
            Duration::from_secs(2),
        );
        check_recovery(&fleet, "serve-one-way");
    }
}

#[test]
fn two_servers_leak_nothing_across_a_hundred_partitions() {
    let mut fleet = Fleet::start(Kind::Standalone, FailPolicy::Closed);
    std::thread::sleep(Duration::from_millis(500));
    let before = fleet.usage();
    for round in 0..100 {
        fleet.topology.proxies()[0].set(if round % 2 == 0 {
            Faults {
                stall: true,
                black_hole: true,
                ..Faults::default()
            }
        } else {
            Faults {
                replies_lost: true,
                ..Faults::default()
            }
        });
        std::thread::sleep(Duration::from_millis(150));
        fleet.topology.proxies()[0].heal();
        std::thread::sleep(Duration::from_millis(150));
    }
    std::thread::sleep(Duration::from_secs(1));
    let after = fleet.usage();
    let proxy = fleet.topology.proxies()[0];
    let (open, accepted) = (proxy.open(), proxy.accepted());
    fleet.stop();
    check_bounds(&fleet, "serve-leaks");
    for (i, ((fds_before, rss_before), (fds_after, rss_after))) in before.iter().zip(&after).enumerate() {
        assert!(
            fds_after <= &(fds_before + 2),
            "server {i}: {fds_before} descriptors before 100 partitions, {fds_after} after"
        );
        assert!(
            *rss_after <= rss_before + 8 * 1024,
            "server {i}: {rss_before} KiB before 100 partitions, {rss_after} KiB after"
        );
    }
    assert!(
        open <= 2 * SERVERS as u64,
        "{open} connections open through the proxy after the partitions ({accepted} accepted)"
    );
    eprintln!(
        "serve-leaks: {accepted} connections accepted, {open} open at the end, usage {before:?} → {after:?}"
    );
}

#[test]
fn two_servers_with_a_stalled_store_fall_back_within_the_timeout() {
    for _ in 0..repetitions() {
        let faults = Faults {
            stall: true,
            ..Faults::default()
        };
        let fleet = scenario(
            "serve-stall",
            Kind::Standalone,
            FailPolicy::Fallback,
            faults,
            Duration::from_secs(2),
        );
        check_recovery(&fleet, "serve-stall");
    }
}

/// Latency, 5% of replies lost, a 10 s partition of the primary (on
/// Sentinel a failover during it, in a cluster a takeover) and a 2 s stall
/// on `kind`, each checked.
fn every_fault_on(kind: Kind, name: &str) {
    for _ in 0..repetitions() {
        let latency = Faults {
            latency: Duration::from_millis(50),
            jitter: Duration::from_millis(20),
            ..Faults::default()
        };
        scenario(
            &format!("{name}-latency"),
            kind,
            FailPolicy::Closed,
            latency,
            Duration::from_secs(3),
        );
        let loss = Faults {
            reply_loss_ppm: 50_000,
            ..Faults::default()
        };
        let fleet = scenario(
            &format!("{name}-loss"),
            kind,
            FailPolicy::Closed,
            loss,
            Duration::from_secs(3),
        );
        check_recovery(&fleet, &format!("{name}-loss"));
        let partition = Faults {
            stall: true,
            black_hole: true,
            ..Faults::default()
        };
        // On Sentinel the sentinel fails over during the partition; in a
        // cluster a replica takes over a second in.
        let fleet = scenario_with(
            &format!("{name}-partition"),
            kind,
            FailPolicy::Fallback,
            partition,
            Duration::from_secs(10),
            BehindProxies::take_over,
        );
        check_recovery(&fleet, &format!("{name}-partition"));
        eprintln!("{name}-partition: failovers: {}", fleet.topology.failovers());
        let stall = Faults {
            stall: true,
            ..Faults::default()
        };
        let fleet = scenario(
            &format!("{name}-stall"),
            kind,
            FailPolicy::Fallback,
            stall,
            Duration::from_secs(2),
        );
        check_recovery(&fleet, &format!("{name}-stall"));
    }
}

#[test]
fn two_servers_on_sentinel_hold_their_bounds_through_every_fault_and_a_failover() {
    every_fault_on(Kind::Sentinel, "serve-sentinel");
}

#[test]
fn two_servers_on_a_cluster_hold_their_bounds_through_every_fault() {
    every_fault_on(Kind::Cluster, "serve-cluster");
}
