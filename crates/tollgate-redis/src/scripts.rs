//! The Lua scripts, one per strategy, and their invocation.
//!
//! Each script is `scripts/prelude.lua` followed by the strategy's file; the
//! token bucket and the leaky bucket share `gcra.lua`, as the in-memory code
//! shares `gcra.rs`. A decision is one `EVALSHA`; after `NOSCRIPT` (a
//! restarted or failed-over server, or `SCRIPT FLUSH`) the same call is
//! repeated once as `EVAL`, which runs the script and caches it again on the
//! server that owns the key.
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

/// One strategy's script: its source and SHA-1.
#[derive(Clone, Debug)]
pub(crate) struct LuaScript {
    source: String,
    sha: String,
}

impl LuaScript {
    /// The script that decides for `strategy`.
    pub(crate) fn for_strategy(strategy: Strategy) -> Self {
        let body = match strategy {
            Strategy::FixedWindow => FIXED_WINDOW,
            Strategy::SlidingWindow => SLIDING_WINDOW,
            Strategy::TokenBucket | Strategy::LeakyBucket => GCRA,
        };
        let source = format!("{PRELUDE}{body}");
        let sha = redis::Script::new(&source).get_hash().to_owned();
        Self { source, sha }
    }

    /// Runs the script on `key` with `args`: `EVALSHA`, then `EVAL` once if
    /// the server does not have the script cached.
    pub(crate) async fn run(&self, conn: &Connection, key: &[u8], args: &[&[u8]]) -> RedisResult<Vec<i64>> {
        match conn.query(&self.command("EVALSHA", &self.sha, key, args)).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                conn.query(&self.command("EVAL", &self.source, key, args)).await
            }
            other => other,
        }
    }

    fn command(&self, verb: &str, script: &str, key: &[u8], args: &[&[u8]]) -> Cmd {
        let mut cmd = redis::cmd(verb);
        cmd.arg(script).arg(1).arg(key);
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
        assert_eq!(token.sha, leaky.sha);
        assert_ne!(token.sha, fixed.sha);
        assert_ne!(fixed.sha, sliding.sha);
        assert_eq!(token.sha.len(), 40);
        assert!(fixed.source.starts_with(PRELUDE));
    }
}
