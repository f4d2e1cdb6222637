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
/// then an aligned table with one row per policy, the default first.
pub fn report(file: &PolicyFile) -> String {
    let policies = file.effective_policies();
    let mut out = format!(
        "{}: valid, {} {}; state {}, fail {}, key prefix {:?}\n",
        file.origin(),
        policies.len(),
        if policies.len() == 1 { "policy" } else { "policies" },
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

    #[test]
    fn the_report_lists_every_policy_aligned() {
        let file = PolicyFile::from_str(
            "tollgate:\n  strategy: token_bucket\n  default: { limit: 100, window: 1m }\n  \
             resources:\n    search: { limit: 50, window: 1s }\n    \
             login: { limit: 5, window: 90s, strategy: fixed_window }\n",
            Format::Yaml,
            "p.yaml",
        )
        .unwrap();
        assert_eq!(
            report(&file),
            "p.yaml: valid, 3 policies; state in memory, fail closed, key prefix \"tollgate\"\n\
             target   strategy      limit  window\n\
             default  token_bucket    100  1m\n\
             login    fixed_window      5  1m 30s\n\
             search   token_bucket     50  1s\n"
        );
    }
}
