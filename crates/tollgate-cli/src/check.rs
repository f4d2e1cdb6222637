//! `tollgate check FILE`: validates a policy file and prints its effective
//! policies, or an Envoy rate-limit file and its limits.

use std::io::Write;
use std::path::Path;

use tollgate::{Policy, Strategy};
use tollgate_config::{ConfigFile, PolicyFile, Target};

use crate::described::{describe_settings, Replay};
use crate::error::CliError;
use crate::table::aligned;

/// Loads the policy file at `path` and prints its effective policies.
///
/// # Errors
///
/// [`CliError::Config`] naming the file, line and field of the first
/// mistake, or [`CliError::Stdout`].
pub fn check(path: &Path) -> Result<(), CliError> {
    let text = match ConfigFile::load(path)? {
        ConfigFile::Policy(file) => report(&file),
        ConfigFile::Envoy(file) => crate::envoy_check::report(&file, &path.display().to_string()),
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(CliError::Stdout)
}

/// The report of a valid file: a line naming the file and its settings,
/// then an aligned table with one row per limit, the default first: a
/// policy of one limit is one row named after its target, a compound
/// policy one row per limit, named `TARGET limits[i]`, and a resource that
/// combines its rates with a concurrency limit one more row for the
/// latter, named `TARGET in flight`. A concurrency limit's window is its
/// permits' ttl (`ttl 30s`). When the file gives settings beside the
/// policies (`exempt`, `deny`, `shadow`, `deny_cache`, `fallback`), a last
/// column shows each target's, on its first row.
pub fn report(file: &PolicyFile) -> String {
    let policies = file.effective_policies();
    let in_flight = |target: &Target<'_>| match target {
        Target::Resource(name) => file.in_flight(name),
        Target::Default => None,
    };
    let limits: usize = policies
        .iter()
        .map(|(target, p)| p.limits().len() + usize::from(in_flight(target).is_some()))
        .sum();
    let mut out = format!(
        "{}: valid, {} {}{}; state {}, fail {}, key prefix {:?}\n",
        file.origin(),
        policies.len(),
        if policies.len() == 1 { "policy" } else { "policies" },
        if limits > policies.len() {
            format!(" of {limits} limits")
        } else {
            String::new()
        },
        file.storage(),
        match file.fail_policy() {
            tollgate::FailPolicy::Open => "open",
            tollgate::FailPolicy::Fallback => "fallback",
            _ => "closed",
        },
        file.key_prefix(),
    );
    let with_settings = file.has_settings();
    let rows: Vec<Vec<String>> = std::iter::once(
        ["target", "strategy", "limit", "window", "settings"][..if with_settings { 5 } else { 4 }]
            .iter()
            .map(|c| (*c).to_owned())
            .collect(),
    )
    .chain(policies.iter().flat_map(|(target, policy)| {
        let settings = with_settings.then(|| describe_settings(&file.settings(*target), Replay::No));
        target_rows(target, policy, in_flight(target), settings)
    }))
    .collect();
    out.push_str(&aligned(&rows, |column| column == 2));
    out
}

/// The rows of `target`: one per limit of `policy`, then one for the
/// concurrency limit `in_flight` it combines with its rates; `settings` on
/// the first.
fn target_rows(
    target: &Target<'_>,
    policy: &Policy,
    in_flight: Option<&Policy>,
    settings: Option<String>,
) -> Vec<Vec<String>> {
    let target = target.to_string().escape_debug().to_string();
    let compound = policy.is_compound();
    let named = policy.limits().iter().enumerate().map(|(i, limit)| {
        let name = if compound {
            format!("{target} limits[{i}]")
        } else {
            target.clone()
        };
        (name, limit)
    });
    let slots = in_flight.map(|p| (format!("{target} in flight"), &p.limits()[0]));
    named
        .chain(slots)
        .enumerate()
        .map(|(i, (name, limit))| {
            let window = humantime::format_duration(limit.window()).to_string();
            let mut row = vec![
                name,
                limit.strategy().name().to_owned(),
                limit.limit().to_string(),
                if limit.strategy() == Strategy::Concurrency {
                    format!("ttl {window}")
                } else {
                    window
                },
            ];
            if let Some(settings) = &settings {
                row.push(if i == 0 { settings.clone() } else { String::new() });
            }
            row
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use tollgate_config::Format;

    use super::*;

    /// The report of the YAML file `text`, named `p.yaml`.
    fn report_of(text: &str) -> String {
        report(&PolicyFile::from_str(text, Format::Yaml, "p.yaml").unwrap())
    }

    #[test]
    fn the_report_lists_every_policy_aligned() {
        assert_eq!(
            report_of(
                "tollgate:\n  strategy: token_bucket\n  default: { limit: 100, window: 1m }\n  \
                 resources:\n    search: { limit: 50, window: 1s }\n    \
                 login: { limit: 5, window: 90s, strategy: fixed_window }\n"
            ),
            "p.yaml: valid, 3 policies; state in memory, fail closed, key prefix \"tollgate\"\n\
             target   strategy      limit  window\n\
             default  token_bucket    100  1m\n\
             login    fixed_window      5  1m 30s\n\
             search   token_bucket     50  1s\n"
        );
    }

    #[test]
    fn settings_get_a_column_on_each_targets_first_row() {
        assert_eq!(
            report_of(
                "tollgate:\n  exempt: [10.0.0.0/8, health-checker]\n  deny_cache: true\n  \
                 fallback: { limit: 25, window: 1m }\n  default: { limit: 100, window: 1m }\n  resources:\n    \
                 api:\n      shadow: true\n      deny: [203.0.113.9]\n      exempt: [ops, health-checker]\n      \
                 limits:\n        - { limit: 10, window: 1s, strategy: token_bucket }\n        \
                 - { limit: 1000, window: 1h }\n    \
                 login:\n      limit: 5\n      window: 90s\n      strategy: fixed_window\n      \
                 deny_cache: { capacity: 500, max_key_len: 64 }\n      \
                 fallback: { limits: [{ limit: 2, window: 1m }, { limit: 20, window: 1h }] }\n    \
                 search: { limit: 50, window: 1s, deny_cache: false }\n"
            ),
            "p.yaml: valid, 4 policies of 5 limits; state in memory, fail fallback, key prefix \"tollgate\"\n\
             target         strategy        limit  window  settings\n\
             default        sliding_window    100  1m      exempt (2), deny cache, fallback sliding_window 25 per 1m\n\
             api limits[0]  token_bucket       10  1s      shadow, exempt (3), deny (1), deny cache, fallback sliding_window 25 per 1m\n\
             api limits[1]  sliding_window   1000  1h\n\
             login          fixed_window        5  1m 30s  exempt (2), deny cache (500 keys of up to 64 bytes), fallback sliding_window 2 per 1m and sliding_window 20 per 1h\n\
             search         sliding_window     50  1s      exempt (2), fallback sliding_window 25 per 1m\n"
        );
        // A resource without settings of its own shows the file-wide ones,
        // and a file of shadow mode alone says so.
        assert_eq!(
            report_of("tollgate:\n  shadow: true\n  default: { limit: 1, window: 1s }\n  resources:\n    a: { limit: 2, window: 1s, shadow: false }\n"),
            "p.yaml: valid, 2 policies; state in memory, fail closed, key prefix \"tollgate\"\n\
             target   strategy        limit  window  settings\n\
             default  sliding_window      1  1s      shadow\n\
             a        sliding_window      2  1s      -\n"
        );
    }

    #[test]
    fn a_compound_policy_has_a_row_per_limit() {
        assert_eq!(
            report_of(
                "tollgate:\n  default: { limit: 100, window: 1m }\n  resources:\n    api:\n      limits:\n        \
                 - { limit: 10, window: 1s, strategy: token_bucket }\n        - { limit: 1000, window: 1h }\n    \
                 login: { limit: 5, window: 90s, strategy: fixed_window }\n"
            ),
            "p.yaml: valid, 3 policies of 4 limits; state in memory, fail closed, key prefix \"tollgate\"\n\
             target         strategy        limit  window\n\
             default        sliding_window    100  1m\n\
             api limits[0]  token_bucket       10  1s\n\
             api limits[1]  sliding_window   1000  1h\n\
             login          fixed_window        5  1m 30s\n"
        );
    }

    #[test]
    fn a_concurrency_limit_shows_its_ttl_and_a_combined_resource_both_limits() {
        assert_eq!(
            report_of(
                "tollgate:\n  default: { limit: 100, window: 1m }\n  resources:\n    api:\n      limits:\n        \
                 - { limit: 10, window: 1s, strategy: token_bucket }\n        \
                 - { strategy: concurrency, limit: 4, ttl: 5m }\n        - { limit: 1000, window: 1h }\n    \
                 export:\n      limits:\n        - { limit: 3, window: 1m, strategy: fixed_window }\n        \
                 - { strategy: concurrency, limit: 1 }\n    \
                 streams: { strategy: concurrency, limit: 2, ttl: 90s }\n"
            ),
            "p.yaml: valid, 4 policies of 7 limits; state in memory, fail closed, key prefix \"tollgate\"\n\
             target            strategy        limit  window\n\
             default           sliding_window    100  1m\n\
             api limits[0]     token_bucket       10  1s\n\
             api limits[1]     sliding_window   1000  1h\n\
             api in flight     concurrency         4  ttl 5m\n\
             export            fixed_window        3  1m\n\
             export in flight  concurrency         1  ttl 30s\n\
             streams           concurrency         2  ttl 1m 30s\n"
        );
    }
}
