//! What every kind of connection (standalone, background, Sentinel) shares
//! when it first contacts a server: the connection manager's settings, the
//! delays between background attempts, and the errors of a first contact
//! (an invalid URL, no answer, something that is not Redis).

use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use tollgate::__private::redact_url;

use crate::error::{ConnectError, ConnectErrorKind};

/// The first attempt waits this long after a failure before the next;
/// each further failure doubles the wait, up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(50);

/// The longest wait between two background attempts (to connect, or to find
/// the primary through Sentinel): a server that comes up is used at most
/// this long after.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// The pauses between the attempts of a background task: [`RETRY_MIN`]
/// after the first failure, doubling up to [`RETRY_MAX`].
pub(crate) struct Backoff {
    pause: Duration,
}

impl Backoff {
    /// A backoff before its first pause.
    pub(crate) fn new() -> Self {
        Self { pause: RETRY_MIN }
    }

    /// Waits the current pause, then doubles the next one (up to the most).
    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(RETRY_MAX);
    }
}

/// The configuration of every standalone connection manager (see
/// [`Endpoint::connect`]): no retries within one reconnection, each
/// bounded by `connect_timeout`, and no response timeout of its own (the
/// decision's timeout applies).
pub(crate) fn manager_config(connect_timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_number_of_retries(0)
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(None)
}

pub(crate) fn invalid_url(url: &str, err: redis::RedisError) -> ConnectError {
    ConnectError::new(
        ConnectErrorKind::InvalidUrl,
        redact_url(url),
        format!(
            "not a valid Redis URL ({err}); expected redis://[user:password@]host[:port][/db], \
             rediss://… for TLS, or redis+unix:///path/to/socket[?db=N]"
        ),
    )
    .with_source(err)
}

pub(crate) fn timed_out(target: &str, after: Duration) -> ConnectError {
    ConnectError::new(
        ConnectErrorKind::Timeout,
        target,
        format!("no answer within {after:?}; is this a Redis server, and is it reachable?"),
    )
}

pub(crate) fn check_pong(target: &str, pong: &str) -> Result<(), ConnectError> {
    if pong == "PONG" {
        Ok(())
    } else {
        Err(ConnectError::new(
            ConnectErrorKind::NotRedis,
            target,
            format!("PING was answered with {pong:?} instead of PONG"),
        ))
    }
}
