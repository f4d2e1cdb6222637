//! The Lua code and its invocation: a function library where the server
//! has one (Redis 7), scripts otherwise.
//!
//! `scripts/prelude.lua` holds the clock and the integer helpers; each
//! strategy file defines one decision function that does not write (the
//! token bucket and the leaky bucket share `gcra.lua`, as the in-memory code
//! shares `gcra.rs`); `single.lua`, `compound.lua`, `together.lua`,
//! `operate.lua`, `lease.lua`, `reserve.lua`, `permits.lua` and
//! `holds.lua` define the entry points: a policy of one limit, several
//! limits decided as one step (their states written only when all admit),
//! several parts of one request decided as one step (each a policy on its
//! own key, charged only when no part denies), the per-key operations, a
//! request asking for a lease, a reservation and its cancel, operations
//! on keys' permits under concurrency limits (one, or several in order),
//! and a hold (an estimate
//! charged up front) and its settle by the usage. The same functions decide in all, so
//! a limit decides alike alone and in a compound policy.
//!
//! **Function library.** The prelude, every strategy file, the entry points
//! and `library.lua`, which registers one function per entry point (one per
//! strategy for a single limit), form one library, loaded with
//! `FUNCTION LOAD REPLACE`. A decision is one `FCALL`. Its name ends with a
//! digest of its text, so two versions of the backend on one server keep
//! their own libraries. The library is loaded lazily, by the decision that
//! finds it missing (`ERR Function not found`: a new, restarted or
//! failed-over server without it, or `FUNCTION FLUSH`): it sends
//! `FUNCTION LOAD REPLACE` to the server that owns the decision's keys (in a
//! cluster, that key's primary, so each primary is loaded by its first
//! decision and an unreachable one holds up no other) and repeats the
//! `FCALL`. A loaded library is replicated and persisted like data.
//!
//! **Scripts.** A server without functions (before Redis 7), or one whose
//! ACL refuses `FCALL` or `FUNCTION LOAD`, gets scripts instead: the prelude,
//! the strategy files the entry point needs, the entry point and a line
//! calling it. The first decision that finds functions unavailable switches
//! its backend to scripts for good. A script decision is one `EVALSHA`;
//! after `NOSCRIPT` the same call is repeated once as `EVAL`, which runs the
//! script and caches it again on the server that owns the keys. Scripts
//! write their states with `SET` and `PEXPIREAT` (the library with one
//! `SET … PXAT`, which needs Redis 6.2), so they run on Redis 5 and later.
//!
//! redis-rs's `ScriptInvocation::invoke_async` also handles `NOSCRIPT`, by
//! `SCRIPT LOAD` and a second `EVALSHA`. It is not used here: that costs a
//! third round trip, and in a cluster `SCRIPT LOAD` is sent to every primary,
//! so it fails while any primary is unreachable even when the key's own
//! primary is healthy.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use redis::{Cmd, ErrorKind, RedisError, RedisResult, ServerErrorKind};
use tollgate::Strategy;

use crate::connection::Connection;

const PRELUDE: &str = include_str!("../scripts/prelude.lua");
const FIXED_WINDOW: &str = include_str!("../scripts/fixed_window.lua");
const SLIDING_WINDOW: &str = include_str!("../scripts/sliding_window.lua");
const GCRA: &str = include_str!("../scripts/gcra.lua");
const SINGLE: &str = include_str!("../scripts/single.lua");
const COMPOUND: &str = include_str!("../scripts/compound.lua");
const TOGETHER: &str = include_str!("../scripts/together.lua");
const OPERATE: &str = include_str!("../scripts/operate.lua");
const LEASE: &str = include_str!("../scripts/lease.lua");
const RESERVE: &str = include_str!("../scripts/reserve.lua");
const PERMITS: &str = include_str!("../scripts/permits.lua");
const HOLDS: &str = include_str!("../scripts/holds.lua");
const LIBRARY: &str = include_str!("../scripts/library.lua");

/// The Lua function that decides a rate limit of `strategy`, and the file
/// defining it; `None` for a concurrency limit, which has no decision
/// function (its entry point is `permits.lua`'s).
fn function(strategy: Strategy) -> Option<(&'static str, &'static str)> {
    match strategy {
        Strategy::FixedWindow => Some(("fixed_window", FIXED_WINDOW)),
        Strategy::SlidingWindow => Some(("sliding_window", SLIDING_WINDOW)),
        Strategy::TokenBucket | Strategy::LeakyBucket => Some(("gcra", GCRA)),
        Strategy::Concurrency => None,
    }
}

/// The name by which `compound.lua` and `operate.lua` know the function of
/// `strategy` (their argument for each limit): `concurrency` for a
/// concurrency limit, whose state key holds only a block (`operate.lua`).
pub(crate) fn function_name(strategy: Strategy) -> &'static str {
    function(strategy).map_or("concurrency", |(name, _)| name)
}

/// The function library: its source, for `FUNCTION LOAD`, and the prefix of
/// its functions' names.
struct Library {
    source: String,
    prefix: String,
}

/// The library, built once.
fn library() -> &'static Library {
    static LIBRARY_TEXT: OnceLock<Library> = OnceLock::new();
    LIBRARY_TEXT.get_or_init(|| {
        let body = format!(
            "local LIBRARY = true\n{PRELUDE}{FIXED_WINDOW}{SLIDING_WINDOW}{GCRA}{SINGLE}{COMPOUND}{TOGETHER}{OPERATE}{LEASE}{RESERVE}{PERMITS}{HOLDS}{LIBRARY}"
        );
        let digest = redis::Script::new(&body).get_hash().to_owned();
        let name = format!("tollgate_{}", &digest[..16]);
        let prefix = format!("{name}_");
        Library {
            source: format!("#!lua name={name}\n{body}register('{prefix}')\n"),
            prefix,
        }
    })
}

/// Whether a backend's decisions use the function library: true until a
/// server shows it has no functions or refuses them, then false for good.
/// Shared by every binding of one backend.
#[derive(Debug)]
pub(crate) struct Functions(AtomicBool);

impl Functions {
    /// Functions are tried first.
    pub(crate) fn new() -> Self {
        Self(AtomicBool::new(true))
    }

    /// Whether decisions call the library.
    pub(crate) fn enabled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn disable(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// The entry points, each built once and shared by every binding: a
/// script's text is kilobytes, and a service may bind tens of thousands of
/// policies.
struct Entries {
    fixed_window: LuaScript,
    sliding_window: LuaScript,
    gcra: LuaScript,
    batch_fixed_window: LuaScript,
    batch_sliding_window: LuaScript,
    batch_gcra: LuaScript,
    compound: LuaScript,
    together: LuaScript,
    operations: LuaScript,
    lease: LuaScript,
    reserve: LuaScript,
    cancel: LuaScript,
    permits: LuaScript,
    hold: LuaScript,
    settle: LuaScript,
}

fn entries() -> &'static Entries {
    static ENTRIES: OnceLock<Entries> = OnceLock::new();
    ENTRIES.get_or_init(|| Entries {
        fixed_window: LuaScript::for_strategy(Strategy::FixedWindow),
        sliding_window: LuaScript::for_strategy(Strategy::SlidingWindow),
        gcra: LuaScript::for_strategy(Strategy::TokenBucket),
        batch_fixed_window: LuaScript::batch_for_strategy(Strategy::FixedWindow),
        batch_sliding_window: LuaScript::batch_for_strategy(Strategy::SlidingWindow),
        batch_gcra: LuaScript::batch_for_strategy(Strategy::TokenBucket),
        compound: LuaScript::compound(),
        together: LuaScript::together(),
        operations: LuaScript::operations(),
        lease: LuaScript::lease(),
        reserve: LuaScript::waiting("reserve"),
        cancel: LuaScript::waiting("cancel"),
        permits: LuaScript::permits(),
        hold: LuaScript::holds("hold"),
        settle: LuaScript::holds("settle"),
    })
}

/// What decides a policy of one limit of `strategy`: for a concurrency
/// limit, what applies an operation to a key's permits.
pub(crate) fn single(strategy: Strategy) -> &'static LuaScript {
    let entries = entries();
    match strategy {
        Strategy::FixedWindow => &entries.fixed_window,
        Strategy::SlidingWindow => &entries.sliding_window,
        Strategy::TokenBucket | Strategy::LeakyBucket => &entries.gcra,
        Strategy::Concurrency => &entries.permits,
    }
}

/// What decides several requests of a policy of one limit of `strategy`
/// in one call (batched calls); `None` for a concurrency limit, whose
/// operations go out together through [`permits`].
pub(crate) fn batch(strategy: Strategy) -> Option<&'static LuaScript> {
    let entries = entries();
    match strategy {
        Strategy::FixedWindow => Some(&entries.batch_fixed_window),
        Strategy::SlidingWindow => Some(&entries.batch_sliding_window),
        Strategy::TokenBucket | Strategy::LeakyBucket => Some(&entries.batch_gcra),
        Strategy::Concurrency => None,
    }
}

/// What applies operations (acquire, peek, release, extend) to keys'
/// permits under concurrency limits, one or several in one call.
pub(crate) fn permits() -> &'static LuaScript {
    &entries().permits
}

/// What decides a policy of several limits, and a report (usage reported
/// after the fact) for a policy of one limit or several.
pub(crate) fn compound() -> &'static LuaScript {
    &entries().compound
}

/// What decides the parts of one request together.
pub(crate) fn together() -> &'static LuaScript {
    &entries().together
}

/// What applies per-key operations.
pub(crate) fn operations() -> &'static LuaScript {
    &entries().operations
}

/// What decides a request asking for a lease, for any policy.
pub(crate) fn lease() -> &'static LuaScript {
    &entries().lease
}

/// What makes a reservation, for any policy.
pub(crate) fn reserve() -> &'static LuaScript {
    &entries().reserve
}

/// What gives a reservation back, for any policy.
pub(crate) fn cancel() -> &'static LuaScript {
    &entries().cancel
}

/// What decides a hold and records it, for a policy of one rate limit or
/// several.
pub(crate) fn hold() -> &'static LuaScript {
    &entries().hold
}

/// What settles a hold, for a policy of one rate limit or several.
pub(crate) fn settle() -> &'static LuaScript {
    &entries().settle
}

/// One entry point: the library function that runs it and the script
/// that does the same.
#[derive(Clone, Debug)]
pub(crate) struct LuaScript {
    function: String,
    source: String,
    sha: String,
}

impl LuaScript {
    /// What decides a single rate limit of `strategy` (what applies an
    /// operation to a key's permits for a concurrency limit).
    pub(crate) fn for_strategy(strategy: Strategy) -> Self {
        let Some((name, body)) = function(strategy) else {
            return Self::permits();
        };
        Self::new(
            name,
            format!("{PRELUDE}{body}{SINGLE}return single({name}, KEYS, ARGV)\n"),
        )
    }

    /// What decides several requests of a single limit of `strategy`,
    /// each on its own key, in one call.
    /// A concurrency limit has no batch: [`LuaScript::permits`].
    pub(crate) fn batch_for_strategy(strategy: Strategy) -> Self {
        let Some((name, body)) = function(strategy) else {
            return Self::permits();
        };
        Self::new(
            &format!("batch_{name}"),
            format!(
                "{PRELUDE}{body}{SINGLE}return batch({name}, KEYS, ARGV)
"
            ),
        )
    }

    /// What decides several limits as one step.
    pub(crate) fn compound() -> Self {
        Self::new(
            "compound",
            format!("{PRELUDE}{FIXED_WINDOW}{SLIDING_WINDOW}{GCRA}{COMPOUND}return compound(KEYS, ARGV)\n"),
        )
    }

    /// What decides several parts of one request as one step.
    pub(crate) fn together() -> Self {
        Self::new(
            "together",
            format!("{PRELUDE}{FIXED_WINDOW}{SLIDING_WINDOW}{GCRA}{COMPOUND}{TOGETHER}return together(KEYS, ARGV)\n"),
        )
    }

    /// What applies a per-key operation (reset, block, refund, penalty) to
    /// every limit of a policy, one or several.
    pub(crate) fn operations() -> Self {
        Self::new(
            "operate",
            format!("{PRELUDE}{FIXED_WINDOW}{SLIDING_WINDOW}{GCRA}{OPERATE}return operate(KEYS, ARGV)\n"),
        )
    }

    /// What decides a request asking for a lease (and gives back an ended
    /// lease's units), for a policy of one limit or several.
    pub(crate) fn lease() -> Self {
        Self::new(
            "lease",
            format!(
                "{PRELUDE}{FIXED_WINDOW}{SLIDING_WINDOW}{GCRA}{COMPOUND}{OPERATE}{LEASE}return lease(KEYS, ARGV)\n"
            ),
        )
    }

    /// The reservation's entry point `entry` (`reserve` or `cancel`), for
    /// a policy of one limit or several.
    pub(crate) fn waiting(entry: &str) -> Self {
        Self::new(
            entry,
            format!("{PRELUDE}{FIXED_WINDOW}{SLIDING_WINDOW}{GCRA}{COMPOUND}{OPERATE}{RESERVE}return {entry}(KEYS, ARGV)\n"),
        )
    }

    /// The holds' entry point `entry` (`hold` or `settle`), for a policy of
    /// one rate limit or several.
    pub(crate) fn holds(entry: &str) -> Self {
        Self::new(
            entry,
            format!("{PRELUDE}{FIXED_WINDOW}{SLIDING_WINDOW}{GCRA}{COMPOUND}{OPERATE}{HOLDS}return {entry}(KEYS, ARGV)\n"),
        )
    }

    /// What applies operations (acquire, peek, release, extend) to keys'
    /// permits under concurrency limits, one or several in one call.
    pub(crate) fn permits() -> Self {
        Self::new(
            "permits",
            format!("{PRELUDE}{PERMITS}return permits(KEYS, ARGV)\n"),
        )
    }

    fn new(entry: &str, body: String) -> Self {
        let source = format!("local LIBRARY = false\n{body}");
        let sha = redis::Script::new(&source).get_hash().to_owned();
        Self {
            function: format!("{}{entry}", library().prefix),
            source,
            sha,
        }
    }

    /// The script's SHA-1, as `EVALSHA` names it.
    pub(crate) fn sha(&self) -> &str {
        &self.sha
    }

    /// The library function's name, as `FCALL` names it.
    pub(crate) fn function(&self) -> &str {
        &self.function
    }

    /// Runs the entry point on `keys` (at least one) with `args`: `FCALL`
    /// while `functions` are enabled, loading the library where it is
    /// missing; otherwise, or when the server has no functions, `EVALSHA`,
    /// then `EVAL` if the server does not have the script cached. In a
    /// cluster every command goes to the primary of the first key; all keys
    /// of one call share its hash slot.
    pub(crate) async fn run(
        &self,
        conn: &Connection,
        functions: &Functions,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> RedisResult<Vec<i64>> {
        if functions.enabled() {
            let fcall = command("FCALL", &self.function, keys, args);
            match conn.query(&fcall).await {
                Err(err) if is_missing_function(&err) => {
                    let mut load = redis::cmd("FUNCTION");
                    load.arg("LOAD").arg("REPLACE").arg(&library().source);
                    match conn.query_at::<String>(&load, keys[0]).await {
                        Ok(_) => match conn.query(&fcall).await {
                            // Loaded, yet missing where the call went (the
                            // key's slot moved in between): this call runs
                            // as a script, the next one loads again.
                            Err(err) if is_missing_function(&err) => {}
                            other => return other,
                        },
                        Err(err) if refuses_functions(&err) => functions.disable(),
                        Err(err) => return Err(err),
                    }
                }
                Err(err) if refuses_functions(&err) => functions.disable(),
                other => return other,
            }
        }
        match conn.query(&command("EVALSHA", &self.sha, keys, args)).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                conn.query(&command("EVAL", &self.source, keys, args)).await
            }
            other => other,
        }
    }
}

/// `verb target numkeys keys… args…`: a script or function call.
fn command(verb: &str, target: &str, keys: &[&[u8]], args: &[&[u8]]) -> Cmd {
    let mut cmd = redis::cmd(verb);
    cmd.arg(target).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    for arg in args {
        cmd.arg(*arg);
    }
    cmd
}

/// `ERR Function not found`: the server has functions but not this library.
fn is_missing_function(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && err.detail().is_some_and(|d| d.starts_with("Function not found"))
}

/// The server has no functions (an unknown `FCALL` or `FUNCTION`: before
/// Redis 7) or its ACL refuses this user `FCALL` or `FUNCTION LOAD`.
fn refuses_functions(err: &RedisError) -> bool {
    let detail = err.detail().unwrap_or("").to_ascii_lowercase();
    match err.kind() {
        ErrorKind::Server(ServerErrorKind::ResponseError) => {
            detail.starts_with("unknown command") && (detail.contains("fcall") || detail.contains("function"))
        }
        ErrorKind::Server(ServerErrorKind::NoPerm) => detail.contains("fcall") || detail.contains("function"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_share_one_entry_point_and_windows_have_their_own() {
        let token = LuaScript::for_strategy(Strategy::TokenBucket);
        let leaky = LuaScript::for_strategy(Strategy::LeakyBucket);
        let fixed = LuaScript::for_strategy(Strategy::FixedWindow);
        let sliding = LuaScript::for_strategy(Strategy::SlidingWindow);
        let compound = LuaScript::compound();
        assert_eq!(token.sha, leaky.sha);
        assert_eq!(token.function, leaky.function);
        assert_ne!(token.sha, fixed.sha);
        assert_ne!(fixed.sha, sliding.sha);
        assert_ne!(compound.sha, token.sha);
        assert_eq!(token.sha.len(), 40);
        assert!(fixed.source.contains(PRELUDE));
        assert!(compound.source.contains(PRELUDE));
        assert!(fixed.function.starts_with("tollgate_"));
        assert!(fixed.function.ends_with("_fixed_window"));
        assert_ne!(fixed.function, sliding.function);
    }

    #[test]
    fn the_library_registers_every_entry_point_under_its_own_name() {
        let library = library();
        let name = library.prefix.trim_end_matches('_');
        assert!(library.source.starts_with(&format!("#!lua name={name}\n")));
        assert_eq!(name.len(), "tollgate_".len() + 16);
        for entry in [
            LuaScript::for_strategy(Strategy::FixedWindow),
            LuaScript::for_strategy(Strategy::SlidingWindow),
            LuaScript::for_strategy(Strategy::TokenBucket),
            LuaScript::compound(),
            LuaScript::together(),
            LuaScript::operations(),
            LuaScript::lease(),
            LuaScript::waiting("reserve"),
            LuaScript::waiting("cancel"),
            LuaScript::permits(),
            LuaScript::holds("hold"),
            LuaScript::holds("settle"),
        ] {
            let suffix = entry.function.strip_prefix(&library.prefix).unwrap();
            assert!(
                library.source.contains(&format!("prefix .. '{suffix}'")),
                "{suffix} is registered"
            );
        }
    }
}
