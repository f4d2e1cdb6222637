//! The policies of the `tollgate` section: `default`, a policy without
//! settings of its own, and a resource's entry, its policy with its own
//! settings beside it.

use serde::de::{Deserializer, MapAccess};
use serde::Deserialize;

use crate::raw_policy::{read_policy, Beside, LimitsOnly, RawPolicy};
use crate::setting_field::SettingField;
use crate::settings::RawSettings;

/// A resource's entry: its policy and its own settings.
pub(crate) struct RawEntry {
    pub(crate) policy: RawPolicy,
    pub(crate) settings: RawSettings,
}

impl<'de> Deserialize<'de> for RawEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (policy, settings) = read_policy(deserializer, RawSettings::default())?;
        Ok(RawEntry { policy, settings })
    }
}

/// A resource takes every setting beside its limits.
impl Beside for RawSettings {
    type Field = SettingField;

    const FIELDS: &'static [&'static str] = &[
        "limit",
        "window",
        "calendar",
        "strategy",
        "ttl",
        "limits",
        "exempt",
        "deny",
        "shadow",
        "deny_cache",
        "top_keys",
        "lease",
        "charge",
        "fallback",
    ];

    const COMBINES_IN_FLIGHT: bool = true;

    fn field(&self, name: &str) -> Result<Option<SettingField>, String> {
        Ok(SettingField::named(name))
    }

    fn read<'de, A: MapAccess<'de>>(&mut self, field: SettingField, map: &mut A) -> Result<(), A::Error> {
        RawSettings::read(self, field, map, None)
    }
}

/// `tollgate.default`: a policy without settings of its own.
pub(crate) struct DefaultPolicy(pub(crate) RawPolicy);

impl<'de> Deserialize<'de> for DefaultPolicy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (policy, _) = read_policy(deserializer, LimitsOnly(setting_in_default))?;
        Ok(DefaultPolicy(policy))
    }
}

/// The message of setting `name` in `default`, whose settings are the
/// file-wide ones.
fn setting_in_default(name: &str) -> String {
    format!(
        "`{name}` is not set in `default`: set it under `tollgate`, where it applies to the \
         default policy and to every resource (a resource may set its own)"
    )
}
