//! The policies one replay decides by, and which of them decides each
//! request: the one policy of `--strategy`, `--limit` and `--window`, or a
//! policy file's, chosen by the request's resource.
//!
//! With a policy file, each request's resource (the trace's `resource`
//! column, or an access log's path) picks its policy: the resource's own
//! when the file names it, the file's default otherwise (also when the
//! request has no resource). The statistics are kept per policy, one
//! summary row each.
//!
//! A policy file's exempt and deny lists and shadow mode are replayed with
//! the policies; its deny cache and fallback are not: the replay's store
//! never fails, and a deny cache never changes what the store decides.

use tollgate::{Limit, Policy};
use tollgate_config::{PolicyFile, Settings, Target};

use crate::trace::{Request, Trace};

/// The name of the default policy's row.
pub const DEFAULT_TARGET: &str = "default";

/// The policies of one replay, in summary order, and the policy of each
/// request: one policy named after its strategy, or a file's policies, the
/// default first, then the named resources sorted by name.
#[derive(Clone, Debug)]
pub struct Targets {
    /// Each target's name (the strategy; or `default`, or the resource) and
    /// policy.
    pub policies: Vec<(String, Policy)>,
    /// Each target's settings as replayed (see [`replayed`]), in the order
    /// of `policies`.
    pub settings: Vec<Settings>,
    /// For every resource of the trace (by index in [`Trace::resources`]),
    /// the index of its target in `policies`.
    of_resource: Vec<usize>,
}

impl Targets {
    /// The policy of `limit` alone, deciding every request, named after its
    /// strategy.
    pub fn one(limit: Limit) -> Self {
        Self {
            policies: vec![(limit.strategy().name().to_owned(), Policy::from(limit))],
            settings: vec![Settings::default()],
            of_resource: Vec::new(),
        }
    }

    /// Whether any of the policies holds several limits.
    pub fn any_compound(&self) -> bool {
        self.policies.iter().any(|(_, policy)| policy.is_compound())
    }

    /// The policies of `file`, mapped onto the resources of `trace`.
    pub fn of_file(file: &PolicyFile, trace: &Trace) -> Self {
        let mut policies = vec![(DEFAULT_TARGET.to_owned(), *file.default_policy())];
        policies.extend(file.resources().map(|(name, policy)| (name.to_owned(), *policy)));
        let settings = std::iter::once(Target::Default)
            .chain(file.resources().map(|(name, _)| Target::Resource(name)))
            .map(|target| replayed(file.settings(target)))
            .collect();
        let of_resource = trace
            .resources
            .iter()
            .map(|resource| {
                file.resources()
                    .position(|(name, _)| name == resource)
                    .map_or(0, |i| i + 1)
            })
            .collect();
        Self {
            policies,
            settings,
            of_resource,
        }
    }

    /// The index in [`Targets::policies`] of the policy that decides
    /// `request`.
    pub fn of(&self, request: &Request) -> usize {
        request
            .resource
            .and_then(|r| self.of_resource.get(r).copied())
            .unwrap_or(0)
    }
}

/// What of a policy file's `settings` a replay applies to one policy: the
/// exempt and deny lists and shadow mode; not the deny cache and the
/// fallback (see the module's docs).
pub fn replayed(mut settings: Settings) -> Settings {
    settings.deny_cache = None;
    settings.fallback = None;
    settings
}

#[cfg(test)]
mod tests {
    use tollgate_config::Format;

    use super::*;
    use crate::replay::replay;

    fn file(text: &str) -> PolicyFile {
        PolicyFile::from_str(text, Format::Yaml, "test.yaml").unwrap()
    }

    #[test]
    fn each_resource_gets_its_policy_and_the_rest_the_default() {
        let file = file(
            "tollgate:\n  default: { limit: 2, window: 1s, strategy: fixed_window }\n  resources:\n    \
             /login: { limit: 1, window: 1s, strategy: fixed_window }\n    /unused: { limit: 9, window: 1s }\n",
        );
        let trace = crate::trace::csv::parse(
            "time,key,resource\n0,a,/login\n1,a,/login\n2,a,/other\n3,a,\n4,a,/other\n5,b,/login\n"
                .as_bytes(),
        )
        .unwrap();
        let targets = Targets::of_file(&file, &trace);
        let names: Vec<_> = targets.policies.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["default", "/login", "/unused"]);
        let mut seen = Vec::new();
        let stats = replay(&trace, &targets, |r, target, d| {
            seen.push((r.line, target, d.allowed));
            Ok::<_, tollgate::Error>(())
        })
        .unwrap();
        // /login allows one per key; everything else shares the default's 2.
        assert_eq!(
            seen,
            [
                (2, 1, true),
                (3, 1, false),
                (4, 0, true),
                (5, 0, true),
                (6, 0, false),
                (7, 1, true)
            ]
        );
        let rows: Vec<_> = stats
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.requests,
                    s.admitted,
                    s.keys,
                    s.most_denied.clone(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("default", 3, 2, 1, vec![(0, 1)]),
                ("/login", 3, 2, 2, vec![(0, 1)]),
                ("/unused", 0, 0, 0, vec![]),
            ]
        );
    }
}
