//! `tollgate check FILE` and `simulate --config FILE`: policy files are
//! validated with errors naming the file, line and field, and a replay
//! against a policy file decides each resource's requests exactly as a
//! replay of that resource's requests alone under its policy.

use crate::support::*;

/// Policies for the sample trace's paths: one resource per strategy family
/// and a default for the rest.
const POLICIES: &str = "\
tollgate:
  strategy: token_bucket
  default: { limit: 10, window: 10s }
  resources:
    /api/login: { limit: 3, window: 5s, strategy: fixed_window }
    /api/search: { limit: 8, window: 2s, strategy: sliding_window }
    /never/used: { limit: 1, window: 1s }
";

#[test]
fn check_prints_the_effective_policies() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "p.yaml", POLICIES);
    let out = Tollgate::check(&file).run();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
    let expected = format!(
        "{}: valid, 4 policies; state in memory, fail closed, key prefix \"tollgate\"\n\
         target       strategy        limit  window\n\
         default      token_bucket       10  10s\n\
         /api/login   fixed_window        3  5s\n\
         /api/search  sliding_window      8  2s\n\
         /never/used  token_bucket        1  1s\n",
        file.display()
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
    // The example beside the access log is valid too, and so are TOML and JSON.
    Tollgate::check(example("policies.yaml")).run_ok();
    let toml = write(
        dir.path(),
        "p.toml",
        "[tollgate]\ndefault = { limit = 5, window = \"1m\" }\n",
    );
    let json = write(
        dir.path(),
        "p.json",
        r#"{"tollgate": {"default": {"limit": 5, "window": "1m"}, "fail_open": true}}"#,
    );
    assert!(Tollgate::check(&toml)
        .run_ok()
        .contains("default  sliding_window      5  1m"));
    assert!(Tollgate::check(&json).run_ok().contains("fail open"));
}

#[test]
fn check_names_the_file_line_and_field_of_a_mistake() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "bad.yaml",
            "tollgate:\n  default: { limit: 10, window: 1m }\n  resources:\n    login: { limit: 0, window: 1m }\n",
            &["bad.yaml:4", "tollgate.resources.login.limit", "at least 1"],
        ),
        (
            "window.yaml",
            "tollgate:\n  default: { limit: 10, window: 1 mnute }\n",
            &["window.yaml:2", "tollgate.default.window", "mnute"],
        ),
        (
            "unknown.yaml",
            "tollgate:\n  default: { limit: 10, window: 1m }\n  limits: {}\n",
            &["unknown.yaml:3", "limits"],
        ),
        ("nodefault.yaml", "tollgate:\n  resources: {}\n", &["nodefault.yaml", "default"]),
        ("p.ini", "x", &["p.ini", ".yaml"]),
    ];
    for (name, text, fragments) in cases {
        let file = write(dir.path(), name, text);
        let out = Tollgate::check(&file).run();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "{name}");
        assert!(stderr.starts_with("error: "), "{stderr}");
        for fragment in *fragments {
            assert!(
                stderr.contains(fragment),
                "{name}: expected {fragment:?} in {stderr}"
            );
        }
    }
    let out = Tollgate::check(dir.path().join("missing.yaml")).run();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.yaml"));
    // No file at all is a usage error.
    assert_eq!(Tollgate::new().arg("check").run().status.code(), Some(2));
}

/// Runs `check` on a file holding `bytes`; returns the exit code, stdout
/// and stderr.
fn check_bytes(name: &str, bytes: &[u8]) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    let out = Tollgate::check(&path).run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stderr = stderr.replace(&format!("{}/", dir.path().display()), "");
    (out.status.code(), String::from_utf8(out.stdout).unwrap(), stderr)
}

#[test]
fn check_refuses_a_device_a_fifo_or_a_huge_file_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let zero = dir.path().join("zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let limit = std::time::Duration::from_secs(60);
    let out = Tollgate::check(&zero).run_within(limit);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: {}: cannot read the file: it is a character device, not a regular file; a \
             configuration file must be a regular file (a link to one is fine)\n",
            zero.display()
        )
    );
    // A FIFO nobody writes to would block the reader for ever.
    let fifo = dir.path().join("fifo.yaml");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let out = Tollgate::check(&fifo).run_within(limit);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("it is a FIFO (named pipe), not a regular file"),
        "{stderr}"
    );
    // One byte over the limit is refused, the limit itself is not.
    let mut big = POLICIES.as_bytes().to_vec();
    big.resize(16 * 1024 * 1024, b'\n');
    let (code, stdout, _) = check_bytes("at_limit.yaml", &big);
    assert_eq!((code, stdout.lines().count()), (Some(0), 6));
    big.push(b'\n');
    let (code, _, stderr) = check_bytes("over.yaml", &big);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("over.yaml: the file is larger than 16 MiB (16777216 bytes), the most a configuration file may hold"),
        "{stderr}"
    );
    // /dev/zero itself: refused before reading (an Envoy file may have any
    // name, so the kind of file is what refuses it).
    let out = Tollgate::check("/dev/zero").run_within(limit);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: /dev/zero: cannot read the file: it is a character device, not a regular file; a \
         configuration file must be a regular file (a link to one is fine)\n"
    );
}

#[test]
fn check_names_the_line_and_column_of_a_byte_that_is_not_utf8() {
    let text = b"tollgate:\n  default: { limit: 5, window: 1m }\n  resources:\n    caf\xe9: { limit: 1, window: 1s }\n";
    let (code, stdout, stderr) = check_bytes("latin1.yaml", text);
    assert_eq!((code, stdout.as_str()), (Some(1), ""));
    assert_eq!(
        stderr,
        "error: latin1.yaml:4: the file is not UTF-8 text: byte 0xE9 at line 4, column 8 (byte \
         offset 66) is not valid UTF-8; save the file as UTF-8\n"
    );
}

#[test]
fn check_accepts_a_json_file_with_a_byte_order_mark() {
    let text = "\u{feff}{\"tollgate\": {\"default\": {\"limit\": 5, \"window\": \"1m\"}}}\n";
    let (code, stdout, stderr) = check_bytes("bom.json", text.as_bytes());
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
    assert!(
        stdout.ends_with("default  sliding_window      5  1m\n"),
        "{stdout}"
    );
}

#[test]
fn check_refuses_a_limit_of_2_to_the_64_in_every_format() {
    let too_large = "18446744073709551616";
    for (name, text) in [
        (
            "big.yaml",
            format!("tollgate:\n  default: {{ limit: {too_large}, window: 1m }}\n"),
        ),
        (
            "big.toml",
            format!("[tollgate]\ndefault = {{ limit = {too_large}, window = \"1m\" }}\n"),
        ),
        (
            "big.json",
            format!("{{\"tollgate\": {{\"default\": {{\"limit\": {too_large}, \"window\": \"1m\"}}}}}}"),
        ),
    ] {
        let line = if name == "big.json" { 1 } else { 2 };
        let (code, _, stderr) = check_bytes(name, text.as_bytes());
        assert_eq!(code, Some(1), "{name}");
        assert_eq!(
            stderr,
            format!(
                "error: {name}:{line}: tollgate.default.limit: must be at most 4611686018427387904 \
                 (2^62, the maximum limit, within which every time and product the strategies \
                 compute is exact)\n"
            )
        );
    }
}

#[test]
fn each_resource_is_decided_as_if_replayed_alone_under_its_policy() {
    let dir = tempfile::tempdir().unwrap();
    let trace = sample_with_resources(dir.path());
    let policies = write(dir.path(), "p.yaml", POLICIES);
    let out = dir.path().join("all.csv");
    let summary = Tollgate::simulate()
        .trace(&trace)
        .config(&policies)
        .decisions(&out)
        .run_ok();
    let rows = read_csv(&trace);
    let decisions = read_csv(&out);
    assert_eq!(
        decisions.len(),
        rows.len(),
        "one decisions file, a row per request"
    );
    // Split the trace by the policy that applies, replay each part alone.
    let parts: [(&str, &[&str], &str, &str, &str); 3] = [
        ("/api/login", &["/api/login"], "fixed_window", "3", "5s"),
        ("/api/search", &["/api/search"], "sliding_window", "8", "2s"),
        ("default", &[], "token_bucket", "10", "10s"),
    ];
    let named: Vec<&str> = parts.iter().flat_map(|p| p.1.iter().copied()).collect();
    let mut lines = summary.lines().skip(5); // the title and four policy lines
    assert!(lines.next().unwrap().starts_with("policy "), "{summary}");
    let mut rows_by_name = std::collections::HashMap::new();
    for line in lines {
        rows_by_name.insert(
            line.split_whitespace().next().unwrap().to_owned(),
            line.to_owned(),
        );
    }
    for (name, resources, strategy, limit, window) in parts {
        let picked: Vec<usize> = (1..rows.len())
            .filter(|&i| {
                let r = rows[i][2].as_str();
                if resources.is_empty() {
                    !named.contains(&r)
                } else {
                    resources.contains(&r)
                }
            })
            .collect();
        assert!(
            picked.len() > 50,
            "{name}: the sample should exercise every policy"
        );
        let mut part = String::from("time,key,resource,cost\n");
        for &i in &picked {
            part.push_str(&format!(
                "{},{},{},{}\n",
                rows[i][0], rows[i][1], rows[i][2], rows[i][3]
            ));
        }
        let part_trace = write(dir.path(), "part.csv", &part);
        let part_out = dir.path().join("part.out.csv");
        let alone = Tollgate::simulate()
            .trace(&part_trace)
            .strategy(strategy)
            .limit(limit)
            .window(window)
            .decisions(&part_out)
            .run_ok();
        let expected = read_csv(&part_out);
        let denied = expected[1..].iter().filter(|r| r[3] == "false").count();
        assert!(denied > 0, "{name}: the policy should deny some requests");
        for (j, &i) in picked.iter().enumerate() {
            assert_eq!(decisions[i], expected[j + 1], "{name}: trace line {}", i + 1);
        }
        // The summary row equals the lone replay's, but for its name.
        let alone_row: Vec<&str> = alone.lines().nth(2).unwrap().split_whitespace().skip(1).collect();
        let row: Vec<&str> = rows_by_name[name].split_whitespace().skip(1).collect();
        assert_eq!(row, alone_row, "{name}");
    }
    let unused: Vec<&str> = rows_by_name["/never/used"].split_whitespace().collect();
    assert_eq!(unused[1..], ["0", "0", "-", "0", "-", "-"]);
}

#[test]
fn the_summary_names_the_file_and_every_policy() {
    let stdout = Tollgate::simulate()
        .trace(example("access.log"))
        .format("nginx")
        .config(example("policies.yaml"))
        .run_ok();
    let mut lines = stdout.lines();
    assert!(lines
        .next()
        .unwrap()
        .ends_with("policies.yaml: 754 requests from 8 keys"));
    assert_eq!(lines.next(), Some("  default      sliding_window, 30 per 10s"));
    assert_eq!(lines.next(), Some("  /api/login   fixed_window, 5 per 1m"));
    assert_eq!(
        lines.next(),
        Some("  /api/search  token_bucket, 10 per 10s and sliding_window, 40 per 1m")
    );
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header[0], "policy");
    // The compound policy's row is followed by a line per limit.
    let (limits, rows): (Vec<&str>, Vec<&str>) = lines.partition(|l| l.starts_with("  limits["));
    let rows: Vec<Vec<&str>> = rows.iter().map(|l| l.split_whitespace().collect()).collect();
    let names: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(names, ["default", "/api/login", "/api/search"]);
    // Every request is in exactly one row.
    let total: u64 = rows
        .iter()
        .map(|r| r[1].parse::<u64>().unwrap() + r[2].parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 754);
    // The login retrier meets the fixed window: 5 per minute, 10 across a
    // minute boundary.
    assert_eq!(rows[1][4..6], ["10", "198.51.100.23"]);
    // Each limit of /api/search denied some requests, and every request
    // /api/search denied is counted for exactly one of them.
    assert_eq!(limits.len(), 2, "{stdout}");
    assert!(
        limits[0].starts_with("  limits[0] token_bucket, 10 per 10s: "),
        "{stdout}"
    );
    assert!(
        limits[1].starts_with("  limits[1] sliding_window, 40 per 1m: "),
        "{stdout}"
    );
    let per_limit: Vec<u64> = limits
        .iter()
        .map(|l| {
            l.split(": ")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(per_limit.iter().all(|&n| n > 0), "{stdout}");
    assert_eq!(per_limit.iter().sum::<u64>().to_string(), rows[2][2], "{stdout}");
}

#[test]
fn flags_and_policy_files_are_exclusive_and_errors_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let policies = write(dir.path(), "p.yaml", POLICIES);
    let trace = sample_with_resources(dir.path());
    let run = |extra: &[&str]| Tollgate::simulate().trace(&trace).args(extra).run();
    for extra in [
        &["--config", arg(&policies), "--limit", "3"][..],
        &["--config", arg(&policies), "--strategy", "all"],
        &["--config", arg(&policies), "--window", "1s"],
        &["--strategy", "all", "--limit", "3"],
        &[],
    ] {
        let out = run(extra);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
    }
    let bad = write(
        dir.path(),
        "bad.yaml",
        "tollgate:\n  default: { limit: 10, window: 0s }\n",
    );
    let out_file = dir.path().join("d.csv");
    let out = run(&["--config", arg(&bad), "--decisions", arg(&out_file)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains("bad.yaml:2"),
        "{stderr}"
    );
    assert!(!out_file.exists());
}

#[test]
fn a_chart_with_a_policy_file_has_a_panel_per_policy_the_key_used() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("c.svg");
    Tollgate::simulate()
        .trace(example("access.log"))
        .format("nginx")
        .config(example("policies.yaml"))
        .plot(&svg)
        .key("192.0.2.10")
        .run_ok();
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    assert!(texts[0].starts_with("key 192.0.2.10: "), "{texts:?}");
    assert!(texts[0].ends_with("policies.yaml"), "{texts:?}");
    let captions: Vec<&str> = texts
        .iter()
        .copied()
        .filter(|t| t.contains(" admitted, "))
        .collect();
    // A browser hits the default policy (/, the stylesheet) and /api/search,
    // never /api/login.
    assert_eq!(captions.len(), 2, "{captions:?}");
    assert!(captions[0].starts_with("default (sliding_window, 30 per 10s): "));
    // The compound policy is drawn with the limit that denied the most.
    assert!(
        captions[1].starts_with("/api/search (limits[1] of 2: sliding_window, 40 per 1m): "),
        "{captions:?}"
    );
    assert!(captions[1].ends_with(" in 1m"), "{captions:?}");
}

/// `tollgate check` on an Envoy rate-limit file validates it as `tollgate
/// serve` reads it, and names a mistake's line and field.
#[test]
fn check_validates_an_envoy_file() {
    let (code, stdout, stderr) = check_bytes(
        "ratelimit.yaml",
        b"domain: edge\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 5 }\n",
    );
    assert_eq!((code, stderr.as_str()), (Some(0), ""), "{stdout}");
    assert!(
        stdout.contains("ratelimit.yaml: valid Envoy rate-limit file, domain \"edge\", 1 limit\n"),
        "{stdout}"
    );
    assert!(stdout.contains("\nedge.user   5 per hour\n"), "{stdout}");
    // A unit that follows the calendar is listed as its period.
    let (code, stdout, _) = check_bytes(
        "billing.yaml",
        b"domain: billing\ncalendar: { time_zone: Europe/Berlin }\ndescriptors:\n  - key: tenant\n    rate_limit: { unit: month, requests_per_unit: 10000 }\n",
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("billing.tenant  10000 per month from 2001-01-01T00:00:00 Europe/Berlin\n"),
        "{stdout}"
    );
    let (code, _, stderr) = check_bytes(
        "bad.yaml",
        b"domain: edge\ndescriptors:\n  - key: user\n    rate_limit: { unit: fortnight, requests_per_unit: 5 }\n",
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("bad.yaml:3: descriptors[0].rate_limit.unit: \"fortnight\" is not a unit"),
        "{stderr}"
    );
}
