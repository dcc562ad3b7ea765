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
//! * [`RedisCluster::start`] starts `primaries * (1 + replicas)` cluster nodes,
//!   joins them with `redis-cli --cluster create` and waits until every node
//!   reports `cluster_state:ok`, agrees on the slot map and every replica is
//!   in sync. [`RedisCluster::wait_for_failover`] waits until a killed or
//!   stopped primary's slots are served by a promoted replica.
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
//! Temp dirs: `<temp>/throttle-redis-<test pid>-<port>-<counter>`, one per
//! server (config, log, `nodes.conf`), removed on drop; dirs left by test
//! processes that died without dropping (killed, timed out) are removed the
//! next time a test process starts a server.
//!
//! ```ignore
//! let redis = RedisServer::start();          // redis.url() for the client
//! redis.stop();                              // hung: requests time out
//! redis.resume();
//! assert_eq!(redis.command_count("evalsha"), 1);
//!
//! let cluster = RedisCluster::start(3, 1);
//! let primary = cluster.primary_for_key("rl:{ip:1.2.3.4}:0");
//! let port = primary.port();
//! primary.kill();
//! let promoted = cluster.wait_for_failover(port);
//! ```
//!
//! Signals go through the `kill` command (the workspace forbids `unsafe`).
//! Every wait has a deadline and panics with the server's log tail.
//! Everything is synchronous std code; async tests may call it directly (it
//! blocks for milliseconds) or from `spawn_blocking` for the slow waits.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashSet;
use std::collections::hash_map::RandomState;
use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a server may take to answer `PING` after being spawned.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Default timeout of [`RedisServer::cli`].
const CLI_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of one harness query (connect, write, each read).
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a fresh cluster may take to become ready.
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a failover may take (node timeout 1 s, election about 1 s).
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);
/// `cluster-node-timeout` of [`RedisCluster::start`].
const CLUSTER_NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Cluster bus port = client port + this.
const BUS_OFFSET: u16 = 10_000;
/// Number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16_384;
/// Poll interval of every wait loop.
const POLL: Duration = Duration::from_millis(20);
/// How many ports [`RedisServer::start`] tries before giving up.
const START_ATTEMPTS: usize = 20;

/// Temp dirs are `<temp>/throttle-redis-<test pid>-<port>-<counter>`.
const DIR_PREFIX: &str = "throttle-redis-";

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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

// ----------------------------------------------------------------- RESP ----

/// A reply of the minimal RESP2 client the harness uses for its own checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR ...`
    Error(String),
    /// `:42`
    Int(i64),
    /// `$...` (`None` for a nil bulk string); bytes decoded lossily as UTF-8.
    Bulk(Option<String>),
    /// `*...` (`None` for a nil array).
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The text of a status or bulk reply.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Reply::Status(s) | Reply::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// The elements of an array reply (empty for anything else).
    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(items)) => items,
            _ => &[],
        }
    }
}

fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if line.len() < 3 || !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed or truncated reply",
        ));
    }
    let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
    let number = || {
        text.parse::<i64>()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("bad number {text:?}")))
    };
    Ok(match line[0] {
        b'+' => Reply::Status(text.clone()),
        b'-' => Reply::Error(text.clone()),
        b':' => Reply::Int(number()?),
        b'$' => match usize::try_from(number()?) {
            Err(_) => Reply::Bulk(None),
            Ok(len) => {
                let mut buf = vec![0; len + 2];
                reader.read_exact(&mut buf)?;
                buf.truncate(len);
                Reply::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
            }
        },
        b'*' => match usize::try_from(number()?) {
            Err(_) => Reply::Array(None),
            Ok(n) => Reply::Array(Some(
                (0..n)
                    .map(|_| read_reply(reader))
                    .collect::<io::Result<_>>()?,
            )),
        },
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected RESP type byte {other:#x}"),
            ));
        }
    })
}

/// Sends one command on a fresh connection and reads its reply.
fn query_port(port: u16, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    stream.write_all(&request)?;
    read_reply(&mut BufReader::new(stream))
}

/// The value of `field:` in an `INFO` / `CLUSTER INFO` text.
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':').map(str::trim))
}

// ------------------------------------------------------------ processes ----

/// Runs a command with a deadline, capturing stdout and stderr.
fn run_with_timeout(mut cmd: Command, timeout: Duration) -> Result<Output, String> {
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
    dir: PathBuf,
    extra_args: Vec<String>,
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

    fn launch(cluster: bool, extra_args: Vec<String>) -> Self {
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
                dir,
                extra_args: extra_args.clone(),
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
        let mut args: Vec<String> = [
            "--port",
            &self.port.to_string(),
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
        .map(|s| s.to_string())
        .collect();
        args.extend(self.extra_args.iter().cloned());
        args
    }

    /// Spawns the process and waits until it answers `PING` as itself.
    fn spawn_and_wait(&self) -> Result<(), SpawnError> {
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
        let child = Command::new("redis-server")
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
        let pong = query_port(self.port, &["PING"], timeout);
        if !matches!(pong, Ok(Reply::Status(ref s)) if s == "PONG") {
            return false;
        }
        match query_port(self.port, &["INFO", "server"], timeout) {
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

    /// `redis://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
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
        matches!(query_port(self.port, &["PING"], timeout), Ok(Reply::Status(ref s)) if s == "PONG")
    }

    /// Sends one command over a fresh connection (timeout 2 s per step).
    /// `Err` on I/O errors and on error replies.
    pub fn query(&self, args: &[&str]) -> Result<Reply, String> {
        match query_port(self.port, args, QUERY_TIMEOUT) {
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
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args);
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
    /// scripts included, not counting the harness's own (`INFO`, `CONFIG`,
    /// `PING`).
    pub fn commands(&self) -> u64 {
        self.info("commandstats")
            .lines()
            .filter(|l| {
                l.starts_with("cmdstat_")
                    && !l.starts_with("cmdstat_info")
                    && !l.starts_with("cmdstat_config")
                    && !l.starts_with("cmdstat_ping")
            })
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
fn wait_until<T>(timeout: Duration, what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
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

// -------------------------------------------------------- RedisCluster ----

/// A contiguous range of hash slots and the client port of its primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRange {
    /// First slot.
    pub start: u16,
    /// Last slot (inclusive).
    pub end: u16,
    /// Client port of the primary serving the range.
    pub port: u16,
}

/// Slot ranges served by each primary in a `CLUSTER NODES` text, sorted and
/// merged.
fn parse_slot_map(cluster_nodes: &str) -> Result<Vec<SlotRange>, String> {
    let mut ranges = Vec::new();
    for line in cluster_nodes.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            return Err(format!("bad CLUSTER NODES line {line:?}"));
        }
        // <id> <ip:port@cport[,hostname]> <flags> <master> ... <slot>...
        let port: u16 = fields[1]
            .split('@')
            .next()
            .and_then(|addr| addr.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("bad address in {line:?}"))?;
        for slot in &fields[8..] {
            if slot.starts_with('[') {
                continue; // importing / migrating marker
            }
            let (start, end) = slot.split_once('-').unwrap_or((slot, slot));
            let parse = |s: &str| {
                s.parse::<u16>()
                    .map_err(|_| format!("bad slot in {line:?}"))
            };
            ranges.push(SlotRange {
                start: parse(start)?,
                end: parse(end)?,
                port,
            });
        }
    }
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<SlotRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last)
                if last.port == range.port && u32::from(last.end) + 1 == u32::from(range.start) =>
            {
                last.end = range.end;
            }
            _ => merged.push(range),
        }
    }
    Ok(merged)
}

fn covers_all_slots(map: &[SlotRange]) -> bool {
    let mut next = 0u32;
    for range in map {
        if u32::from(range.start) != next {
            return false;
        }
        next = u32::from(range.end) + 1;
    }
    next == u32::from(SLOTS)
}

/// A Redis Cluster of real `redis-server` nodes owned by a test. Dropping it
/// kills every node and removes their temp dirs.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// The last consistent slot map the harness saw (to know which slots a
    /// killed primary served once the survivors have forgotten it).
    last_slot_map: Mutex<Vec<SlotRange>>,
}

impl RedisCluster {
    /// Starts `primaries * (1 + replicas_per_primary)` nodes with
    /// `cluster-node-timeout` 1000 ms and waits until the cluster is ready.
    pub fn start(primaries: usize, replicas_per_primary: usize) -> Self {
        Self::start_with_node_timeout(primaries, replicas_per_primary, CLUSTER_NODE_TIMEOUT)
    }

    /// Like [`start`](Self::start) with another `cluster-node-timeout`
    /// (failure detection takes about this long, failover about 1 s more).
    ///
    /// Nodes run with `cluster-replica-validity-factor 0` (a replica always
    /// tries to take over, however long it was disconnected) and
    /// `cluster-allow-replica-migration no` (replicas stay where they were
    /// put), so failover tests see a predictable topology.
    pub fn start_with_node_timeout(
        primaries: usize,
        replicas_per_primary: usize,
        node_timeout: Duration,
    ) -> Self {
        Self::start_with_args(primaries, replicas_per_primary, node_timeout, &[])
    }

    /// Like [`start_with_node_timeout`](Self::start_with_node_timeout) with
    /// more `redis-server` arguments for every node (e.g.
    /// `--cluster-require-full-coverage no`).
    pub fn start_with_args(
        primaries: usize,
        replicas_per_primary: usize,
        node_timeout: Duration,
        extra_args: &[&str],
    ) -> Self {
        assert!(primaries >= 1, "a cluster needs at least one primary");
        let total = primaries * (1 + replicas_per_primary);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| {
                RedisServer::launch(
                    true,
                    [
                        "--cluster-enabled",
                        "yes",
                        // Relative to the node's own dir (its working dir).
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        &node_timeout.as_millis().to_string(),
                        "--cluster-replica-validity-factor",
                        "0",
                        "--cluster-allow-replica-migration",
                        "no",
                    ]
                    .iter()
                    .chain(extra_args)
                    .map(|s| s.to_string())
                    .collect(),
                )
            })
            .collect();
        let cluster = RedisCluster {
            nodes,
            last_slot_map: Mutex::new(Vec::new()),
        };
        if primaries >= 3 {
            cluster.create_with_redis_cli(replicas_per_primary);
        } else {
            // `redis-cli --cluster create` refuses fewer than 3 primaries.
            cluster.create_by_hand(primaries, replicas_per_primary);
        }
        cluster.wait_stable(CLUSTER_READY_TIMEOUT, "the new cluster to become ready");
        let (p, r) = (cluster.primaries().len(), cluster.replicas().len());
        assert!(
            p == primaries && r == primaries * replicas_per_primary,
            "cluster came up with {p} primaries and {r} replicas, expected {primaries} and {}",
            primaries * replicas_per_primary
        );
        cluster
    }

    fn create_with_redis_cli(&self, replicas_per_primary: usize) {
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for node in &self.nodes {
            cmd.arg(format!("127.0.0.1:{}", node.port()));
        }
        cmd.args([
            "--cluster-replicas",
            &replicas_per_primary.to_string(),
            "--cluster-yes",
        ]);
        let result = run_with_timeout(cmd, Duration::from_secs(60));
        let ok = matches!(&result, Ok(out) if out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains("All 16384 slots covered"));
        if !ok {
            let detail = match result {
                Ok(out) => format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
                Err(e) => e,
            };
            panic!(
                "redis-cli --cluster create failed:\n{detail}\n{}",
                self.log_tails()
            );
        }
    }

    fn create_by_hand(&self, primaries: usize, replicas_per_primary: usize) {
        let fail = |e: String| -> ! { panic!("creating the cluster: {e}\n{}", self.log_tails()) };
        let per = usize::from(SLOTS) / primaries;
        for (i, node) in self.nodes[..primaries].iter().enumerate() {
            let start = i * per;
            let end = if i + 1 == primaries {
                usize::from(SLOTS) - 1
            } else {
                start + per - 1
            };
            node.query(&["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()])
                .unwrap_or_else(|e| fail(e));
            node.query(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &start.to_string(),
                &end.to_string(),
            ])
            .unwrap_or_else(|e| fail(e));
        }
        for node in &self.nodes[1..] {
            self.nodes[0]
                .query(&["CLUSTER", "MEET", "127.0.0.1", &node.port().to_string()])
                .unwrap_or_else(|e| fail(e));
        }
        let total = self.nodes.len().to_string();
        wait_until(CLUSTER_READY_TIMEOUT, "all nodes to meet", || {
            for node in &self.nodes {
                let info = node.query_text(&["CLUSTER", "INFO"])?;
                if info_field(&info, "cluster_known_nodes") != Some(total.as_str()) {
                    return Err(format!("port {}: {info}", node.port()));
                }
            }
            Ok(())
        });
        let ids: Vec<String> = self.nodes[..primaries]
            .iter()
            .map(|n| {
                n.query_text(&["CLUSTER", "MYID"])
                    .unwrap_or_else(|e| fail(e))
            })
            .collect();
        for (k, replica) in self.nodes[primaries..].iter().enumerate() {
            let master = &ids[k / replicas_per_primary.max(1)];
            // The replica may not have learned the primary's id yet: retry.
            wait_until(CLUSTER_READY_TIMEOUT, "CLUSTER REPLICATE", || {
                replica.query(&["CLUSTER", "REPLICATE", master]).map(drop)
            });
        }
    }

    fn log_tails(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let _ = writeln!(
                out,
                "--- node {} log tail:\n{}",
                node.port(),
                node.log_tail(15)
            );
        }
        out
    }

    /// All nodes, in start order.
    pub fn servers(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// `redis://` URLs of all nodes (also killed or stopped ones).
    pub fn nodes(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Node `i` (in start order), to kill, stop, resume or restart it.
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// The node listening on `port`. Panics if no node of this cluster does.
    pub fn node_by_port(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node of this cluster has port {port}"))
    }

    fn live_nodes(&self) -> Vec<&RedisServer> {
        self.nodes.iter().filter(|n| n.is_live()).collect()
    }

    fn any_live_node(&self) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.is_live())
            .expect("no live node in the cluster")
    }

    fn live_with_role(&self, wanted: &str) -> Vec<&RedisServer> {
        self.live_nodes()
            .into_iter()
            .filter(|node| {
                node.query(&["ROLE"])
                    .ok()
                    .and_then(|r| {
                        r.items()
                            .first()
                            .and_then(|x| x.as_str().map(str::to_owned))
                    })
                    .is_some_and(|role| role == wanted)
            })
            .collect()
    }

    /// Live (running, not stopped) nodes whose `ROLE` is master.
    pub fn primaries(&self) -> Vec<&RedisServer> {
        self.live_with_role("master")
    }

    /// Live (running, not stopped) nodes whose `ROLE` is slave.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.live_with_role("slave")
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn keyslot(&self, key: &str) -> u16 {
        let node = self.any_live_node();
        match node.query(&["CLUSTER", "KEYSLOT", key]) {
            Ok(Reply::Int(slot)) => u16::try_from(slot).expect("slot out of range"),
            other => panic!("CLUSTER KEYSLOT {key:?}: {other:?}"),
        }
    }

    /// The slot map as a live node sees it now (`CLUSTER NODES`).
    pub fn slot_map(&self) -> Vec<SlotRange> {
        let node = self.any_live_node();
        node.query_text(&["CLUSTER", "NODES"])
            .and_then(|text| parse_slot_map(&text))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The primary currently serving `key`'s slot, as the cluster sees it
    /// (right after a kill, before failover, that is still the dead node).
    pub fn primary_for_key(&self, key: &str) -> &RedisServer {
        let slot = self.keyslot(key);
        let map = self.slot_map();
        if covers_all_slots(&map) {
            *lock(&self.last_slot_map) = map.clone();
        }
        let range = map
            .iter()
            .find(|r| r.start <= slot && slot <= r.end)
            .unwrap_or_else(|| panic!("slot {slot} of {key:?} is not served: {map:?}"));
        self.node_by_port(range.port)
    }

    /// Waits until the cluster is ready: every live node reports
    /// `cluster_state:ok` and all slots ok, all live nodes agree on a slot
    /// map that covers every slot with live primaries, and every live
    /// replica's link to a live primary is up. Use after restarting nodes.
    pub fn wait_ready(&self) {
        self.wait_stable(CLUSTER_READY_TIMEOUT, "the cluster to become ready");
    }

    /// After killing (or stopping) the primary on `killed_port`, waits up to
    /// 20 s until one of its replicas has been promoted, serves its slots, and
    /// the cluster is ready again (see [`wait_ready`](Self::wait_ready)).
    /// Returns the node that now serves those slots.
    pub fn wait_for_failover(&self, killed_port: u16) -> &RedisServer {
        let killed = self.node_by_port(killed_port);
        assert!(
            !killed.is_live(),
            "wait_for_failover({killed_port}): kill or stop that node first"
        );
        let current = self
            .live_nodes()
            .first()
            .and_then(|n| n.query_text(&["CLUSTER", "NODES"]).ok())
            .and_then(|text| parse_slot_map(&text).ok())
            .unwrap_or_default();
        let mut slots: Vec<SlotRange> = current
            .into_iter()
            .filter(|r| r.port == killed_port)
            .collect();
        if slots.is_empty() {
            // Failover already happened: take the slots from the last map.
            slots = lock(&self.last_slot_map)
                .iter()
                .copied()
                .filter(|r| r.port == killed_port)
                .collect();
        }
        let first_slot = slots
            .first()
            .unwrap_or_else(|| panic!("port {killed_port} served no slots: was it a primary?"))
            .start;
        let map = self.wait_stable(FAILOVER_TIMEOUT, &format!("failover of port {killed_port}"));
        let owner = map
            .iter()
            .find(|r| r.start <= first_slot && first_slot <= r.end)
            .expect("a stable map covers every slot");
        self.node_by_port(owner.port)
    }

    fn wait_stable(&self, timeout: Duration, what: &str) -> Vec<SlotRange> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.check_stable() {
                Ok(map) => {
                    *lock(&self.last_slot_map) = map.clone();
                    return map;
                }
                Err(reason) if Instant::now() >= deadline => panic!(
                    "timed out after {timeout:?} waiting for {what}; last state: {reason}\n{}",
                    self.log_tails()
                ),
                Err(_) => thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn check_stable(&self) -> Result<Vec<SlotRange>, String> {
        let live = self.live_nodes();
        let live_ports: HashSet<u16> = live.iter().map(|n| n.port()).collect();
        let mut reference: Option<(u16, Vec<SlotRange>)> = None;
        for node in &live {
            let port = node.port();
            let info = node.query_text(&["CLUSTER", "INFO"])?;
            if info_field(&info, "cluster_state") != Some("ok")
                || info_field(&info, "cluster_slots_ok") != Some("16384")
            {
                return Err(format!("port {port} CLUSTER INFO:\n{info}"));
            }
            let map = parse_slot_map(&node.query_text(&["CLUSTER", "NODES"])?)?;
            if !covers_all_slots(&map) {
                return Err(format!(
                    "port {port} does not see every slot served: {map:?}"
                ));
            }
            if let Some(dead) = map.iter().find(|r| !live_ports.contains(&r.port)) {
                return Err(format!("port {port} still routes {dead:?} to a dead node"));
            }
            match &reference {
                None => reference = Some((port, map)),
                Some((other, expected)) if *expected != map => {
                    return Err(format!(
                        "ports {other} and {port} disagree: {expected:?} vs {map:?}"
                    ));
                }
                Some(_) => {}
            }
            let role = node.query(&["ROLE"])?;
            let items = role.items();
            if items.first().and_then(Reply::as_str) == Some("slave") {
                let master_port = match items.get(2) {
                    Some(Reply::Int(p)) => u16::try_from(*p).unwrap_or(0),
                    _ => 0,
                };
                let link = items.get(3).and_then(Reply::as_str).unwrap_or("?");
                if link != "connected" || !live_ports.contains(&master_port) {
                    return Err(format!("replica {port}: link to {master_port} is {link:?}"));
                }
            }
        }
        reference
            .map(|(_, map)| map)
            .ok_or_else(|| "no live node".to_owned())
    }
}
