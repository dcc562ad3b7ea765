//! Script calls as the connection sends them: a `redis::ScriptInvocation`,
//! or an [`Eval`], an `EVALSHA` written straight into one command buffer
//! (no per-argument vectors, no copy into a second command) whose reply is
//! read as it arrives. A script the server's cache has lost (`NOSCRIPT`)
//! is sent again whole: one round trip more, never a failure.

use std::future::Future;

use redis::aio::ConnectionManager;
use redis::{Arg, Cmd, RedisResult, ScriptInvocation, ToRedisArgs, Value};

use super::LuaScript;

/// A script call that can be sent on a connection.
pub(crate) trait Call: Sync {
    /// Sends the call on `conn` (after `ASKING` if `asking`: a slot in
    /// migration), loading the script first if Redis does not know it.
    /// Errors in the reply come back as errors.
    fn send<'a>(
        &'a self,
        conn: &'a mut ConnectionManager,
        asking: bool,
    ) -> impl Future<Output = RedisResult<Value>> + Send + 'a;
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// How many times a [`ScriptInvocation`] is sent (each a load and a call
/// again after `NOSCRIPT`) before its `NOSCRIPT` is the answer.
const INVOCATION_TRIES: usize = 3;

/// A `redis::ScriptInvocation` (the public connection's calls): its body is
/// not to be had, so after `NOSCRIPT` it is loaded (`SCRIPT LOAD`) and sent
/// again by hash, as redis-rs does; a cache emptied again in between (a
/// `SCRIPT FLUSH`, a proxy that sent the load to another backend) is met
/// by trying again, [`INVOCATION_TRIES`] times in all.
impl Call for ScriptInvocation<'_> {
    async fn send(&self, conn: &mut ConnectionManager, ask: bool) -> RedisResult<Value> {
        let mut tries = 1;
        loop {
            let reply = if ask {
                let mut pipe = redis::pipe();
                pipe.cmd("ASKING").ignore().invoke_script(self);
                match pipe.query_async::<(Value,)>(conn).await {
                    Err(e) if is_noscript(&e) => {
                        self.load_async(conn).await?;
                        pipe.query_async::<(Value,)>(conn).await.map(|(v,)| v)
                    }
                    r => r.map(|(v,)| v),
                }
            } else {
                self.invoke_async(conn).await
            };
            match reply {
                Err(e) if is_noscript(&e) && tries < INVOCATION_TRIES => tries += 1,
                r => return r,
            }
        }
    }
}

/// A plain command (`HDEL`, `GET`): sent as is, after `ASKING` in one
/// pipeline if `asking`.
impl Call for Cmd {
    async fn send(&self, conn: &mut ConnectionManager, ask: bool) -> RedisResult<Value> {
        if ask {
            let mut pipe = redis::pipe();
            pipe.cmd("ASKING").ignore().add_command(self.clone());
            return pipe.query_async::<(Value,)>(conn).await.map(|(v,)| v);
        }
        conn.send_packed_command(self)
            .await
            .and_then(Value::extract_error)
    }
}

/// An `EVALSHA` of a script, its keys and arguments written into the
/// command as they are added.
pub(crate) struct Eval {
    cmd: Cmd,
    script: &'static LuaScript,
}

impl Eval {
    /// A call of `script` with `keys` keys (to be added first, then the
    /// arguments), with room for `args` more arguments of `bytes` bytes.
    pub(crate) fn new(script: &'static LuaScript, keys: usize, args: usize, bytes: usize) -> Self {
        let mut cmd = Cmd::with_capacity(3 + args, 64 + bytes);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        Self { cmd, script }
    }

    /// Adds a key or an argument.
    #[inline]
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// The same call with the script's body in place of its hash: `EVAL`
    /// runs it and caches it, in one round trip.
    fn whole(&self) -> Cmd {
        let args = self.cmd.args_iter();
        let mut cmd = Cmd::with_capacity(args.len(), self.script.body().len() + 256);
        cmd.arg("EVAL").arg(self.script.body());
        for arg in args.skip(2) {
            if let Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
        }
        cmd
    }
}

/// `EVALSHA`, and after `NOSCRIPT` the same call with `EVAL` (the script's
/// body): one round trip more, and no second `NOSCRIPT` to meet, since the
/// `EVAL` carries what it runs.
impl Call for Eval {
    async fn send(&self, conn: &mut ConnectionManager, ask: bool) -> RedisResult<Value> {
        match self.cmd.send(conn, ask).await {
            Err(e) if is_noscript(&e) => self.whole().send(conn, ask).await,
            r => r,
        }
    }
}

#[cfg(test)]
mod tests;
