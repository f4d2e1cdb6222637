//! A policy file's exempt and deny lists and shadow mode in `simulate
//! --config` and `check`: shadow mode reports exactly what enforcement
//! denies, the lists count the requests of their keys (recounted here from
//! the trace), and the rest of a resource's requests are decided as if the
//! listed ones were not there.

use std::net::Ipv4Addr;
use std::path::Path;

use crate::support::*;

/// Enforcing policies for the sample trace's paths, one compound.
const ENFORCING: &str = "\
tollgate:
  default: { limit: 10, window: 10s }
  resources:
    /api/login: { limit: 3, window: 5s, strategy: fixed_window }
    /api/search:
      limits:
        - { limit: 4, window: 1s, strategy: token_bucket }
        - { limit: 20, window: 10s, strategy: sliding_window }
";

/// The same policies with `/api/login` and `/api/search` in shadow mode.
fn shadowed() -> String {
    ENFORCING
        .replace("/api/login: { limit: 3,", "/api/login: { shadow: true, limit: 3,")
        .replace("    /api/search:\n", "    /api/search:\n      shadow: true\n")
}

/// The summary's lines, by the name they start with: each policy's row and
/// the lines under it (limits, lists, shadow), without the title.
fn sections(summary: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let table = summary.lines().skip_while(|l| !l.starts_with("policy "));
    for line in table.skip(1) {
        if let Some(under) = line.strip_prefix("  ") {
            out.last_mut().unwrap().1.push(under.to_owned());
        } else {
            out.push((line.to_owned(), Vec::new()));
        }
    }
    out
}

/// Replays the sample trace, its paths as resources, under the policy file
/// `text` (written as `name` in `dir`); returns the summary and the
/// decisions file's rows.
fn replay(dir: &Path, name: &str, text: &str) -> (String, Vec<Vec<String>>) {
    let trace = sample_with_resources(dir);
    let policies = write(dir, name, text);
    let out = dir.join(format!("{name}.csv"));
    let summary = Tollgate::simulate()
        .trace(&trace)
        .config(&policies)
        .decisions(&out)
        .run_ok();
    (summary, read_csv(&out))
}

/// The cells of a summary row.
fn cells(row: &str) -> Vec<&str> {
    row.split_whitespace().collect()
}

#[test]
fn shadow_mode_reports_exactly_what_enforcement_denies() {
    let dir = tempfile::tempdir().unwrap();
    let (enforced, _) = replay(dir.path(), "enforcing.yaml", ENFORCING);
    let (shadowed, rows) = replay(dir.path(), "shadow.yaml", &shadowed());
    assert!(
        shadowed.contains("\n  /api/login   fixed_window, 3 per 5s; shadow\n"),
        "{shadowed}"
    );
    let (enforced, shadowed) = (sections(&enforced), sections(&shadowed));
    assert_eq!(enforced.len(), 3);
    // The default enforces in both: the same row.
    assert_eq!(shadowed[0], enforced[0]);
    for ((e_row, e_under), (s_row, s_under)) in enforced[1..].iter().zip(&shadowed[1..]) {
        let (e, s) = (cells(e_row), cells(s_row));
        let denied: u64 = e[2].parse().unwrap();
        assert!(denied > 0, "{e_row}: enforcement should deny some");
        // Everything admitted, nothing denied; the same peak of what the
        // limits admitted, on the same key.
        let total = (e[1].parse::<u64>().unwrap() + denied).to_string();
        assert_eq!(s[..6], [e[0], &total, "0", "0.0", e[4], e[5]], "{s_row}");
        // The shadow line counts what enforcement denied, with the same
        // keys; each limit would deny what it denied.
        let most_denied = e_row.split("  ").last().unwrap().trim();
        assert_eq!(
            s_under.last().unwrap(),
            &format!("shadow: {denied} requests allowed that enforcement would deny: {most_denied}"),
        );
        let would: Vec<String> = e_under
            .iter()
            .map(|l| l.replace(" denied,", " would deny,"))
            .collect();
        assert_eq!(s_under[..s_under.len() - 1], would[..], "{s_row}");
    }
    assert_eq!(shadowed[2].1.len(), 3, "two limit lines and the shadow line");
    // The decisions file allows every request.
    assert_eq!(rows.len(), 3_058);
    let denied = rows[1..].iter().filter(|r| r[3] == "false").count() as u64;
    let default_denied: u64 = cells(&enforced[0].0)[2].parse().unwrap();
    assert_eq!(denied, default_denied, "only the default denies");
}

/// Whether `key` is `entry`: the same key, or an IPv4 address in the
/// block `entry` names (the reference the lists are checked against).
fn matches(entry: &str, key: &str) -> bool {
    let Some((network, prefix)) = entry.split_once('/') else {
        return entry == key;
    };
    let (Ok(network), Ok(ip)) = (network.parse::<Ipv4Addr>(), key.parse::<Ipv4Addr>()) else {
        return false;
    };
    let mask = u32::MAX
        .checked_shl(32 - prefix.parse::<u32>().unwrap())
        .unwrap_or(0);
    u32::from(network) & mask == u32::from(ip) & mask
}

/// A summary row's name, the resources it decides (none: the default's),
/// its exempt entries besides the file's, and its deny entries.
type Listing<'a> = (&'a str, &'a [&'a str], &'a [&'a str], &'a [&'a str]);

const LISTS: &str = "\
tollgate:
  exempt: [10.0.1.0/24]
  default: { limit: 10, window: 10s }
  resources:
    /api/login:
      limit: 3
      window: 5s
      strategy: fixed_window
      exempt: [10.0.0.3]
      deny: [203.0.113.9, 172.16.0.0/12, 10.0.1.49]
    /health: { limit: 1, window: 1s, exempt: [\"192.168.1.20\"] }
";

#[test]
fn lists_count_their_requests_and_leave_the_others_decided_as_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (summary, decisions) = replay(dir.path(), "lists.yaml", LISTS);
    assert!(
        summary.contains(
            "\n  default     sliding_window, 10 per 10s; exempt (1)\n  \
             /api/login  fixed_window, 3 per 5s; exempt (2), deny (3)\n  \
             /health     sliding_window, 1 per 1s; exempt (2)\npolicy "
        ),
        "{summary}"
    );
    let rows = read_csv(&sample_with_resources(dir.path()));
    let file_wide = ["10.0.1.0/24"];
    let targets: [Listing; 3] = [
        ("default", &[], &[], &[]),
        (
            "/api/login",
            &["/api/login"],
            &["10.0.0.3"],
            &["203.0.113.9", "172.16.0.0/12", "10.0.1.49"],
        ),
        ("/health", &["/health"], &["192.168.1.20"], &[]),
    ];
    let named = ["/api/login", "/health"];
    let sections = sections(&summary);
    for (name, resources, exempt, deny) in targets {
        let mine = |r: &[String]| {
            if resources.is_empty() {
                !named.contains(&r[2].as_str())
            } else {
                resources.contains(&r[2].as_str())
            }
        };
        let on = |list: &[&str], key: &str| list.iter().any(|e| matches(e, key));
        let (mut exempted, mut denied) = (0, 0);
        let mut rest = String::from("time,key,resource,cost\n");
        let mut rest_lines = Vec::new();
        for (i, r) in rows.iter().enumerate().skip(1).filter(|(_, r)| mine(r)) {
            let decision = &decisions[i];
            if on(deny, &r[1]) {
                denied += 1;
                assert_eq!(decision[3], "false", "line {}: deny-listed", i + 1);
            } else if on(&file_wide, &r[1]) || on(exempt, &r[1]) {
                exempted += 1;
                assert_eq!(decision[3], "true", "line {}: exempt", i + 1);
            } else {
                rest.push_str(&format!("{},{},{},{}\n", r[0], r[1], r[2], r[3]));
                rest_lines.push(i);
            }
        }
        assert!(exempted > 0, "{name}: the trace should have exempt keys");
        let (_, under) = sections.iter().find(|(row, _)| cells(row)[0] == name).unwrap();
        let mut expected = vec![format!("exempt: {exempted} requests allowed without counting")];
        if !deny.is_empty() {
            assert!(denied > 0, "{name}: the trace should have denied keys");
            expected.push(format!("deny list: {denied} requests denied"));
        }
        assert_eq!(under, &expected, "{name}");
        // The other requests are decided as if the listed ones were not
        // there: listed keys are never charged.
        if name == "/api/login" {
            let alone_trace = write(dir.path(), "rest.csv", &rest);
            let alone_out = dir.path().join("rest.out.csv");
            Tollgate::simulate()
                .trace(&alone_trace)
                .strategy("fixed_window")
                .limit(3)
                .window("5s")
                .decisions(&alone_out)
                .run_ok();
            let alone = read_csv(&alone_out);
            for (j, &i) in rest_lines.iter().enumerate() {
                assert_eq!(decisions[i], alone[j + 1], "trace line {}", i + 1);
            }
        }
    }
}

#[test]
fn deny_cache_and_fallback_are_named_and_left_out_of_replays() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, plain_rows) = replay(dir.path(), "plain.yaml", ENFORCING);
    let (protected, protected_rows) = replay(
        dir.path(),
        "protected.yaml",
        &ENFORCING.replace(
            "tollgate:\n",
            "tollgate:\n  deny_cache: true\n  fallback: { limit: 1, window: 1m }\n",
        ),
    );
    assert_eq!(plain_rows, protected_rows);
    let note = "  (deny_cache and fallback are not replayed: the replay's store never fails, and a deny \
                cache changes no decision)\n";
    assert!(protected.contains(note), "{protected}");
    assert_eq!(sections(&plain), sections(&protected));
    assert!(!plain.contains("not replayed"));
}

#[test]
fn check_shows_each_targets_settings() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "p.yaml",
        &LISTS.replace(
            "  default:",
            "  deny_cache: { capacity: 500 }\n  fallback: { limit: 2, window: 1m }\n  default:",
        ),
    );
    let expected = format!(
        "{}: valid, 3 policies; state in memory, fail fallback, key prefix \"tollgate\"\n\
         target      strategy        limit  window  settings\n\
         default     sliding_window     10  10s     exempt (1), deny cache (500 keys of up to 256 bytes), fallback sliding_window 2 per 1m\n\
         /api/login  fixed_window        3  5s      exempt (2), deny (3), deny cache (500 keys of up to 256 bytes), fallback sliding_window 2 per 1m\n\
         /health     sliding_window      1  1s      exempt (2), deny cache (500 keys of up to 256 bytes), fallback sliding_window 2 per 1m\n",
        file.display()
    );
    assert_eq!(Tollgate::check(&file).run_ok(), expected);
}
