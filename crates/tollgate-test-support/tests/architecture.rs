//! What docs/architecture.md says of where decisions are made, checked by
//! reading the production sources (tests excluded):
//!
//! - the decision service decides nothing of several limits: it hands the
//!   core parts with their roles and translates the core's answer, so it
//!   calls none of the steps the core takes (giving back a request's
//!   charges, reporting the parts of a denied request, testing for a
//!   policy that admits nothing);
//! - no crate but `tollgate` calls a strategy function or builds a
//!   `Decision` by hand: a store's answer becomes a decision through the
//!   core's constructors (`Decision::from_compound`, `Decision::blocked`),
//!   so a limit means the same on every entry point and backend.

use tollgate_test_support::sources::{production_lines, relative, source_files, workspace_root};

/// Every production line of the files under `crates/<krate>/src` (or of
/// every crate but `tollgate` for `None`) that contains one of `needles`,
/// as `file:line: text`.
fn lines_with(krate: Option<&str>, needles: &[&str]) -> Vec<String> {
    let root = workspace_root();
    let mut found = Vec::new();
    for file in source_files(&root) {
        let name = relative(&root, &file);
        let in_scope = match krate {
            Some(krate) => name.starts_with(&format!("crates/{krate}/src/")),
            None => !name.starts_with("crates/tollgate/src/"),
        };
        if !in_scope {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_else(|err| panic!("{name}: {err}"));
        for (number, line) in production_lines(&text) {
            let code = line.split("//").next().unwrap_or_default();
            if needles.iter().any(|needle| calls(code, needle)) {
                found.push(format!("{name}:{number}: {}", line.trim()));
            }
        }
    }
    found
}

/// Whether `code` holds `needle` as a name of its own (not the end of a
/// longer one, `RedisDecision {`), outside a function's signature (`->
/// &Decision {`).
fn calls(code: &str, needle: &str) -> bool {
    code.match_indices(needle).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && !code[..at].contains("fn ")
    })
}

#[test]
fn the_service_decides_nothing_of_several_limits() {
    let found = lines_with(
        Some("tollgate-server"),
        &["give_back(", "together::report(", "admits_nothing("],
    );
    assert!(
        found.is_empty(),
        "the service decides a step of several limits itself; hand the core a part with its \
         together::Role instead:\n{}",
        found.join("\n")
    );
    // The check reads what it means to: the service does hand the core
    // its parts.
    assert!(!lines_with(Some("tollgate-server"), &["together::allow_all("]).is_empty());
}

#[test]
fn no_crate_but_the_core_decides_or_builds_a_decision() {
    let found = lines_with(
        None,
        &[
            "strategy::decide(",
            "strategy::decide_all(",
            "strategy::charge_all(",
            "strategy::lease_all(",
            "strategy::reserve_all(",
            "Decision::new(",
            "Decision {",
        ],
    );
    assert!(
        found.is_empty(),
        "a crate other than tollgate decides, or builds a Decision by hand; answer through the \
         core's constructors from a store's answer instead:\n{}",
        found.join("\n")
    );
    // Not vacuous: the Redis backend turns its replies into decisions
    // through the core's constructor.
    assert!(!lines_with(Some("tollgate-redis"), &["Decision::from_compound("]).is_empty());
}
