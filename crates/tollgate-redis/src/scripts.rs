//! The Lua scripts and their invocation.
//!
//! `scripts/prelude.lua` holds the clock and the integer helpers; each
//! strategy file defines one decision function that does not write (the
//! token bucket and the leaky bucket share `gcra.lua`, as the in-memory code
//! shares `gcra.rs`). A policy of one limit runs the prelude, its strategy's
//! file and `single.lua`; a compound policy runs the prelude, every strategy
//! file and `compound.lua`, which decides every limit and writes their
//! states only when all admit. The same functions decide in both, so a limit
//! decides alike alone and in a compound policy.
//!
//! A decision is one `EVALSHA`; after `NOSCRIPT` (a restarted or
//! failed-over server, or `SCRIPT FLUSH`) the same call is repeated once as
//! `EVAL`, which runs the script and caches it again on the server that owns
//! the keys.
//!
//! redis-rs's `ScriptInvocation::invoke_async` also handles `NOSCRIPT`, by
//! `SCRIPT LOAD` and a second `EVALSHA`. It is not used here: that costs a
//! third round trip, and in a cluster `SCRIPT LOAD` is sent to every primary,
//! so it fails while any primary is unreachable even when the key's own
//! primary is healthy.

use redis::{Cmd, ErrorKind, RedisResult, ServerErrorKind};
use tollgate::Strategy;

use crate::connection::Connection;

const PRELUDE: &str = include_str!("../scripts/prelude.lua");
const FIXED_WINDOW: &str = include_str!("../scripts/fixed_window.lua");
const SLIDING_WINDOW: &str = include_str!("../scripts/sliding_window.lua");
const GCRA: &str = include_str!("../scripts/gcra.lua");
const SINGLE: &str = include_str!("../scripts/single.lua");
const COMPOUND: &str = include_str!("../scripts/compound.lua");
const OPERATE: &str = include_str!("../scripts/operate.lua");

/// The Lua function that decides for `strategy`, and the file defining it.
fn function(strategy: Strategy) -> (&'static str, &'static str) {
    match strategy {
        Strategy::FixedWindow => ("fixed_window", FIXED_WINDOW),
        Strategy::SlidingWindow => ("sliding_window", SLIDING_WINDOW),
        Strategy::TokenBucket | Strategy::LeakyBucket => ("gcra", GCRA),
    }
}

/// The name by which `compound.lua` knows the function of `strategy` (its
/// argument for each limit).
pub(crate) fn function_name(strategy: Strategy) -> &'static str {
    function(strategy).0
}

/// One script: its source and SHA-1.
#[derive(Clone, Debug)]
pub(crate) struct LuaScript {
    source: String,
    sha: String,
}

impl LuaScript {
    /// The script that decides a single limit of `strategy`.
    pub(crate) fn for_strategy(strategy: Strategy) -> Self {
        let (name, body) = function(strategy);
        Self::new(format!("{PRELUDE}{body}\nlocal decide = {name}\n{SINGLE}"))
    }

    /// The script that decides several limits as one step.
    pub(crate) fn compound() -> Self {
        Self::new(format!("{PRELUDE}{FIXED_WINDOW}{SLIDING_WINDOW}{GCRA}{COMPOUND}"))
    }

    /// The script that applies a per-key operation (reset, block, refund,
    /// penalty) to every limit of a policy, one or several.
    pub(crate) fn operations() -> Self {
        Self::new(format!("{PRELUDE}{FIXED_WINDOW}{SLIDING_WINDOW}{GCRA}{OPERATE}"))
    }

    fn new(source: String) -> Self {
        let sha = redis::Script::new(&source).get_hash().to_owned();
        Self { source, sha }
    }

    /// The script's SHA-1, as `EVALSHA` names it.
    pub(crate) fn sha(&self) -> &str {
        &self.sha
    }

    /// Runs the script on `keys` with `args`: `EVALSHA`, then `EVAL` once
    /// if the server does not have the script cached. In a cluster the
    /// command goes to the primary of the first key; all keys of one call
    /// share its hash slot.
    pub(crate) async fn run(
        &self,
        conn: &Connection,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> RedisResult<Vec<i64>> {
        match conn.query(&self.command("EVALSHA", &self.sha, keys, args)).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                conn.query(&self.command("EVAL", &self.source, keys, args)).await
            }
            other => other,
        }
    }

    fn command(&self, verb: &str, script: &str, keys: &[&[u8]], args: &[&[u8]]) -> Cmd {
        let mut cmd = redis::cmd(verb);
        cmd.arg(script).arg(keys.len());
        for key in keys {
            cmd.arg(*key);
        }
        for arg in args {
            cmd.arg(*arg);
        }
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_share_one_script_and_windows_have_their_own() {
        let token = LuaScript::for_strategy(Strategy::TokenBucket);
        let leaky = LuaScript::for_strategy(Strategy::LeakyBucket);
        let fixed = LuaScript::for_strategy(Strategy::FixedWindow);
        let sliding = LuaScript::for_strategy(Strategy::SlidingWindow);
        let compound = LuaScript::compound();
        assert_eq!(token.sha, leaky.sha);
        assert_ne!(token.sha, fixed.sha);
        assert_ne!(fixed.sha, sliding.sha);
        assert_ne!(compound.sha, token.sha);
        assert_eq!(token.sha.len(), 40);
        assert!(fixed.source.starts_with(PRELUDE));
        assert!(compound.source.starts_with(PRELUDE));
    }
}
