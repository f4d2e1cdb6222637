//! Commands on a cluster, following the answers of a node that did not run
//! them: a redirection to another node (`MOVED`, `ASK`) or a request to
//! wait (`TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `READONLY`
//! from a demoted primary). redis-rs's cluster client would follow them
//! too, but its retries also resend a command after a lost connection,
//! when the node may have run it: a decision, a refund or a report applied
//! twice. Its retries are off; only these answers, which say the command
//! did not run, send it again.

use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, FromRedisValue, RedisError, RedisResult, RetryMethod, Value};

/// The most redirections and waits one command follows; the caller's
/// timeout bounds them in time as well.
const MAX_RESENDS: u32 = 8;

/// How long to wait before resending after a node asked to: doubled each
/// time from 10 ms, at most 200 ms.
fn wait(attempt: u32) -> Duration {
    Duration::from_millis((10u64 << attempt.min(5)).min(200))
}

/// Runs `cmd` on the cluster at `route` (by the command's key when
/// `None`), following redirections and waits, never resending a command
/// that may have run.
pub(crate) async fn cluster_query<T: FromRedisValue>(
    conn: &ClusterConnection,
    cmd: &Cmd,
    route: Option<SingleNodeRoutingInfo>,
) -> RedisResult<T> {
    let mut conn = conn.clone();
    let mut target = route.clone();
    let mut asking = false;
    for attempt in 0..=MAX_RESENDS {
        let reply = send(&mut conn, cmd, target.as_ref(), asking).await;
        let err = match reply {
            Ok(value) => return T::from_redis_value(value).map_err(Into::into),
            Err(err) => err,
        };
        if attempt == MAX_RESENDS {
            return Err(err);
        }
        match err.retry_method() {
            RetryMethod::MovedRedirect | RetryMethod::AskRedirect => {
                let Some(node) = redirected_to(&err) else {
                    return Err(err);
                };
                asking = matches!(err.retry_method(), RetryMethod::AskRedirect);
                target = Some(node);
            }
            RetryMethod::WaitAndRetry | RetryMethod::RefreshSlotsAndRetry => {
                tokio::time::sleep(wait(attempt)).await;
                // Routed afresh: the client has refreshed its slots.
                target = route.clone();
                asking = false;
            }
            _ => return Err(err),
        }
    }
    unreachable!("the last attempt returns")
}

/// One send of `cmd`: by its key, or to `target`, after `ASKING` when
/// following an `ASK` redirection.
async fn send(
    conn: &mut ClusterConnection,
    cmd: &Cmd,
    target: Option<&SingleNodeRoutingInfo>,
    asking: bool,
) -> RedisResult<Value> {
    match (target, asking) {
        (None, _) => cmd.query_async::<Value>(conn).await?.extract_error(),
        (Some(node), false) => conn
            .route_command(cmd.clone(), RoutingInfo::SingleNode(node.clone()))
            .await?
            .extract_error(),
        (Some(node), true) => {
            let mut pipe = redis::pipe();
            pipe.cmd("ASKING").add_command(cmd.clone());
            let mut replies = conn.route_pipeline(pipe, 1, 1, node.clone()).await?;
            replies
                .pop()
                .ok_or_else(|| RedisError::from((redis::ErrorKind::Client, "no reply after ASKING")))?
                .extract_error()
        }
    }
}

/// The node a `MOVED` or `ASK` answer names.
fn redirected_to(err: &RedisError) -> Option<SingleNodeRoutingInfo> {
    let (addr, _slot) = err.redirect_node()?;
    let (host, port) = addr.rsplit_once(':')?;
    Some(SingleNodeRoutingInfo::ByAddress {
        host: host.to_owned(),
        port: port.parse().ok()?,
    })
}
