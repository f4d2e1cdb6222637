//! The Grafana dashboard (`deploy/grafana/tollgate.json`) queries only what
//! the service exports: every metric in its queries is in `GET /metrics`
//! of a running service, with every label the queries group or filter by.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::envoy_grpc::{descriptor, envoy};

/// Labels Prometheus adds, not the exporter: `instance` and `job` at
/// scrape time, and `le`, which only the `_bucket` series carry (the
/// exporter's `quantile` is checked like any other label).
const ADDED_LABELS: [&str; 3] = ["instance", "job", "le"];

/// The metric families of Prometheus text and the labels seen on each
/// (`_bucket`, `_sum` and `_count` series count under their family).
fn exported(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut families: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split_whitespace().next().unwrap();
            families.entry(name.to_owned()).or_default();
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap();
        let name = &line[..name_end];
        let family = families
            .keys()
            .find(|f| {
                name == f.as_str()
                    || ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|s| name.strip_suffix(s) == Some(f.as_str()))
            })
            .cloned()
            .unwrap_or_else(|| panic!("a series without its # TYPE line: {line}"));
        let labels = families.get_mut(&family).unwrap();
        if line[name_end..].starts_with('{') {
            labels.extend(label_names(&line[name_end + 1..]));
        }
    }
    families
}

/// The label names of `a="x",b="y"}...`, values skipped with their escapes.
fn label_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut chars = text.chars();
    let mut name = String::new();
    while let Some(c) = chars.next() {
        match c {
            '}' => break,
            '=' | '!' | '~' => {
                if !name.trim().is_empty() {
                    names.push(name.trim().to_owned());
                }
                name.clear();
            }
            '"' => {
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            ',' => name.clear(),
            c => name.push(c),
        }
    }
    names
}

/// The metrics a PromQL expression reads, with the label names its
/// selectors filter on, and the labels its `by (...)` clauses group by.
fn queried(expr: &str) -> (BTreeMap<String, BTreeSet<String>>, BTreeSet<String>) {
    let mut metrics: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut rest = expr;
    while let Some(start) = rest.find("tollgate_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let mut name = tail[..end].to_owned();
        if let Some(family) = name.strip_suffix("_bucket") {
            name = family.to_owned();
        }
        let labels = metrics.entry(name).or_default();
        if tail[end..].starts_with('{') {
            labels.extend(label_names(&tail[end + 1..]));
        }
        rest = &tail[end..];
    }
    let mut grouped = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("by (") {
        let inner = &rest[at + 4..];
        let close = inner.find(')').expect("a closed by clause");
        grouped.extend(inner[..close].split(',').map(|l| l.trim().to_owned()));
        rest = &inner[close..];
    }
    (metrics, grouped)
}

/// Every `expr` of the dashboard's panels.
fn expressions(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                match value {
                    serde_json::Value::String(expr) if key == "expr" => out.push(expr.clone()),
                    _ => expressions(value, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| expressions(v, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_exported() {
    // Traffic that makes each family appear: decisions on the Envoy
    // limits, a shadow descriptor over its limit, and HTTP requests.
    let mut envoy = envoy(Duration::ZERO).await;
    for _ in 0..3 {
        envoy.one(&[("path", "/shadow")], 1).await;
    }
    for _ in 0..70 {
        envoy
            .ask("edge", vec![descriptor(&[("user", "erin")], None)], 1)
            .await;
    }
    // A concurrency policy, whose in-flight gauge is exported from the
    // start (the recorder is the process's, shared by both servers).
    let dir = tempfile::tempdir().unwrap();
    let file = crate::support::write(
        dir.path(),
        "p.yaml",
        "tollgate:\n  default: { limit: 100, window: 1m }\n  resources:\n    dashboard-streams: { strategy: concurrency, limit: 2 }\n",
    );
    let permits = crate::support::start(crate::support::builder(&[&file])).await;
    reqwest::get(permits.url("/metrics")).await.unwrap();
    permits.stop().await;
    let metrics = reqwest::get(envoy.server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let exported = exported(&metrics);

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/tollgate.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    expressions(&dashboard["panels"], &mut exprs);
    assert!(exprs.len() >= 10, "{exprs:?}");
    let mut seen = BTreeSet::new();
    for expr in &exprs {
        let (metrics, grouped) = queried(expr);
        assert!(!metrics.is_empty(), "a query of no tollgate metric: {expr}");
        for (name, filtered) in &metrics {
            let labels = exported
                .get(name)
                .unwrap_or_else(|| panic!("{name} is not exported; queried by {expr}\n{metrics:?}"));
            for label in filtered.iter().chain(&grouped) {
                assert!(
                    ADDED_LABELS.contains(&label.as_str()) || labels.contains(label),
                    "{name} has no label {label}; queried by {expr}; it has {labels:?}"
                );
            }
            seen.insert(name.clone());
        }
    }
    // And every family the service exports is on the dashboard.
    let unshown: Vec<&String> = exported
        .keys()
        .filter(|name| name.starts_with("tollgate_") && !seen.contains(*name))
        .collect();
    assert!(unshown.is_empty(), "exported but on no panel: {unshown:?}");
    // Every panel's queries go to the dashboard's data source variable.
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert!(variables.contains(&"datasource"), "{variables:?}");
    envoy.server.stop().await;
}
