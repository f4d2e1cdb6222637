//! `simulate --config FILE`: replaying a trace against a policy file's
//! resource-scoped limiter, on the trace's own clock.
//!
//! Each request's resource (the trace's `resource` column, or an access
//! log's path) picks its policy: the resource's own when the file names it,
//! the file's default otherwise (also when the request has no resource).
//! The statistics are kept per policy, one summary row each.

use tollgate::{Decision, Policy, ResourceLimiter};
use tollgate_config::PolicyFile;

use crate::replay::{replay_backend, Stats, Tally};
use crate::trace::{Request, Trace};

/// The name of the default policy's row.
pub const DEFAULT_TARGET: &str = "default";

/// The policies of a file, in summary order: the default first, then the
/// named resources sorted by name.
#[derive(Clone, Debug)]
pub struct Targets {
    /// Each target's name (`default`, or the resource) and policy.
    pub policies: Vec<(String, Policy)>,
    /// For every resource of the trace (by index in [`Trace::resources`]),
    /// the index of its target in `policies`.
    of_resource: Vec<usize>,
}

impl Targets {
    /// The targets of `file`, mapped onto the resources of `trace`.
    pub fn new(file: &PolicyFile, trace: &Trace) -> Self {
        let mut policies = vec![(DEFAULT_TARGET.to_owned(), *file.default_policy())];
        policies.extend(file.resources().map(|(name, policy)| (name.to_owned(), *policy)));
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

/// Replays `trace` against the resource-scoped in-memory limiter of
/// `targets`: before each request the limiter's manual clock is set to the
/// request's time, then the request is decided by its resource's policy.
/// `sink` sees every request with the index of its target and its decision,
/// in input order. Returns one [`Stats`] per target, in target order.
///
/// # Errors
///
/// The first error returned by `sink`, or [`tollgate::Error`] converted into
/// `E` when the limiter cannot be built.
pub fn replay<E>(
    trace: &Trace,
    targets: &Targets,
    mut sink: impl FnMut(&Request, usize, &Decision) -> Result<(), E>,
) -> Result<Vec<Stats>, E>
where
    E: From<tollgate::Error>,
{
    let (clock, backend) = replay_backend(trace);
    let mut builder = ResourceLimiter::builder().backend(backend);
    for (i, (name, policy)) in targets.policies.iter().enumerate() {
        builder = match i {
            0 => builder.default_policy(*policy),
            _ => builder.resource(name.clone(), *policy),
        };
    }
    let limiter = builder.build()?;
    // The name each target is looked up by ("" is never a resource name).
    let lookup: Vec<&str> = std::iter::once("")
        .chain(targets.policies.iter().skip(1).map(|(name, _)| name.as_str()))
        .collect();
    let mut tallies: Vec<Tally> = targets
        .policies
        .iter()
        .map(|(_, policy)| Tally::new(trace.keys.len(), policy.window()))
        .collect();
    for request in &trace.requests {
        let target = targets.of(request);
        clock.set_nanos(request.nanos);
        let decision = limiter.check_n(lookup[target], trace.keys[request.key].as_bytes(), request.cost);
        tallies[target].record(request, decision.allowed);
        sink(request, target, &decision)?;
    }
    Ok(tallies
        .into_iter()
        .zip(&targets.policies)
        .map(|(tally, (name, _))| tally.finish(name))
        .collect())
}

#[cfg(test)]
mod tests {
    use tollgate_config::Format;

    use super::*;

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
        let targets = Targets::new(&file, &trace);
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
