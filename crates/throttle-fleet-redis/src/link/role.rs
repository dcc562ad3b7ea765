//! Whether a node is a writable primary, not only whether it answers.
//!
//! A replica answers `PING`, so a probe of `PING`s alone closes the
//! breaker of a primary demoted in a failover (a managed service's name
//! that moved to the promoted replica, or `REPLICAOF` on the server), and
//! every script then fails with `READONLY` again. The probe and the
//! heartbeat ask `ROLE` as well; a node whose ACL user may not run `ROLE`
//! is asked `INFO replication` instead (its `role:` line), and one that
//! may run neither is taken at its word (it answered, which is all a
//! probe could tell before).
//!
//! Replies that say the node no longer takes writes (`READONLY`,
//! `MASTERDOWN`, `LOADING`) on the request path make its connections be
//! dialled again ([`Node::redial`](super::node::Node::redial)): a managed
//! endpoint's name now points at another server, which only a new dial
//! reaches.

use std::time::Duration;

use redis::{ErrorKind, ServerErrorKind, Value};

use super::node::Node;

/// What a node says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// `master`: it takes writes.
    Primary,
    /// `slave` (a replica), `sentinel`, or anything else that is not a
    /// primary.
    Other,
    /// It did not answer within the patience, or refused both questions
    /// for a reason other than permissions.
    Silent,
}

/// Whether `error` says the node does not take writes now: a replica
/// (`READONLY`), a replica whose primary is gone (`MASTERDOWN`), or a
/// server still loading its data (`LOADING`).
pub(crate) fn is_not_writable(error: &redis::RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Server(
            ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown | ServerErrorKind::BusyLoading
        )
    )
}

/// What `node` says it is, asked on one of its request-path connections
/// within `patience`: `ROLE`, or `INFO replication` if its ACL user may
/// not run `ROLE`; a node that may run neither counts as a primary.
pub(crate) async fn role(node: &Node, patience: Duration) -> Role {
    let mut conn = node.conn();
    let ask = async {
        // A connection lost earlier is dialled again by the command that
        // finds it lost, which fails at once: that one is sent once more.
        let first = redis::cmd("ROLE").query_async::<Value>(&mut conn).await;
        let reply = match first {
            Err(e) if e.kind() != ErrorKind::Server(ServerErrorKind::NoPerm) && !e.is_timeout() => {
                redis::cmd("ROLE").query_async::<Value>(&mut conn).await
            }
            r => r,
        };
        match reply {
            Ok(reply) => Ok(role_of_reply(&reply)),
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) => {
                let info = redis::cmd("INFO")
                    .arg("replication")
                    .query_async::<Value>(&mut conn)
                    .await;
                match info {
                    Ok(reply) => Ok(role_of_info(&reply)),
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) => {
                        Ok(Role::Primary)
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    };
    match tokio::time::timeout(patience, ask).await {
        Ok(Ok(role)) => role,
        _ => Role::Silent,
    }
}

/// A `ROLE` reply: an array whose first element names the role.
fn role_of_reply(reply: &Value) -> Role {
    let Value::Array(parts) = reply else {
        return Role::Other;
    };
    match parts.first() {
        Some(Value::BulkString(b)) if b.as_slice() == b"master" => Role::Primary,
        Some(Value::SimpleString(s)) if s == "master" => Role::Primary,
        _ => Role::Other,
    }
}

/// An `INFO replication` reply: its `role:` line.
fn role_of_info(reply: &Value) -> Role {
    let text = match reply {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        _ => return Role::Other,
    };
    let role = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("role:"));
    if role == Some("master") {
        Role::Primary
    } else {
        Role::Other
    }
}

#[cfg(test)]
mod tests;
