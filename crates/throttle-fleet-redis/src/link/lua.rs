//! A Lua script with its body: what an [`Eval`](super::Eval) sends by hash
//! (`EVALSHA`) and, when the server's script cache does not hold it
//! (`NOSCRIPT`: a restart, a failover to a replica that never ran it, a
//! `SCRIPT FLUSH`, a serverless proxy's other backend), sends again whole
//! with `EVAL`, which runs it and caches it in one round trip. Loading it
//! first (`SCRIPT LOAD`, then `EVALSHA` again) would take two, and a flush
//! or a proxy between the two would make the second fail as well.

use std::ops::Deref;

use redis::Script;

/// A script and its body. Derefs to [`redis::Script`] (its hash).
pub(crate) struct LuaScript {
    script: Script,
    body: Box<str>,
}

impl LuaScript {
    pub(crate) fn new(body: &str) -> Self {
        Self {
            script: Script::new(body),
            body: body.into(),
        }
    }

    /// The script's source, as `EVAL` sends it.
    pub(crate) fn body(&self) -> &str {
        &self.body
    }
}

impl Deref for LuaScript {
    type Target = Script;

    fn deref(&self) -> &Script {
        &self.script
    }
}
