//! The names of the settings beside the policies: `exempt`, `deny`,
//! `shadow`, `deny_cache`, `top_keys`, `lease`, `charge` and `fallback`.

/// The settings a policy file may give file-wide and per resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SettingField {
    Exempt,
    Deny,
    Shadow,
    DenyCache,
    TopKeys,
    Lease,
    Charge,
    Fallback,
}

impl SettingField {
    /// The setting called `name`, if any.
    pub(crate) fn named(name: &str) -> Option<Self> {
        Some(match name {
            "exempt" => SettingField::Exempt,
            "deny" => SettingField::Deny,
            "shadow" => SettingField::Shadow,
            "deny_cache" => SettingField::DenyCache,
            "top_keys" => SettingField::TopKeys,
            "lease" => SettingField::Lease,
            "charge" => SettingField::Charge,
            "fallback" => SettingField::Fallback,
            _ => return None,
        })
    }
}
