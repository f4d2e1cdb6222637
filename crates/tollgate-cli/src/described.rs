//! A policy file's settings beside its policies, in words, as `check` and
//! `simulate --config` show them.

use tollgate::protection::DenyCache;
use tollgate::top::TopKeys;
use tollgate_config::Settings;

/// Whether the words are for a replay, which applies only the lists and
/// shadow mode.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// Every setting (`check`).
    No,
    /// Only what a replay applies: shadow mode and the lists.
    Yes,
}

/// A target's settings in words, such as `shadow, exempt (2), deny (1),
/// deny cache, fallback sliding_window 25 per 1m`: `exempt` and `deny` with
/// their numbers of entries, the deny cache with its size when it is not
/// the default one; for a [`Replay`], without the deny cache and the
/// fallback. `-` when there is nothing to say.
pub fn describe_settings(settings: &Settings, replay: Replay) -> String {
    let mut parts = Vec::new();
    if settings.shadow {
        parts.push("shadow".to_owned());
    }
    if !settings.exempt.is_empty() {
        parts.push(format!("exempt ({})", settings.exempt.len()));
    }
    if !settings.deny.is_empty() {
        parts.push(format!("deny ({})", settings.deny.len()));
    }
    if replay == Replay::No {
        match settings.deny_cache {
            Some(cache) if cache == DenyCache::new() => parts.push("deny cache".to_owned()),
            Some(cache) => parts.push(format!(
                "deny cache ({} keys of up to {} bytes)",
                cache.get_capacity(),
                cache.get_max_key_len()
            )),
            None => {}
        }
        match settings.top_keys {
            Some(top) if top == TopKeys::new() => {}
            Some(top) => parts.push(format!("top keys ({} per metric)", top.get_capacity())),
            None => parts.push("no top keys".to_owned()),
        }
        if let Some(fallback) = &settings.fallback {
            let limits: Vec<String> = fallback
                .limits()
                .iter()
                .map(|l| {
                    format!(
                        "{} {} per {}",
                        l.strategy().name(),
                        l.limit(),
                        humantime::format_duration(l.window())
                    )
                })
                .collect();
            parts.push(format!("fallback {}", limits.join(" and ")));
        }
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(", ")
    }
}

/// Whether `settings` hold a deny cache or a fallback, which replays leave
/// out.
pub fn protects_the_store(settings: &Settings) -> bool {
    settings.deny_cache.is_some() || settings.fallback.is_some()
}
