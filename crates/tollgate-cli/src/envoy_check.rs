//! `tollgate check FILE` for an Envoy rate-limit file: its domain and
//! every limit it configures, in file order.

use tollgate_config::envoy::{EnvoyFile, RateLimit};

use crate::table::aligned;

/// The report of a valid Envoy file read from `origin`: a line naming the
/// file, its domain and how many limits it configures, then an aligned
/// table with one row per limit: its descriptor path (the resource its
/// state is kept under), what it admits, and its settings (`name`,
/// `replaces`, `shadow_mode`, `quota_mode`, `charge: always`,
/// `detailed_metric`).
pub fn report(file: &EnvoyFile, origin: &str) -> String {
    let rules = file.rules();
    let mut out = format!(
        "{origin}: valid Envoy rate-limit file, domain {:?}, {} {}\n",
        file.domain(),
        rules.len(),
        if rules.len() == 1 { "limit" } else { "limits" },
    );
    let mut rows = vec![vec![
        "descriptor".to_owned(),
        "limit".to_owned(),
        "settings".to_owned(),
    ]];
    for rule in rules {
        let limit = match rule.limit {
            RateLimit::Unlimited => "unlimited".to_owned(),
            RateLimit::PerUnit {
                unit,
                requests,
                calendar: None,
            } => format!("{requests} per {}", unit.name()),
            RateLimit::PerUnit {
                requests,
                calendar: Some(calendar),
                ..
            } => format!("{requests} per {calendar}"),
        };
        let mut settings = Vec::new();
        if let Some(name) = &rule.name {
            settings.push(format!("name {name}"));
        }
        if !rule.replaces.is_empty() {
            settings.push(format!("replaces {}", rule.replaces.join(", ")));
        }
        for (on, what) in [
            (rule.shadow, "shadow_mode"),
            (rule.quota, "quota_mode"),
            (rule.charge == tollgate::Charge::Always, "charge: always"),
            (rule.detailed_metric, "detailed_metric"),
        ] {
            if on {
                settings.push(what.to_owned());
            }
        }
        rows.push(vec![
            rule.resource.escape_debug().to_string(),
            limit,
            settings.join("; "),
        ]);
    }
    out.push_str(&aligned(&rows, |column| column == 1));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_lists_every_limit_with_its_settings() {
        let file = EnvoyFile::parse(
            "domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 3, name: per_ip }
  - key: tenant
    charge: always
    quota_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1000 }
  - key: internal
    rate_limit: { unlimited: true }
  - key: path
    value: /shadow
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 10, replaces: [{ name: per_ip }] }
",
            "rl.yaml",
        )
        .unwrap();
        assert_eq!(
            report(&file, "rl.yaml"),
            "rl.yaml: valid Envoy rate-limit file, domain \"edge\", 4 limits\n\
             descriptor                   limit  settings\n\
             edge.remote_address   3 per minute  name per_ip\n\
             edge.tenant          1000 per hour  quota_mode; charge: always\n\
             edge.internal            unlimited\n\
             edge.path=/shadow    10 per second  replaces per_ip; shadow_mode\n"
        );
    }
}
