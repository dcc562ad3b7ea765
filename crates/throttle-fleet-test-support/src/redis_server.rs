//! Test support: real `redis-server` processes, standalone and cluster, that
//! each test starts for itself on free ports and controls with signals.
//!
//! * [`RedisServer::start`] spawns one `redis-server` bound to 127.0.0.1 on a
//!   free port with persistence off and its own temp dir, and returns once the
//!   process answers `PING` (checked over a plain TCP connection speaking
//!   RESP, which also checks that the answer comes from *this* process).
//!   [`RedisServer::stop`] / [`RedisServer::resume`] send `SIGSTOP` /
//!   `SIGCONT` (the process hangs; its connections stay open),
//!   [`RedisServer::kill`] sends `SIGKILL`, [`RedisServer::restart`] brings
//!   it back on the same port (with empty data).
//! * Cluster nodes are the same processes, started by
//!   [`RedisCluster`](crate::cluster::RedisCluster).
//!
//! Ports: random, checked free by binding, and taken *below* the kernel's
//! ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`), so that no
//! outgoing connection (a client, `redis-cli`, the cluster bus) can grab a
//! port between a kill and a restart on that same port. Standalone servers
//! use 10000..20000, cluster nodes 20000..(ephemeral low - 10000) and their
//! bus ports (port + 10000) lie above 30000, so the two kinds never collide.
//! Ports held by live servers of this process are reserved in a process-wide
//! set (safe for parallel tests in one binary); a clash with another process
//! (another test binary) shows up as "Address already in use" in the
//! server's log and is retried on another port. The Redis on 6379 is never
//! touched: nothing here connects to a port it did not start a server on.
//!
//! Temp dirs: `<temp>/throttle-fleet-redis-<test pid>-<port>-<counter>`, one per
//! server (config, log, `nodes.conf`), removed on drop; dirs left by test
//! processes that died without dropping (killed, timed out) are removed the
//! next time a test process starts a server.
//!
//! ```ignore
//! let redis = RedisServer::start();          // redis.url() for the client
//! redis.stop();                              // hung: requests time out
//! redis.resume();
//! assert_eq!(redis.command_count("evalsha"), 1);
//! ```
//!
//! The binary is `redis-server`, or the one `THROTTLE_REDIS_SERVER` names
//! (a `valkey-server`, an older Redis): see
//! [`server_binary`](crate::server_binary).
//!
//! Signals go through the `kill` command (the workspace forbids `unsafe`).
//! Every wait has a deadline and panics with the server's log tail.
//! Everything is synchronous std code; async tests may call it directly (it
//! blocks for milliseconds) or from `spawn_blocking` for the slow waits.

use std::collections::HashSet;
use std::collections::hash_map::RandomState;
use std::fs::{self, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::redis_tls::ServerTls;
pub use crate::resp::Reply;
use crate::resp::{read_reply, request};

/// How long a server may take to answer `PING` after being spawned.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Default timeout of [`RedisServer::cli`].
const CLI_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of one harness query (connect, write, each read).
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);
/// Cluster bus port = client port + this.
const BUS_OFFSET: u16 = 10_000;
/// Poll interval of every wait loop.
const POLL: Duration = Duration::from_millis(20);
/// How many ports [`RedisServer::start`] tries before giving up.
const START_ATTEMPTS: usize = 20;

/// Temp dirs are `<temp>/throttle-fleet-redis-<test pid>-<port>-<counter>`.
const DIR_PREFIX: &str = "throttle-fleet-redis-";

static COUNTER: AtomicU64 = AtomicU64::new(0);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while holding a lock must not break the others
    // (or the Drop that cleans up after it).
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---------------------------------------------------------------- ports ----

fn reserved_ports() -> MutexGuard<'static, HashSet<u16>> {
    static RESERVED: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    lock(RESERVED.get_or_init(|| Mutex::new(HashSet::new())))
}

fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.finish()
}

/// Lowest port of the kernel's ephemeral range (used for outgoing connections).
fn ephemeral_low() -> u16 {
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// Picks a port that is free now and that no server of this process holds,
/// and reserves it (and its bus port for a cluster node) until
/// [`release_port`].
fn reserve_port(cluster: bool) -> u16 {
    let low = ephemeral_low();
    let (from, to) = if cluster {
        (20_000u16, low.saturating_sub(BUS_OFFSET))
    } else {
        (10_000u16, low.min(20_000))
    };
    for _ in 0..10_000 {
        let port = if to > from.saturating_add(500) {
            from + (random_u64() % u64::from(to - from)) as u16
        } else {
            // Unusual ephemeral range: let the kernel choose.
            match TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()) {
                Ok(addr) => addr.port(),
                Err(_) => continue,
            }
        };
        if port == 6379 || (cluster && port > u16::MAX - BUS_OFFSET) {
            continue;
        }
        let mut reserved = reserved_ports();
        let bus = port.wrapping_add(BUS_OFFSET);
        if reserved.contains(&port) || (cluster && reserved.contains(&bus)) {
            continue;
        }
        if !port_is_free(port) || (cluster && !port_is_free(bus)) {
            continue;
        }
        reserved.insert(port);
        if cluster {
            reserved.insert(bus);
        }
        return port;
    }
    panic!("no free port found for redis-server (cluster: {cluster})");
}

fn release_port(port: u16, cluster: bool) {
    let mut reserved = reserved_ports();
    reserved.remove(&port);
    if cluster {
        reserved.remove(&port.wrapping_add(BUS_OFFSET));
    }
}

/// Sends one command on a fresh connection and reads its reply.
fn query_port(port: u16, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    stream.write_all(&request(args))?;
    read_reply(&mut BufReader::new(stream))
}

/// The value of `field:` in an `INFO` / `CLUSTER INFO` text.
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':').map(str::trim))
}

// ------------------------------------------------------------ processes ----

/// Runs a command with a deadline, capturing stdout and stderr.
pub(crate) fn run_with_timeout(mut cmd: Command, timeout: Duration) -> Result<Output, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot spawn {cmd:?}: {e}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!("{cmd:?} did not finish within {timeout:?}"));
            }
            Ok(None) => thread::sleep(Duration::from_millis(5)),
            Err(e) => break Err(format!("waiting for {cmd:?}: {e}")),
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    status.map(|status| Output {
        status,
        stdout,
        stderr,
    })
}

/// Sends a signal (`STOP`, `CONT`, ...) with the `kill` command.
fn send_signal(pid: u32, signal: &str) {
    let output = run_with_timeout(
        {
            let mut cmd = Command::new("kill");
            cmd.args(["-s", signal, &pid.to_string()]);
            cmd
        },
        Duration::from_secs(5),
    )
    .unwrap_or_else(|e| panic!("kill -s {signal} {pid}: {e}"));
    assert!(
        output.status.success(),
        "kill -s {signal} {pid} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The state letter of a process in `/proc/<pid>/stat` (`R`, `S`, `T`, `Z`...).
fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces.
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

fn wait_for_state(pid: u32, stopped: bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match proc_state(pid) {
            None => return, // no /proc: trust the signal
            Some(state) if (state == 'T') == stopped => return,
            Some(_) => thread::sleep(Duration::from_millis(2)),
        }
    }
    panic!(
        "process {pid} did not become {}",
        if stopped { "stopped" } else { "running" }
    );
}

// --------------------------------------------------------- RedisServer ----

/// Why a spawn attempt failed.
enum SpawnError {
    /// The port was taken by someone else in the meantime: try again.
    AddrInUse(String),
    /// Anything else: give up with this message.
    Fatal(String),
}

struct ProcessState {
    child: Option<Child>,
    pid: u32,
    stopped: bool,
}

/// One `redis-server` process owned by a test. All methods take `&self`, so a
/// server can be shared (e.g. in an `Arc`) between a test and the tasks that
/// fail it. Dropping it kills the process and removes its temp dir.
pub struct RedisServer {
    port: u16,
    cluster: bool,
    /// Runs as a sentinel (`--sentinel`, on a config file of its own in
    /// `dir`, which Sentinel rewrites with what it learns).
    sentinel: bool,
    dir: PathBuf,
    extra_args: Vec<String>,
    /// TLS only (no plain port), when set.
    tls: Option<ServerTls>,
    state: Mutex<ProcessState>,
}

impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl RedisServer {
    /// Starts a standalone server on a free port and waits until it answers.
    pub fn start() -> Self {
        Self::start_with_args(&[])
    }

    /// Like [`start`](Self::start), with extra `redis-server` arguments
    /// appended (e.g. `["--maxmemory", "10mb"]`).
    pub fn start_with_args(extra_args: &[&str]) -> Self {
        Self::launch(false, extra_args.iter().map(|s| s.to_string()).collect())
    }

    /// Like [`start_with_args`](Self::start_with_args), speaking TLS only
    /// (`--port 0 --tls-port <port>`): [`url`](Self::url) is `rediss://`,
    /// and the harness's own queries and `redis-cli` go over TLS.
    pub fn start_tls(tls: ServerTls, extra_args: &[&str]) -> Self {
        Self::launch_with(
            false,
            false,
            extra_args.iter().map(|s| s.to_string()).collect(),
            Some(tls),
        )
    }

    pub(crate) fn launch(cluster: bool, extra_args: Vec<String>) -> Self {
        Self::launch_with(cluster, false, extra_args, None)
    }

    /// A sentinel (`redis-server <dir>/sentinel.conf --sentinel`), its
    /// `sentinel monitor ...` and other settings in `extra_args`; over TLS
    /// only when `tls` is given.
    pub(crate) fn launch_sentinel(extra_args: Vec<String>, tls: Option<ServerTls>) -> Self {
        Self::launch_with(false, true, extra_args, tls)
    }

    pub(crate) fn launch_with(
        cluster: bool,
        sentinel: bool,
        extra_args: Vec<String>,
        tls: Option<ServerTls>,
    ) -> Self {
        remove_stale_dirs();
        let mut last_log = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = reserve_port(cluster);
            let dir = std::env::temp_dir().join(format!(
                "{DIR_PREFIX}{}-{}-{}",
                std::process::id(),
                port,
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            if let Err(e) = fs::create_dir_all(&dir) {
                release_port(port, cluster);
                panic!("cannot create {}: {e}", dir.display());
            }
            let server = RedisServer {
                port,
                cluster,
                sentinel,
                dir,
                extra_args: extra_args.clone(),
                tls: tls.clone(),
                state: Mutex::new(ProcessState {
                    child: None,
                    pid: 0,
                    stopped: false,
                }),
            };
            match server.spawn_and_wait() {
                Ok(()) => return server,
                // Dropping `server` releases the port and removes the dir.
                Err(SpawnError::AddrInUse(log)) => last_log = log,
                Err(SpawnError::Fatal(message)) => panic!("{message}"),
            }
        }
        panic!(
            "redis-server: every one of {START_ATTEMPTS} ports was taken; last log:\n{last_log}"
        );
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    fn args(&self) -> Vec<String> {
        let dir = self.dir.to_string_lossy().into_owned();
        let mut args: Vec<String> = Vec::new();
        if self.sentinel {
            let conf = self.dir.join("sentinel.conf");
            args.push(conf.to_string_lossy().into_owned());
            args.push("--sentinel".to_owned());
        }
        args.extend(match &self.tls {
            Some(tls) => tls.server_args(self.port, self.cluster),
            None => vec!["--port".to_owned(), self.port.to_string()],
        });
        args.extend(
            [
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                &dir,
                "--daemonize",
                "no",
                // Replicas get their first sync at once instead of after 5 s.
                "--repl-diskless-sync-delay",
                "0",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        // A sentinel restarted keeps what it learnt in its config file,
        // `monitor` lines included: given again, they would be refused as
        // duplicates.
        let learnt = self.sentinel
            && fs::metadata(self.dir.join("sentinel.conf")).is_ok_and(|m| m.len() > 0);
        if !learnt {
            args.extend(self.extra_args.iter().cloned());
        }
        args
    }

    /// Spawns the process and waits until it answers `PING` as itself.
    fn spawn_and_wait(&self) -> Result<(), SpawnError> {
        if self.sentinel {
            // Sentinel needs a config file it can rewrite; kept across
            // restarts (it holds what the sentinel learnt).
            let conf = self.dir.join("sentinel.conf");
            if !conf.exists() {
                fs::write(&conf, "").map_err(|e| {
                    SpawnError::Fatal(format!("cannot write {}: {e}", conf.display()))
                })?;
            }
        }
        let log_path = self.log_path();
        let log_offset = fs::metadata(&log_path).map_or(0, |m| m.len());
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| SpawnError::Fatal(format!("cannot open {}: {e}", log_path.display())))?;
        let log_err = log
            .try_clone()
            .map_err(|e| SpawnError::Fatal(format!("cannot clone log handle: {e}")))?;
        let child = crate::server_binary::server()
            .args(self.args())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| {
                SpawnError::Fatal(format!("cannot spawn redis-server (is it installed?): {e}"))
            })?;
        let pid = child.id();
        {
            let mut state = lock(&self.state);
            state.child = Some(child);
            state.pid = pid;
            state.stopped = false;
        }
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.reap_if_exited() {
                let new_log = self.log_since(log_offset);
                return Err(if new_log.contains("Address already in use") {
                    SpawnError::AddrInUse(new_log)
                } else {
                    SpawnError::Fatal(format!(
                        "redis-server on port {} exited ({status}) before answering PING; log:\n{}",
                        self.port,
                        tail(&new_log, 40)
                    ))
                });
            }
            if self.answers_as(pid) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(SpawnError::Fatal(format!(
                    "redis-server on port {} did not answer PING within {START_TIMEOUT:?}; log:\n{}",
                    self.port,
                    tail(&self.log_since(log_offset), 40)
                )));
            }
            thread::sleep(POLL);
        }
    }

    /// `PING` answers `PONG` and `INFO server` names our process (so a server
    /// of another test that won a port race is never mistaken for ours).
    fn answers_as(&self, pid: u32) -> bool {
        let timeout = Duration::from_millis(500);
        let pong = self.query_with(&["PING"], timeout);
        if !matches!(pong, Ok(Reply::Status(ref s)) if s == "PONG") {
            return false;
        }
        match self.query_with(&["INFO", "server"], timeout) {
            Ok(reply) => reply
                .as_str()
                .and_then(|info| info_field(info, "process_id"))
                .is_some_and(|p| p == pid.to_string()),
            Err(_) => false,
        }
    }

    /// Reaps the child if it has exited, returning its status.
    fn reap_if_exited(&self) -> Option<ExitStatus> {
        let mut state = lock(&self.state);
        let status = state.child.as_mut()?.try_wait().ok()??;
        state.child = None;
        state.stopped = false;
        Some(status)
    }

    fn log_since(&self, offset: u64) -> String {
        let bytes = fs::read(self.log_path()).unwrap_or_default();
        let start = usize::try_from(offset).unwrap_or(0).min(bytes.len());
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    /// The last `lines` lines of the server's log (stdout and stderr).
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_since(0), lines)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// How the server speaks TLS, if it does.
    pub fn tls(&self) -> Option<&ServerTls> {
        self.tls.as_ref()
    }

    /// One command on a fresh connection, over TLS for a TLS server.
    fn query_with(&self, args: &[&str], timeout: Duration) -> io::Result<Reply> {
        match &self.tls {
            Some(tls) => crate::redis_tls::query(tls, self.port, &request(args), timeout),
            None => query_port(self.port, args, timeout),
        }
    }

    /// `redis-cli`'s arguments to reach this server: host, port, and TLS.
    pub(crate) fn cli_args(&self) -> Vec<String> {
        let mut args = vec![
            "-h".to_owned(),
            "127.0.0.1".to_owned(),
            "-p".to_owned(),
            self.port.to_string(),
        ];
        if let Some(tls) = &self.tls {
            args.extend(tls.cli_args());
        }
        args
    }

    /// The pid of the current (or last) process.
    pub fn pid(&self) -> u32 {
        lock(&self.state).pid
    }

    /// The server's own temp dir (config, `nodes.conf`, log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process exists (it may be stopped).
    pub fn is_running(&self) -> bool {
        self.reap_if_exited();
        lock(&self.state).child.is_some()
    }

    /// The process was stopped with [`stop`](Self::stop) and not resumed.
    pub fn is_stopped(&self) -> bool {
        lock(&self.state).stopped
    }

    /// Running and not stopped: it can answer.
    pub fn is_live(&self) -> bool {
        self.is_running() && !self.is_stopped()
    }

    /// `SIGSTOP`: the process hangs; open connections stay open and requests
    /// queue up unanswered until [`resume`](Self::resume). Returns once the
    /// kernel reports the process stopped.
    pub fn stop(&self) {
        let mut state = lock(&self.state);
        assert!(
            state.child.is_some(),
            "stop(): redis-server on port {} is not running",
            self.port
        );
        send_signal(state.pid, "STOP");
        wait_for_state(state.pid, true);
        state.stopped = true;
    }

    /// `SIGCONT`: a stopped process carries on (and answers what queued up).
    pub fn resume(&self) {
        let mut state = lock(&self.state);
        assert!(
            state.child.is_some(),
            "resume(): redis-server on port {} is not running",
            self.port
        );
        send_signal(state.pid, "CONT");
        wait_for_state(state.pid, false);
        state.stopped = false;
    }

    /// `SIGKILL` and reap. Idempotent. The port stays reserved for
    /// [`restart`](Self::restart).
    pub fn kill(&self) {
        let mut state = lock(&self.state);
        if let Some(mut child) = state.child.take() {
            // SIGKILL also ends a stopped process; SIGCONT first anyway so
            // nothing is left in a stopped state if the kill were refused.
            if state.stopped {
                let _ = Command::new("kill")
                    .args(["-s", "CONT", &state.pid.to_string()])
                    .status();
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        state.stopped = false;
    }

    /// Starts the server again on the same port (killing it first if it is
    /// still running) and waits until it answers. Nothing is persisted, so a
    /// standalone server comes back empty; a cluster node keeps its
    /// `nodes.conf` and rejoins its cluster. Retries while the port is still
    /// held by someone else, up to a deadline.
    pub fn restart(&self) {
        self.kill();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(SpawnError::AddrInUse(log)) if Instant::now() >= deadline => panic!(
                    "restart(): port {} stayed in use for {START_TIMEOUT:?}; log:\n{}",
                    self.port,
                    tail(&log, 40)
                ),
                Err(SpawnError::AddrInUse(_)) => thread::sleep(Duration::from_millis(100)),
                Err(SpawnError::Fatal(message)) => panic!("restart(): {message}"),
            }
        }
    }

    /// Whether the server answers `PING` within `timeout` (over a fresh TCP
    /// connection; a stopped server accepts the connection but never answers).
    pub fn ping(&self, timeout: Duration) -> bool {
        matches!(self.query_with(&["PING"], timeout), Ok(Reply::Status(ref s)) if s == "PONG")
    }

    /// Sends one command over a fresh connection (timeout 2 s per step).
    /// `Err` on I/O errors and on error replies.
    pub fn query(&self, args: &[&str]) -> Result<Reply, String> {
        match self.query_with(args, QUERY_TIMEOUT) {
            Ok(Reply::Error(e)) => Err(format!("{args:?} on port {}: {e}", self.port)),
            Ok(reply) => Ok(reply),
            Err(e) => Err(format!("{args:?} on port {}: {e}", self.port)),
        }
    }

    /// [`query`](Self::query) for commands that answer with text (`INFO`,
    /// `CLUSTER NODES`, ...).
    pub fn query_text(&self, args: &[&str]) -> Result<String, String> {
        let reply = self.query(args)?;
        reply
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("{args:?} on port {}: unexpected reply {reply:?}", self.port))
    }

    /// Runs `redis-cli -h 127.0.0.1 -p <port> <args>` and returns its stdout
    /// (raw format, since stdout is not a terminal; e.g. `"PONG\n"`, and
    /// `"\n"` for nil). Panics on a non-zero exit or after 10 s.
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args, CLI_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}\nserver log tail:\n{}", self.log_tail(20)))
    }

    /// Like [`cli`](Self::cli) with a timeout, returning `Err` instead of
    /// panicking (e.g. to show that a stopped server does not answer).
    pub fn try_cli(&self, args: &[&str], timeout: Duration) -> Result<String, String> {
        let mut cmd = crate::server_binary::cli();
        cmd.args(self.cli_args()).args(args);
        let output = run_with_timeout(cmd, timeout)?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(format!(
                "redis-cli -p {} {args:?} failed ({}): {}{}",
                self.port,
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    /// `INFO <section>` as text.
    pub fn info(&self, section: &str) -> String {
        self.query_text(&["INFO", section])
            .unwrap_or_else(|e| panic!("{e}\nserver log tail:\n{}", self.log_tail(20)))
    }

    /// Commands executed since the last `CONFIG RESETSTAT`, those run inside
    /// scripts included, not counting the harness's own (`INFO`, `CONFIG`)
    /// nor the backends' heartbeats (`PING`, `ROLE`: one per probe interval
    /// and node, whatever the traffic).
    pub fn commands(&self) -> u64 {
        self.calls_where(|l| {
            !l.starts_with("cmdstat_info")
                && !l.starts_with("cmdstat_config")
                && !l.starts_with("cmdstat_ping")
                && !l.starts_with("cmdstat_role")
                && !l.starts_with("cmdstat_subscribe")
        })
    }

    /// Calls of every command whose `INFO commandstats` line starts with
    /// `prefix` (`"cmdstat_script"`: the command and, from Redis 7.0 on,
    /// each of its subcommands), since the last `CONFIG RESETSTAT`.
    pub fn commands_starting(&self, prefix: &str) -> u64 {
        self.calls_where(|l| l.starts_with(prefix))
    }

    /// The calls of the `INFO commandstats` lines `keep` keeps.
    fn calls_where(&self, keep: impl Fn(&str) -> bool) -> u64 {
        self.info("commandstats")
            .lines()
            .filter(|l| l.starts_with("cmdstat_") && keep(l))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    /// Waits (at most 5 s) until `instances` Redis backends built on this
    /// server have made their first read of the operations' log (a script
    /// call each, made in the background once subscribed; the first one
    /// answered `NOSCRIPT` and sent again whole, with `EVAL`) and no
    /// script call (`EVALSHA` or `EVAL`) has come for
    /// 50 ms: calls a test that counts its own must not count (on a loaded
    /// machine they land after the test's `CONFIG RESETSTAT`). It blocks
    /// its thread: call it from a multi-threaded runtime, whose other
    /// workers make the reads.
    pub fn first_reads(&self, instances: u64) {
        let start = Instant::now();
        let calls = || self.command_count("evalsha") + self.command_count("eval");
        let (mut last, mut since) = (calls(), Instant::now());
        while start.elapsed() < Duration::from_secs(5) {
            thread::sleep(Duration::from_millis(5));
            let now = calls();
            if now != last {
                (last, since) = (now, Instant::now());
            } else if now > instances && since.elapsed() >= Duration::from_millis(50) {
                return;
            }
        }
        panic!("{instances} first reads of the operations' log: {last} script calls in 5 s");
    }

    /// How many times `cmd` (case-insensitive, e.g. `"evalsha"`, or
    /// `"client|setname"` for a subcommand) was called, from
    /// `INFO commandstats`; 0 if never. Commands run by scripts count too.
    /// Statistics survive `FLUSHALL`; `CONFIG RESETSTAT` clears them.
    pub fn command_count(&self, cmd: &str) -> u64 {
        let stats = self.info("commandstats");
        let key = format!("cmdstat_{}", cmd.to_ascii_lowercase());
        info_field(&stats, &key)
            .and_then(|fields| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix("calls="))
                    .and_then(|n| n.parse().ok())
            })
            .unwrap_or(0)
    }

    /// Waits (up to 10 s) until every replica attached to this primary has
    /// acknowledged the primary's replication offset as of this call, e.g.
    /// before killing the primary in a failover test so no write is lost.
    pub fn wait_replicated(&self) {
        let info = self.info("replication");
        let target: u64 = info_field(&info, "master_repl_offset")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let acked = |info: &str| {
            let offsets: Vec<u64> = info
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("offset="))
                .filter_map(|l| {
                    l.split(',')
                        .find_map(|f| f.strip_prefix("offset="))
                        .and_then(|n| n.parse().ok())
                })
                .collect();
            !offsets.is_empty() && offsets.iter().all(|&o| o >= target)
        };
        wait_until(Duration::from_secs(10), "replicas to catch up", || {
            let info = self.query_text(&["INFO", "replication"])?;
            if acked(&info) {
                Ok(())
            } else {
                Err(format!(
                    "port {}: target offset {target}:\n{info}",
                    self.port
                ))
            }
        });
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        release_port(self.port, self.cluster);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Once per process: removes the temp dirs left behind by test processes that
/// died without running `Drop` (killed by a signal or a timeout).
fn remove_stale_dirs() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        if !Path::new("/proc/self").exists() {
            return; // cannot tell live pids from dead ones
        }
        let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix(DIR_PREFIX))
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
            else {
                continue;
            };
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    });
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Polls `check` until it returns `Ok` or `timeout` passes; then panics with
/// the last reason it gave.
pub(crate) fn wait_until<T>(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(value) => return value,
            Err(reason) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last state: {reason}")
            }
            Err(_) => thread::sleep(POLL),
        }
    }
}
