//! `PING`s: what the probe sends, and the heartbeat when its `ROLE` was late.

use std::time::Duration;

use super::node::Node;

/// Whether `node` answers on every connection it has, the request path's
/// and the off-path one, each within `patience`. A breaker closes, and an
/// approximate bucket's flushes resume, only on this: a connection lost in
/// the outage is dialled again here, not by the first request or flush
/// after it, which would fail and put the node straight back in its
/// degraded state for another probe interval.
pub(super) async fn ping_every(node: &Node, patience: Duration) -> bool {
    let pings = node.connections().map(|conn| ping_on(conn, patience));
    futures_util::future::join_all(pings)
        .await
        .into_iter()
        .all(|answered| answered)
}

/// One `PING` on `conn` within `patience`. A lost connection is dialled
/// again only by the command that finds it lost, and that command fails at
/// once; so a failure within the deadline is tried once more, on the
/// connection it dialled. A round thus says whether Redis answers now,
/// not whether it answered when the last round ran: without this, every
/// recovery took one probe interval more than it needed.
pub(super) async fn ping_on(mut conn: redis::aio::ConnectionManager, patience: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + patience;
    for _ in 0..2 {
        let cmd = redis::cmd("PING");
        match tokio::time::timeout_at(deadline, cmd.query_async::<String>(&mut conn)).await {
            Ok(Ok(_)) => return true,
            Ok(Err(_)) => continue,
            Err(_) => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests;
