//! Script calls as the connection sends them: a `redis::ScriptInvocation`,
//! or an [`Eval`], an `EVALSHA` written straight into one command buffer
//! (no per-argument vectors, no copy into a second command) whose reply is
//! read as it arrives.

use std::future::Future;

use redis::aio::ConnectionManager;
use redis::{Cmd, Pipeline, RedisResult, Script, ScriptInvocation, ToRedisArgs, Value};

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

/// `ASKING`, then the call `fill` adds, in one pipeline; the script is
/// loaded with `load` if Redis does not know it.
async fn asking(
    conn: &mut ConnectionManager,
    fill: impl FnOnce(&mut Pipeline),
    load: &ScriptInvocation<'_>,
) -> RedisResult<Value> {
    let mut pipe = redis::pipe();
    fill(pipe.cmd("ASKING").ignore());
    match pipe.query_async::<(Value,)>(conn).await {
        Err(e) if is_noscript(&e) => {
            load.load_async(conn).await?;
            pipe.query_async::<(Value,)>(conn).await.map(|(v,)| v)
        }
        r => r.map(|(v,)| v),
    }
}

impl Call for ScriptInvocation<'_> {
    async fn send(&self, conn: &mut ConnectionManager, ask: bool) -> RedisResult<Value> {
        if ask {
            let fill = |p: &mut Pipeline| {
                p.invoke_script(self);
            };
            asking(conn, fill, self).await
        } else {
            self.invoke_async(conn).await
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
    script: &'static Script,
}

impl Eval {
    /// A call of `script` with `keys` keys (to be added first, then the
    /// arguments), with room for `args` more arguments of `bytes` bytes.
    pub(crate) fn new(script: &'static Script, keys: usize, args: usize, bytes: usize) -> Self {
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
}

impl Call for Eval {
    async fn send(&self, conn: &mut ConnectionManager, ask: bool) -> RedisResult<Value> {
        if ask {
            let call = self.cmd.clone();
            let fill = |p: &mut Pipeline| {
                p.add_command(call);
            };
            return asking(conn, fill, &self.script.prepare_invoke()).await;
        }
        match conn
            .send_packed_command(&self.cmd)
            .await
            .and_then(Value::extract_error)
        {
            Err(e) if is_noscript(&e) => {
                self.script.prepare_invoke().load_async(conn).await?;
                conn.send_packed_command(&self.cmd)
                    .await
                    .and_then(Value::extract_error)
            }
            r => r,
        }
    }
}
