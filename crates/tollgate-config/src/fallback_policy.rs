//! `fallback`: the policy that decides while the store fails, its limits
//! only (a fallback gives no settings, so none of its own).

use serde::de::Deserializer;
use serde::Deserialize;

use crate::raw_policy::{read_policy, LimitsOnly, RawPolicy};

/// `fallback`: the policy that decides while the store fails, limits only.
pub(crate) struct FallbackPolicy(pub(crate) RawPolicy);

impl<'de> Deserialize<'de> for FallbackPolicy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (policy, _) = read_policy(deserializer, LimitsOnly(setting_in_fallback))?;
        Ok(FallbackPolicy(policy))
    }
}

/// The message of setting `name` in a fallback.
fn setting_in_fallback(name: &str) -> String {
    format!(
        "`{name}` is not part of a fallback policy, which gives only `limit`, `window` and \
         `strategy`, or `limits`"
    )
}
