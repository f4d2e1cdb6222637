//! The names of a set's policies: which names a resource may take, how
//! errors write them, and the default policy's.

use super::Limiters;
use crate::error::ConfigError;

impl Limiters {
    /// The name [`Limiters::named_policy`] gives the default policy: the policy of
    /// every resource with none of its own, and of a set made from a single
    /// [`Limiter`](crate::Limiter). The HTTP middleware names policies with it
    /// in the IETF draft's structured headers
    /// (`RateLimit-Policy: "default";q=100;w=60`).
    pub const DEFAULT_POLICY_NAME: &str = "default";

    /// Checks that `name` can name a resource: it must not be empty (the empty
    /// name is the default policy's) and must not contain control characters
    /// (`char::is_control`: line breaks, tabs, escape sequences and the like),
    /// which would corrupt logs, metrics labels and error messages that show it.
    ///
    /// Every other string is accepted; backends escape names in their keys.
    /// [`LimitersBuilder::build`](crate::LimitersBuilder::build) applies this
    /// rule, and so should any reader of resource names (policy files, traces)
    /// to refuse the same names.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] whose field is `resources.NAME`, the name written as in
    /// [`Limiters::resource_path`], e.g. `resources.""` or `resources."log\nin"`.
    ///
    /// ```
    /// use tollgate::Limiters;
    /// assert!(Limiters::check_resource_name("login").is_ok());
    /// let err = Limiters::check_resource_name("log\nin").unwrap_err();
    /// assert_eq!(err.field(), r#"resources."log\nin""#);
    /// assert!(Limiters::check_resource_name("").is_err());
    /// ```
    pub fn check_resource_name(name: &str) -> Result<(), ConfigError> {
        if name.is_empty() {
            return Err(ConfigError::new(
                Self::resource_path(name),
                "a resource name must not be empty (the empty name is the default policy's)",
            ));
        }
        if let Some((at, c)) = name.char_indices().find(|(_, c)| c.is_control()) {
            return Err(ConfigError::new(
                Self::resource_path(name),
                format!(
                    "a resource name must not contain control characters; found U+{:04X} at byte {at}",
                    u32::from(c)
                ),
            ));
        }
        Ok(())
    }

    /// The field path of resource `name` in error messages: `resources.login`
    /// for names of letters, digits, `_` and `-`, otherwise the name quoted and
    /// escaped as Rust's `Debug` writes it (`resources."api:v1"`,
    /// `resources."log\nin"`), so no name can inject line breaks or fake a
    /// nested field.
    pub fn resource_path(name: &str) -> String {
        let plain = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-');
        if plain {
            format!("resources.{name}")
        } else {
            format!("resources.{name:?}")
        }
    }
}
