//! TCP settings of every connection the backend opens (to a server, to
//! cluster nodes, to sentinels and the primary they name): keepalive
//! probes and `TCP_USER_TIMEOUT`, so that a connection whose packets are
//! silently dropped is closed and replaced within seconds instead of the
//! kernel's default of about fifteen minutes.

use std::time::Duration;

use redis::io::tcp::socket2::TcpKeepalive;
use redis::io::tcp::TcpSettings;

use crate::error::{ConnectError, ConnectErrorKind};

/// How long a connection may stay idle before the first keepalive probe,
/// unless configured otherwise.
pub const DEFAULT_TCP_KEEPALIVE: Duration = Duration::from_secs(10);

/// The time between two unanswered keepalive probes, unless configured
/// otherwise.
pub const DEFAULT_TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// How many unanswered keepalive probes close an idle connection, unless
/// configured otherwise.
pub const DEFAULT_TCP_KEEPALIVE_RETRIES: u32 = 3;

/// How long sent data may stay unacknowledged before the connection is
/// closed (`TCP_USER_TIMEOUT`, Linux only), unless configured otherwise.
pub const DEFAULT_TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest keepalive idle time and interval Linux accepts, in seconds.
const MAX_KEEPALIVE_SECS: u64 = 32_767;

/// The most keepalive probes Linux accepts.
const MAX_KEEPALIVE_RETRIES: u32 = 127;

/// Keepalive and user timeout, as configured on the builder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TcpOptions {
    /// Idle time before the first probe; zero turns keepalive off.
    pub(crate) keepalive: Duration,
    pub(crate) keepalive_interval: Duration,
    pub(crate) keepalive_retries: u32,
    /// Zero leaves the system's default (retransmissions for about fifteen
    /// minutes).
    pub(crate) user_timeout: Duration,
}

impl Default for TcpOptions {
    fn default() -> Self {
        Self {
            keepalive: DEFAULT_TCP_KEEPALIVE,
            keepalive_interval: DEFAULT_TCP_KEEPALIVE_INTERVAL,
            keepalive_retries: DEFAULT_TCP_KEEPALIVE_RETRIES,
            user_timeout: DEFAULT_TCP_USER_TIMEOUT,
        }
    }
}

impl TcpOptions {
    /// The settings for redis-rs, or an error naming the setter whose value
    /// the kernel would refuse (keepalive times are whole seconds from 1 to
    /// 32767, rounded up; at most 127 probes; a user timeout of at most
    /// `i32::MAX` milliseconds).
    pub(crate) fn settings(&self) -> Result<TcpSettings, ConnectError> {
        let mut settings = TcpSettings::default();
        if !self.keepalive.is_zero() {
            let keepalive = TcpKeepalive::new()
                .with_time(whole_seconds("tcp_keepalive", self.keepalive)?)
                .with_interval(whole_seconds("tcp_keepalive_interval", self.keepalive_interval)?)
                .with_retries(self.retries()?);
            settings = settings.set_keepalive(keepalive);
        }
        if !self.user_timeout.is_zero() {
            if self.user_timeout.as_millis() > i32::MAX as u128 {
                return Err(invalid(
                    "tcp_user_timeout",
                    format!(
                        "{:?} exceeds the largest TCP_USER_TIMEOUT, {} ms (about 24 days)",
                        self.user_timeout,
                        i32::MAX
                    ),
                ));
            }
            #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
            {
                settings = settings.set_user_timeout(self.user_timeout.max(Duration::from_millis(1)));
            }
        }
        Ok(settings)
    }

    fn retries(&self) -> Result<u32, ConnectError> {
        match self.keepalive_retries {
            0 => Err(invalid(
                "tcp_keepalive_retries",
                "must be at least 1 (turn keepalive off with tcp_keepalive(Duration::ZERO))",
            )),
            n if n > MAX_KEEPALIVE_RETRIES => Err(invalid(
                "tcp_keepalive_retries",
                format!("{n} exceeds {MAX_KEEPALIVE_RETRIES}, the most keepalive probes the kernel accepts"),
            )),
            n => Ok(n),
        }
    }
}

/// `value` rounded up to whole seconds, within what the kernel accepts.
fn whole_seconds(setter: &str, value: Duration) -> Result<Duration, ConnectError> {
    let secs = value.as_secs() + u64::from(value.subsec_nanos() > 0);
    if secs == 0 {
        return Err(invalid(setter, "must be at least one second"));
    }
    if secs > MAX_KEEPALIVE_SECS {
        return Err(invalid(
            setter,
            format!(
                "{value:?} exceeds {MAX_KEEPALIVE_SECS} s, the largest keepalive time the kernel accepts"
            ),
        ));
    }
    Ok(Duration::from_secs(secs))
}

fn invalid(setter: &str, message: impl Into<String>) -> ConnectError {
    ConnectError::new(ConnectErrorKind::InvalidSetting, setter, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_the_kernel_refuses_are_errors_naming_the_setter() {
        assert!(TcpOptions::default().settings().is_ok());
        let off = TcpOptions {
            keepalive: Duration::ZERO,
            keepalive_interval: Duration::ZERO,
            keepalive_retries: 0,
            user_timeout: Duration::ZERO,
        };
        let settings = off.settings().unwrap();
        assert!(settings.keepalive().is_none());
        for (options, setter) in [
            (
                TcpOptions {
                    keepalive: Duration::from_secs(40_000),
                    ..TcpOptions::default()
                },
                "tcp_keepalive",
            ),
            (
                TcpOptions {
                    keepalive_interval: Duration::ZERO,
                    ..TcpOptions::default()
                },
                "tcp_keepalive_interval",
            ),
            (
                TcpOptions {
                    keepalive_retries: 128,
                    ..TcpOptions::default()
                },
                "tcp_keepalive_retries",
            ),
            (
                TcpOptions {
                    user_timeout: Duration::from_secs(30 * 86_400),
                    ..TcpOptions::default()
                },
                "tcp_user_timeout",
            ),
        ] {
            let err = options.settings().unwrap_err();
            assert_eq!(err.kind(), ConnectErrorKind::InvalidSetting);
            assert_eq!(err.target(), setter);
            assert!(err.to_string().contains(setter), "{err}");
        }
    }

    #[test]
    fn keepalive_times_round_up_to_whole_seconds() {
        assert_eq!(
            whole_seconds("tcp_keepalive", Duration::from_millis(1_500)).unwrap(),
            Duration::from_secs(2)
        );
        assert_eq!(
            whole_seconds("tcp_keepalive", Duration::from_millis(1)).unwrap(),
            Duration::from_secs(1)
        );
    }
}
