//! Compound policies (`limits` in a policy file) through the command:
//! `check` prints a row per limit, and `simulate --config` decides them as
//! the library's pure functions do, writes which limit bound each decision
//! and says per limit how many requests it denied.

use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::{Decision, Limit, Policy, Strategy};

use crate::support::*;

/// A policy file's policies: the default first, then the named resources
/// sorted by name (the order of the summary).
type Targets = Vec<(String, Policy)>;

fn limit(strategy: Strategy, l: u64, window: Duration) -> Limit {
    Limit::new(strategy, l, window).expect("valid limit")
}

/// A policy as a YAML flow map: `{ limit, window, strategy }`, or
/// `{ limits: [...] }` for a compound one.
fn policy_yaml(policy: &Policy) -> String {
    let one = |l: &Limit| {
        format!(
            "{{ limit: {}, window: {}, strategy: {} }}",
            l.limit(),
            humantime::format_duration(l.window()),
            l.strategy()
        )
    };
    match policy.single() {
        Some(l) => one(l),
        None => {
            let limits: Vec<String> = policy.limits().iter().map(one).collect();
            format!("{{ limits: [{}] }}", limits.join(", "))
        }
    }
}

/// The policy file of `targets`, in YAML.
fn file_yaml(targets: &Targets) -> String {
    let mut text = format!(
        "tollgate:\n  default: {}\n  resources:\n",
        policy_yaml(&targets[0].1)
    );
    for (name, policy) in &targets[1..] {
        text.push_str(&format!("    {name:?}: {}\n", policy_yaml(policy)));
    }
    text
}

/// One request of a trace with the resource it names.
struct Request {
    req: Req,
    resource: String,
}

/// `limit` described as the summary describes it.
fn describe(l: &Limit) -> String {
    format!(
        "{}, {} per {}",
        l.strategy(),
        l.limit(),
        humantime::format_duration(l.window())
    )
}

/// The most units admitted for one key within `[t, t + window)`, and the
/// key, by brute force: keys in the order of their first request, ties to
/// the first.
fn peak(requests: &[(&Req, &Decision)], window: Duration) -> (u128, Option<String>) {
    let mut keys: Vec<&str> = Vec::new();
    for (r, _) in requests {
        if !keys.contains(&r.key.as_str()) {
            keys.push(&r.key);
        }
    }
    let mut best = (0, None);
    for key in keys {
        let admitted: Vec<(u64, u64)> = requests
            .iter()
            .filter(|(r, d)| r.key == key && d.allowed && r.cost > 0)
            .map(|(r, _)| (r.nanos, r.cost))
            .collect();
        for &(t, _) in &admitted {
            let end = u128::from(t) + window.as_nanos();
            let units: u128 = admitted
                .iter()
                .filter(|&&(u, _)| u >= t && u128::from(u) < end)
                .map(|&(_, c)| u128::from(c))
                .sum();
            if units > best.0 {
                best = (units, Some(key.to_owned()));
            }
        }
    }
    best
}

/// Replays `requests` (written to `trace`) against the policy file of
/// `targets` and checks the decisions file row by row against the pure
/// functions, each target's requests decided apart, and the summary's rows
/// and per-limit lines against counts from those decisions. Returns the
/// summary.
fn check_replay(dir: &Path, targets: &Targets, trace: &Path, requests: &[Request]) -> String {
    let config = write(dir, "policies.yaml", &file_yaml(targets));
    let out = dir.join("decisions.csv");
    let summary = Tollgate::simulate()
        .trace(trace)
        .config(&config)
        .decisions(&out)
        .run_ok();
    // The reference: each target's requests through its policy alone.
    let target_of: Vec<usize> = requests
        .iter()
        .map(|r| {
            targets
                .iter()
                .skip(1)
                .position(|(name, _)| *name == r.resource)
                .map_or(0, |i| i + 1)
        })
        .collect();
    let mut expected: Vec<Option<Decision>> = vec![None; requests.len()];
    for (t, (_, policy)) in targets.iter().enumerate() {
        let picked: Vec<usize> = (0..requests.len()).filter(|&i| target_of[i] == t).collect();
        let reqs: Vec<Req> = picked.iter().map(|&i| requests[i].req.clone()).collect();
        for (&i, d) in picked.iter().zip(pure_decisions(*policy, &reqs)) {
            expected[i] = Some(d);
        }
    }
    let expected: Vec<Decision> = expected.into_iter().map(Option::unwrap).collect();
    // The limit that bound each decision is a column of its own when a
    // policy is compound, and only then.
    let compound = targets.iter().any(|(_, p)| p.is_compound());
    let rows = read_csv(&out);
    let mut header = DECISIONS_HEADER.to_vec();
    if compound {
        header.push("bound_by");
    }
    assert_eq!(rows[0], header);
    assert_eq!(rows.len() - 1, requests.len());
    for (i, (row, d)) in rows[1..].iter().zip(&expected).enumerate() {
        assert_eq!(row[3..7], columns(d), "row {}", i + 2);
        if compound {
            assert_eq!(row[7], d.bound_by.to_string(), "row {}", i + 2);
        }
    }

    // The summary: one row per target, then a line per limit of a compound one.
    let lines: Vec<&str> = summary.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("policy "))
        .expect("header");
    let mut body = lines[header + 1..].iter();
    for (t, (name, policy)) in targets.iter().enumerate() {
        let decided: Vec<(&Req, &Decision)> = (0..requests.len())
            .filter(|&i| target_of[i] == t)
            .map(|i| (&requests[i].req, &expected[i]))
            .collect();
        let row: Vec<&str> = body.next().expect("a row").split_whitespace().collect();
        let denied = decided.iter().filter(|(_, d)| !d.allowed).count();
        assert_eq!(
            row[..3],
            [
                name.as_str(),
                &(decided.len() - denied).to_string(),
                &denied.to_string()
            ]
        );
        let n = policy.limits().len();
        // Per limit: (requests it denied, decisions it bound).
        let counts: Vec<(usize, usize)> = (0..n)
            .map(|i| {
                let bound: Vec<_> = decided.iter().filter(|(_, d)| d.bound_by == i).collect();
                (bound.iter().filter(|(_, d)| !d.allowed).count(), bound.len())
            })
            .collect();
        let measured = (0..n)
            .rev()
            .max_by_key(|&i| counts[i])
            .expect("at least one limit");
        let (units, key) = peak(&decided, policy.limits()[measured].window());
        assert_eq!(row[4], units.to_string(), "{name}: max_in_window");
        assert_eq!(row[5], key.as_deref().unwrap_or("-"), "{name}: max_key");
        if !policy.is_compound() {
            continue;
        }
        for (i, l) in policy.limits().iter().enumerate() {
            let line = body.next().expect("a line per limit");
            let label = format!("  limits[{i}] {}:", describe(l));
            assert!(line.starts_with(&label), "{line:?} should start with {label:?}");
            let (units, key) = peak(&decided, l.window());
            let mut expected = format!("{} denied, max_in_window {units}", counts[i].0);
            if let Some(key) = key {
                expected.push_str(&format!(" ({key})"));
            }
            assert_eq!(line[label.len()..].trim_start(), expected, "{name} limits[{i}]");
        }
    }
    assert_eq!(body.next(), None, "{summary}");
    summary
}

#[test]
fn a_compound_replay_of_the_sample_equals_the_pure_functions() {
    let dir = tempfile::tempdir().unwrap();
    let trace = sample_with_resources(dir.path());
    let rows = read_csv(&trace);
    let requests: Vec<Request> = sample_requests()
        .into_iter()
        .zip(&rows[1..])
        .map(|((_, req), row)| Request {
            req,
            resource: row[2].clone(),
        })
        .collect();
    let targets: Targets = vec![
        (
            "default".to_owned(),
            Policy::compound([
                limit(Strategy::TokenBucket, 5, Duration::from_secs(1)),
                limit(Strategy::SlidingWindow, 40, Duration::from_secs(60)),
            ])
            .unwrap(),
        ),
        (
            "/api/login".to_owned(),
            Policy::compound([
                limit(Strategy::FixedWindow, 3, Duration::from_secs(5)),
                limit(Strategy::LeakyBucket, 8, Duration::from_secs(60)),
                limit(Strategy::FixedWindow, 12, Duration::from_secs(120)),
            ])
            .unwrap(),
        ),
        (
            "/api/search".to_owned(),
            Policy::new(Strategy::SlidingWindow, 8, Duration::from_secs(2)).unwrap(),
        ),
    ];
    let summary = check_replay(dir.path(), &targets, &trace, &requests);
    // Every limit of the sample's compound policies denies some requests,
    // so the attribution to limits is exercised.
    for line in summary.lines().filter(|l| l.starts_with("  limits[")) {
        let denied = line
            .split(": ")
            .nth(1)
            .unwrap()
            .split(' ')
            .find(|w| !w.is_empty())
            .unwrap();
        assert_ne!(denied, "0", "{line}\n{summary}");
    }
}

/// One step of a random trace: time step, backwards?, key, cost, resource.
type Step = (u64, bool, u8, usize, bool);

proptest! {
    #![proptest_config(binary_cases(8))]

    #[test]
    fn compound_replays_equal_the_pure_functions_on_random_traces(
        limits in proptest::collection::vec(
            (
                proptest::sample::select(Strategy::ALL.to_vec()),
                1..=6u64,
                // Windows that are not whole milliseconds exercise the rounding.
                proptest::sample::select(vec![1_000u64, 1_500, 250_000, 1_000_000, 333, 7_777]),
            ),
            2..=4,
        ),
        default_compound in proptest::bool::ANY,
        steps in proptest::collection::vec(
            (0..u64::MAX, proptest::bool::weighted(0.2), 0..3u8, 0..7usize, proptest::bool::ANY),
            200,
        ),
    ) {
        // Distinct strategies and windows, as a policy requires.
        let mut unique: Vec<Limit> = Vec::new();
        for (strategy, l, window_us) in limits {
            let candidate = limit(strategy, l, Duration::from_micros(window_us));
            if !unique.iter().any(|u| (u.strategy(), u.window()) == (strategy, candidate.window())) {
                unique.push(candidate);
            }
        }
        let compound = Policy::compound(unique.clone()).unwrap();
        let default = if default_compound {
            Policy::compound(unique.iter().rev().copied()).unwrap()
        } else {
            Policy::from(unique[0])
        };
        let targets: Targets = vec![("default".to_owned(), default), ("a".to_owned(), compound)];
        let largest = unique.iter().map(Limit::limit).max().unwrap();
        let longest = unique.iter().map(|l| l.window().as_micros() as u64).max().unwrap();
        check_random(&targets, largest, longest, &steps);
    }
}

/// Writes the requests of `steps` as a trace (costs up to one more than
/// `largest`, time steps up to four times `longest_us`) and checks its
/// replay against `targets`.
fn check_random(targets: &Targets, largest: u64, longest_us: u64, steps: &[Step]) {
    let dir = tempfile::tempdir().unwrap();
    let mut t: u64 = 1_714_564_800_000;
    let mut text = String::from("time,key,cost,resource\n");
    let mut requests = Vec::new();
    for &(step, backwards, key, cost, named) in steps {
        let req = random_request(&mut t, (step, backwards, key, cost), longest_us, largest);
        let resource = if named { "a" } else { "" };
        text.push_str(&format!("{t},{},{},{resource}\n", req.key, req.cost));
        requests.push(Request {
            req,
            resource: resource.to_owned(),
        });
    }
    let trace = write(dir.path(), "trace.csv", &text);
    check_replay(dir.path(), targets, &trace, &requests);
}

#[test]
fn a_replay_without_compound_policies_keeps_the_decisions_columns() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "p.yaml",
        "tollgate:\n  default: { limit: 5, window: 1s }\n  resources:\n    /api/login: { limits: [{ limit: 3, window: 5s }] }\n",
    );
    let out = dir.path().join("d.csv");
    let summary = Tollgate::simulate()
        .trace(sample_with_resources(dir.path()))
        .config(&config)
        .decisions(&out)
        .run_ok();
    // A list of one limit is a policy of one limit.
    assert_eq!(read_csv(&out)[0].len(), 7);
    assert!(!summary.contains("limits["), "{summary}");
}

#[test]
fn check_prints_a_row_per_limit_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        write(
            dir.path(),
            "p.yaml",
            "tollgate:\n  strategy: token_bucket\n  default: { limit: 100, window: 1m }\n  resources:\n    \
             api:\n      limits:\n        - { limit: 10, window: 1s }\n        - { limit: 1000, window: 1h, strategy: sliding_window }\n    \
             \"api v2\": { limits: [{ limit: 5, window: 1s }, { limit: 50, window: 1m }] }\n    \
             login: { limit: 5, window: 1m, strategy: fixed_window }\n",
        ),
        write(
            dir.path(),
            "p.toml",
            "[tollgate]\nstrategy = \"token_bucket\"\ndefault = { limit = 100, window = \"1m\" }\n\n\
             [[tollgate.resources.api.limits]]\nlimit = 10\nwindow = \"1s\"\n\n\
             [[tollgate.resources.api.limits]]\nlimit = 1000\nwindow = \"1h\"\nstrategy = \"sliding_window\"\n\n\
             [tollgate.resources.\"api v2\"]\nlimits = [{ limit = 5, window = \"1s\" }, { limit = 50, window = \"1m\" }]\n\n\
             [tollgate.resources.login]\nlimit = 5\nwindow = \"1m\"\nstrategy = \"fixed_window\"\n",
        ),
        write(
            dir.path(),
            "p.json",
            r#"{"tollgate": {"strategy": "token_bucket", "default": {"limit": 100, "window": "1m"}, "resources": {
  "api": {"limits": [{"limit": 10, "window": "1s"}, {"limit": 1000, "window": "1h", "strategy": "sliding_window"}]},
  "api v2": {"limits": [{"limit": 5, "window": "1s"}, {"limit": 50, "window": "1m"}]},
  "login": {"limit": 5, "window": "1m", "strategy": "fixed_window"}}}}"#,
        ),
    ];
    for file in files {
        assert_eq!(
            Tollgate::check(&file).run_ok(),
            format!(
                "{}: valid, 4 policies of 6 limits; state in memory, fail closed, key prefix \"tollgate\"\n\
                 target            strategy        limit  window\n\
                 default           token_bucket      100  1m\n\
                 api limits[0]     token_bucket       10  1s\n\
                 api limits[1]     sliding_window   1000  1h\n\
                 api v2 limits[0]  token_bucket        5  1s\n\
                 api v2 limits[1]  token_bucket       50  1m\n\
                 login             fixed_window        5  1m\n",
                file.display()
            )
        );
    }
}

#[test]
fn check_names_the_element_of_a_mistake_in_a_list() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "window.yaml",
            "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api:\n      limits:\n        - { limit: 10, window: 1s }\n        - { limit: 1000, window: 1 hour ago }\n",
            "window.yaml:7: tollgate.resources.api.limits[1].window: \"1 hour ago\" is not a duration",
        ),
        (
            "same.toml",
            "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.api]\nlimits = [\n  { limit = 10, window = \"1s\", strategy = \"fixed_window\" },\n  { limit = 20, window = \"1s\", strategy = \"fixed_window\" },\n]\n",
            "same.toml:6: tollgate.resources.api.limits[1]: has the same strategy and window as limits[0] \
             (fixed_window per 1s); keep only the smaller limit, the larger could never deny",
        ),
        (
            "both.json",
            "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\",\n\"limits\": [{\"limit\": 10, \"window\": \"1m\"}]}}}",
            "both.json:2: tollgate.default.limits: `limit` and `limits` are mutually exclusive",
        ),
        (
            "empty.yaml",
            "tollgate:\n  default: { limits: [] }\n",
            "empty.yaml:2: tollgate.default.limits: lists no limit",
        ),
    ];
    for (name, text, expected) in cases {
        let file = write(dir.path(), name, text);
        let out = Tollgate::check(&file).run();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "{name}");
        let expected = format!("error: {}/{expected}", dir.path().display());
        assert!(
            stderr.starts_with(&expected),
            "{name}: {stderr}\nexpected: {expected}"
        );
    }
}
