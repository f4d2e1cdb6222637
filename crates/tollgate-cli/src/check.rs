//! `tollgate check FILE`: validates a policy file and prints its effective
//! policies.

use std::io::Write;
use std::path::Path;

use tollgate_config::PolicyFile;

use crate::error::CliError;

/// Loads the policy file at `path` and prints its effective policies.
///
/// # Errors
///
/// [`CliError::Config`] naming the file, line and field of the first
/// mistake, or [`CliError::Stdout`].
pub fn check(path: &Path) -> Result<(), CliError> {
    let file = PolicyFile::load(path)?;
    let text = report(&file);
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(CliError::Stdout)
}

/// The report of a valid file: a line naming the file and its settings,
/// then an aligned table with one row per limit, the default first: a
/// policy of one limit is one row named after its target, a compound
/// policy one row per limit, named `TARGET limits[i]`.
pub fn report(file: &PolicyFile) -> String {
    let policies = file.effective_policies();
    let limits: usize = policies.iter().map(|(_, p)| p.limits().len()).sum();
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
    let rows: Vec<[String; 4]> =
        std::iter::once(["target", "strategy", "limit", "window"].map(str::to_owned))
            .chain(policies.iter().flat_map(|(target, policy)| {
                let target = target.to_string().escape_debug().to_string();
                let compound = policy.is_compound();
                policy.limits().iter().enumerate().map(move |(i, limit)| {
                    [
                        if compound {
                            format!("{target} limits[{i}]")
                        } else {
                            target.clone()
                        },
                        limit.strategy().name().to_owned(),
                        limit.limit().to_string(),
                        humantime::format_duration(limit.window()).to_string(),
                    ]
                })
            }))
            .collect();
    let mut widths = [0; 4];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in &rows {
        let [target, strategy, limit, window] = row;
        out.push_str(&format!(
            "{target:<w0$}  {strategy:<w1$}  {limit:>w2$}  {window}\n",
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
        ));
    }
    out
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
}
