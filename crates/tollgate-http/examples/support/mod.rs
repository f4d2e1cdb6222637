//! What both example servers share: the policies, the costs, and the
//! settings taken from environment variables.

use std::net::SocketAddr;
use std::time::Duration;

use tollgate::{Limit, Limiters, Policy, Strategy};
use tollgate_http::{ClientIp, CostError, HeaderMode, KeyExtractor, RequestInfo};

/// One policy per route template: `GET /` allows 5 requests per 10
/// seconds per client; every other route bursts of up to 10 per second and
/// 60 per minute (two limits, both checked on every request).
pub fn limiters() -> Result<Limiters, tollgate::Error> {
    Limiters::builder()
        .default_policy(Policy::compound([
            Limit::new(Strategy::TokenBucket, 10, Duration::from_secs(1))?,
            Limit::new(Strategy::SlidingWindow, 60, Duration::from_secs(60))?,
        ])?)
        .resource(
            "/",
            Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(10))?,
        )
        .build()
}

/// What a request costs: `GET /report` 5 units of its policy's limits,
/// anything else 1.
pub fn cost(req: &RequestInfo<'_>) -> Result<u64, CostError> {
    Ok(if req.route().as_deref() == Some("/report") {
        5
    } else {
        1
    })
}

/// The address the servers listen on when `TOLLGATE_ADDR` is not set.
pub const DEFAULT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 3000);

/// The servers' settings.
#[derive(Debug)]
pub struct Settings {
    /// `TOLLGATE_ADDR`: where to listen (default 127.0.0.1:3000).
    pub addr: SocketAddr,
    /// `TOLLGATE_HEADERS`: `ratelimit` (the default), `ietf`, `legacy` or
    /// `off`.
    pub headers: HeaderMode,
    /// The client address: the peer's, or, with `TOLLGATE_TRUSTED_PROXIES`
    /// (comma-separated networks or addresses such as `127.0.0.1/32`), the
    /// one those proxies pass on in `X-Forwarded-For`.
    pub key: KeyExtractor,
}

/// An environment variable whose value cannot be used.
#[derive(Debug, PartialEq, Eq)]
pub struct BadSetting {
    /// The variable's name.
    pub name: &'static str,
    /// Its value (lossily decoded when it is not UTF-8).
    pub value: String,
    /// What the variable must hold.
    pub expected: String,
}

impl std::fmt::Display for BadSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}={:?} is not usable: expected {}",
            self.name, self.value, self.expected
        )
    }
}

impl std::error::Error for BadSetting {}

impl Settings {
    /// The settings from the process environment.
    ///
    /// # Errors
    ///
    /// [`BadSetting`] naming the first variable that is set to a value that
    /// cannot be used.
    pub fn from_env() -> Result<Self, BadSetting> {
        Self::from_lookup(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// The settings from `lookup`, which gives a variable's value when it
    /// is set.
    ///
    /// # Errors
    ///
    /// As for [`Settings::from_env`].
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, BadSetting> {
        let addr = match lookup("TOLLGATE_ADDR") {
            None => DEFAULT_ADDR,
            Some(value) => value.parse().map_err(|_| BadSetting {
                name: "TOLLGATE_ADDR",
                value,
                expected: "an IP address and a port from 0 to 65535, such as 127.0.0.1:3000 or [::1]:3000"
                    .into(),
            })?,
        };
        let headers = match lookup("TOLLGATE_HEADERS").as_deref() {
            None | Some("ratelimit") => HeaderMode::RateLimit,
            Some("ietf") => HeaderMode::IetfDraft,
            Some("legacy") => HeaderMode::Legacy,
            Some("off") => HeaderMode::Off,
            Some(other) => {
                return Err(BadSetting {
                    name: "TOLLGATE_HEADERS",
                    value: other.into(),
                    expected: "one of ratelimit, ietf, legacy, off".into(),
                })
            }
        };
        let client_ip = match lookup("TOLLGATE_TRUSTED_PROXIES") {
            None => ClientIp::new(),
            Some(nets) => ClientIp::new()
                .trust_all(nets.split(','))
                .map_err(|e| BadSetting {
                    name: "TOLLGATE_TRUSTED_PROXIES",
                    expected: format!(
                        "comma-separated networks or addresses such as 10.0.0.0/8,192.0.2.7; {e}"
                    ),
                    value: nets,
                })?,
        };
        Ok(Self {
            addr,
            headers,
            key: KeyExtractor::client_ip(client_ip),
        })
    }

    /// The settings from the process environment; on a bad setting, says
    /// which on standard error and exits with status 2.
    pub fn from_env_or_exit() -> Self {
        Self::from_env().unwrap_or_else(|e| {
            eprintln!("error: {e}");
            std::process::exit(2)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, BadSetting> {
        Settings::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn unset_variables_give_the_defaults() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.addr, DEFAULT_ADDR);
        assert_eq!(s.headers, HeaderMode::RateLimit);
        assert_eq!(
            format!("{:?}", s.key),
            format!("{:?}", KeyExtractor::client_ip(ClientIp::new()))
        );
    }

    #[test]
    fn good_values_are_taken() {
        let s = settings(&[
            ("TOLLGATE_ADDR", "[::1]:8080"),
            ("TOLLGATE_HEADERS", "ietf"),
            ("TOLLGATE_TRUSTED_PROXIES", "10.0.0.0/8, 192.0.2.7"),
        ])
        .unwrap();
        assert_eq!(s.addr, "[::1]:8080".parse().unwrap());
        assert_eq!(s.headers, HeaderMode::IetfDraft);
        let trusted = ClientIp::new().trust_all(["10.0.0.0/8", "192.0.2.7"]).unwrap();
        assert_eq!(
            format!("{:?}", s.key),
            format!("{:?}", KeyExtractor::client_ip(trusted))
        );
    }

    #[test]
    fn a_bad_address_is_refused_naming_the_variable_and_value() {
        for bad in ["garbage", "127.0.0.1:99999", "127.0.0.1", ""] {
            let err = settings(&[("TOLLGATE_ADDR", bad)]).unwrap_err();
            assert_eq!((err.name, err.value.as_str()), ("TOLLGATE_ADDR", bad));
            assert!(
                err.to_string().starts_with(&format!(
                    "TOLLGATE_ADDR={bad:?} is not usable: expected an IP address"
                )),
                "{err}"
            );
        }
    }

    #[test]
    fn a_bad_header_mode_is_refused() {
        let err = settings(&[("TOLLGATE_HEADERS", "IETF")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"TOLLGATE_HEADERS="IETF" is not usable: expected one of ratelimit, ietf, legacy, off"#
        );
    }

    #[test]
    fn a_bad_proxy_network_is_refused_naming_the_entry() {
        let err = settings(&[("TOLLGATE_TRUSTED_PROXIES", "10.0.0.0/8,not-a-cidr")]).unwrap_err();
        assert_eq!(err.name, "TOLLGATE_TRUSTED_PROXIES");
        assert_eq!(err.value, "10.0.0.0/8,not-a-cidr");
        assert!(
            err.to_string()
                .ends_with(r#""not-a-cidr" is neither a network (a.b.c.d/n, x::/n) nor an address"#),
            "{err}"
        );
    }
}
