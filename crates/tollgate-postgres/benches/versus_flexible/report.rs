//! What the benchmark prints: its settings, each run as it ends, then the
//! medians and the ratios beside the targets.

use tollgate_test_support::bench::median;

use crate::contenders::{Bench, Contender};
use crate::run::Run;

/// The targets of issue 65: tollgate's decisions per second at least this
/// many times rate-limiter-flexible's, with many connections.
const THROUGHPUT_TARGET: f64 = 2.0;
/// … and at most this share of its PostgreSQL CPU per decision.
const CPU_TARGET: f64 = 0.5;
/// With few connections, tollgate's p99 at most this many times Redis's.
const P99_TARGET: f64 = 2.0;

/// Every run, by its number of connections and contender, in round order.
#[derive(Default)]
pub(crate) struct Results {
    runs: Vec<(usize, Contender, Run)>,
}

/// The settings and the versions.
pub(crate) fn header(bench: &Bench, server: &str, synchronous_commit: &str, node: &str) {
    let s = &bench.settings;
    println!(
        "PostgreSQL {server} (synchronous_commit = {synchronous_commit} by default: what \
         rate-limiter-flexible's connections commit with), Node.js {node}, rate-limiter-flexible and \
         pg as pinned in benches/versus_flexible/flexible/package-lock.json"
    );
    println!(
        "fixed window of {} per {} s on {} keys; {} rounds of {} ms warm-up + {} s measured; calls in \
         flight = connections = {} and {}",
        crate::LIMIT,
        crate::WINDOW.as_secs(),
        s.keys,
        s.rounds,
        s.warm_up.as_millis(),
        s.seconds,
        s.connections[0],
        s.connections[1]
    );
    println!(
        "PostgreSQL CPU: every process whose command is `postgres` (/proc), other databases' backends \
         included; client CPU: the load client, on the same cores"
    );
}

/// One line per run as it ends, on stderr.
pub(crate) fn progress(round: usize, connections: usize, contender: Contender, run: &Run) {
    eprintln!(
        "round {} | {connections} connections | {:<52} | {:>8.0}/s | p50 {:>7.2} ms | p99 {:>7.2} ms | \
         postgres {:>6.1} µs (bench database's backends {:>6.1}) | client {:>6.1} µs | not admitted {}",
        round + 1,
        contender.name(),
        run.per_second,
        run.p50_us / 1e3,
        run.p99_us / 1e3,
        run.cpu.postgres_us,
        run.cpu.own_backends_us,
        run.cpu.client_us,
        run.not_admitted
    );
}

impl Results {
    pub(crate) fn add(&mut self, connections: usize, contender: Contender, run: Run) {
        self.runs.push((connections, contender, run));
    }

    /// The runs of `contender` with `connections`, in round order.
    fn of(&self, connections: usize, contender: Contender) -> Vec<Run> {
        self.runs
            .iter()
            .filter(|(c, who, _)| *c == connections && *who == contender)
            .map(|(_, _, run)| *run)
            .collect()
    }

    /// The medians of every contender with `connections`, then the ratios.
    pub(crate) fn print(&self, connections: usize, contenders: &[Contender]) {
        println!();
        println!("### {connections} connections, {connections} calls in flight (medians)");
        println!();
        println!(
            "| contender | decisions/s | p50 ms | p99 ms | PostgreSQL CPU µs/decision | of which bench \
             database backends | client CPU µs/decision | not admitted |"
        );
        println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for &contender in contenders {
            let runs = self.of(connections, contender);
            let m = |f: fn(&Run) -> f64| median(runs.iter().map(f));
            println!(
                "| {} | {:.0} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {} |",
                contender.name(),
                m(|r| r.per_second),
                m(|r| r.p50_us) / 1e3,
                m(|r| r.p99_us) / 1e3,
                m(|r| r.cpu.postgres_us),
                m(|r| r.cpu.own_backends_us),
                m(|r| r.cpu.client_us),
                runs.iter().map(|r| r.not_admitted).sum::<u64>()
            );
        }
        println!();
        self.print_ratios(connections, contenders);
    }

    /// Each tollgate PostgreSQL setting against rate-limiter-flexible (and
    /// against Redis where it ran): medians of each round's ratio.
    fn print_ratios(&self, connections: usize, contenders: &[Contender]) {
        let flexible = self.of(connections, Contender::Flexible);
        let redis = contenders
            .contains(&Contender::Redis)
            .then(|| self.of(connections, Contender::Redis));
        for contender in [Contender::Tollgate, Contender::TollgateUnlogged] {
            let ours = self.of(connections, contender);
            let throughput = ratio(&ours, &flexible, |r| r.per_second);
            let cpu = ratio(&ours, &flexible, |r| r.cpu.postgres_us);
            // The throughput and CPU targets are the many connections'; the
            // few connections' comparison (the one with Redis) has its p99's.
            let (throughput_target, cpu_target) = match redis {
                Some(_) => (String::new(), String::new()),
                None => (
                    format!(
                        " (target ≥ {THROUGHPUT_TARGET}×: {})",
                        verdict(throughput.1 >= THROUGHPUT_TARGET)
                    ),
                    format!(" (target ≤ {CPU_TARGET}×: {})", verdict(cpu.1 <= CPU_TARGET)),
                ),
            };
            println!(
                "- {}: {} decisions/s of rate-limiter-flexible's{throughput_target}, {} its PostgreSQL CPU \
                 per decision{cpu_target}",
                contender.name(),
                throughput.0,
                cpu.0,
            );
            if let Some(redis) = &redis {
                let p99 = ratio(&ours, redis, |r| r.p99_us);
                println!(
                    "  p99 {} Redis's (target ≤ {P99_TARGET}×: {})",
                    p99.0,
                    verdict(p99.1 <= P99_TARGET)
                );
            }
        }
    }
}

/// The median of each round's ratio of `figure`, `ours` over `theirs`:
/// as text with every round's, and the median alone.
fn ratio(ours: &[Run], theirs: &[Run], figure: fn(&Run) -> f64) -> (String, f64) {
    let each: Vec<f64> = ours
        .iter()
        .zip(theirs)
        .map(|(o, t)| figure(o) / figure(t))
        .collect();
    let m = median(each.iter().copied());
    let rounds: Vec<String> = each.iter().map(|r| format!("{r:.2}")).collect();
    (format!("{m:.2}× (rounds {})", rounds.join(", ")), m)
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "missed"
    }
}
