//! `serve` from outside, over real TCP, on tokio's paused clock: the
//! timeouts fire at their documented time to the millisecond, whatever the
//! machine's load, and no test sleeps on the wall clock.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::routing::{get, post};
use axum::{Json, Router};
use throttle_fleet_axum::key::Global;
use throttle_fleet_axum::serve::{ConnectionStats, ServeLimits, serve};
use throttle_fleet_axum::{ClientIp, MemoryBackend, Policy, Rule, ThrottleLayer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::time::Instant;

const HEADER: Duration = Duration::from_secs(10);
const IDLE: Duration = Duration::from_secs(60);
const WRITE: Duration = Duration::from_secs(30);
const BODY: Duration = Duration::from_secs(60);
/// The least rate a request body must keep up past `BODY`, in bytes a
/// second.
const BODY_RATE: u32 = 500;
/// How late past its deadline a close may come: the paused clock jumps
/// straight to the deadline, so only the work after it counts.
const SLACK: Duration = Duration::from_millis(100);

/// The size of `/big`'s and `/pipelined`'s bodies.
const BIG: usize = 256 * 1024;

/// Requests `/pipelined` has answered (only one test asks for it).
static PIPELINED: AtomicUsize = AtomicUsize::new(0);

fn app() -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/big", get(|| async { vec![b'x'; BIG] }))
        .route(
            "/pipelined",
            get(|| async {
                PIPELINED.fetch_add(1, Ordering::Relaxed);
                vec![b'x'; 64 * 1024]
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(120)).await;
                "slow"
            }),
        )
        .route(
            "/stream",
            get(|| async {
                // Five chunks, 30 s apart: 120 s of one response body.
                let chunks = futures_util::stream::unfold(0u32, |n| async move {
                    if n == 5 {
                        return None;
                    }
                    if n > 0 {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                    }
                    Some((Ok::<_, io::Error>(format!("chunk{n};")), n + 1))
                });
                Body::from_stream(chunks)
            }),
        )
}

struct Server {
    addr: SocketAddr,
    stats: ConnectionStats,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<io::Result<()>>,
}

async fn start(limits: ServeLimits, clients: ClientIp) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    start_on(listener, limits, clients)
}

fn start_on(listener: TcpListener, limits: ServeLimits, clients: ClientIp) -> Server {
    start_app(listener, app(), limits, clients)
}

fn start_app(listener: TcpListener, app: Router, limits: ServeLimits, clients: ClientIp) -> Server {
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = serve(listener, app)
        .limits(limits)
        .client_ip(clients)
        .drain_timeout(Duration::from_secs(300))
        .with_graceful_shutdown(async move {
            let _ = stopped.await;
        });
    let stats = server.stats();
    let done = tokio::spawn(server.into_future());
    Server {
        addr,
        stats,
        stop: Some(stop),
        done,
    }
}

fn limits() -> ServeLimits {
    ServeLimits {
        header_timeout: HEADER,
        idle_timeout: IDLE,
        write_timeout: WRITE,
        body_timeout: BODY,
        body_min_bytes_per_sec: BODY_RATE,
        ..ServeLimits::default()
    }
}

async fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

/// Longer than any deadline here: a close that never comes fails the test
/// (the paused clock jumps here) instead of hanging it.
const NEVER: Duration = Duration::from_secs(3_600);

/// Reads until the server closes; returns what was read.
async fn read_to_close(stream: &mut (impl AsyncReadExt + Unpin)) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    let read_all = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(NEVER, read_all)
        .await
        .expect("the server never closed the connection");
    all
}

/// Reads one response whose body ends with `end`.
async fn read_response(stream: &mut TcpStream, end: &str) -> String {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&all).ends_with(end) {
        let n = tokio::time::timeout(NEVER, stream.read(&mut buf))
            .await
            .expect("no response")
            .unwrap();
        assert!(
            n > 0,
            "closed before the response ended: {:?}",
            String::from_utf8_lossy(&all)
        );
        all.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(all).unwrap()
}

fn assert_closed_at(what: &str, took: Duration, deadline: Duration) {
    assert!(
        took >= deadline && took <= deadline + SLACK,
        "{what}: closed after {took:?}, expected {deadline:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slowloris_client_is_closed_at_the_header_timeout() {
    let server = start(limits(), ClientIp::default()).await;
    let start = Instant::now();
    let (mut read, mut write) = TcpStream::connect(server.addr).await.unwrap().into_split();
    write
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n")
        .await
        .unwrap();
    // A header line every 2 s, never the blank line that ends them.
    let dribble = tokio::spawn(async move {
        for i in 0.. {
            tokio::time::sleep(Duration::from_secs(2)).await;
            if write
                .write_all(format!("X-{i}: y\r\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
        }
    });
    let answer = read_to_close(&mut read).await;
    assert_closed_at("slowloris", start.elapsed(), HEADER);
    assert!(answer.is_empty(), "no answer to an unfinished request");
    dribble.abort();
}

#[tokio::test(start_paused = true)]
async fn a_stalled_request_line_is_closed_at_the_header_timeout() {
    let server = start(limits(), ClientIp::default()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    // The first bytes arrive 5 s after the connection: the clock runs from
    // the connection's start, not from them.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let start = Instant::now();
    stream.write_all(b"GET / HT").await.unwrap();
    read_to_close(&mut stream).await;
    assert_closed_at(
        "stalled request line",
        start.elapsed(),
        HEADER - Duration::from_secs(5),
    );
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_sends_nothing_is_closed_at_the_header_timeout() {
    let server = start(limits(), ClientIp::default()).await;
    let start = Instant::now();
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    read_to_close(&mut stream).await;
    assert_closed_at("silent connection", start.elapsed(), HEADER);
    assert_eq!(server.stats.open(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout() {
    let server = start(limits(), ClientIp::default()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    for _ in 0..2 {
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let response = read_response(&mut stream, "ok").await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        // Well past the header timeout, within the idle one: still open.
        tokio::time::sleep(HEADER * 3).await;
    }
    let start = Instant::now();
    read_to_close(&mut stream).await;
    assert_closed_at("idle keep-alive", start.elapsed() + HEADER * 3, IDLE);
    // The next request's first byte starts the header clock.
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    read_response(&mut stream, "ok").await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let start = Instant::now();
    stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    read_to_close(&mut stream).await;
    assert_closed_at("second request's headers", start.elapsed(), HEADER);
}

#[tokio::test(start_paused = true)]
async fn a_slow_handler_and_a_long_streamed_body_keep_their_connection() {
    let server = start(limits(), ClientIp::default()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let start = Instant::now();
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let response = read_response(&mut stream, "slow").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(start.elapsed() >= Duration::from_secs(120));

    let start = Instant::now();
    stream
        .write_all(b"GET /stream HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let response = read_response(&mut stream, "chunk4;\r\n0\r\n\r\n").await;
    assert!(
        response.contains("chunk0;") && response.contains("chunk3;"),
        "{response}"
    );
    assert!(
        start.elapsed() >= Duration::from_secs(120),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn one_client_cannot_hold_more_than_its_cap_and_others_are_still_served() {
    let logs = capture_logs();
    let limits = ServeLimits {
        max_connections_per_client: 16,
        ..limits()
    };
    let server = start(limits, ClientIp::default()).await;
    // 2,000 connections from one address that send nothing.
    let mut hoard = Vec::new();
    for _ in 0..2_000 {
        hoard.push(connect_from("127.0.0.2", server.addr).await);
    }
    // Another address is answered at once.
    let start = Instant::now();
    let mut other = connect_from("127.0.0.3", server.addr).await;
    other
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    read_response(&mut other, "ok").await;
    assert!(start.elapsed() < SLACK, "{:?}", start.elapsed());
    // The cap held: 16 kept, the rest closed at accept (read: EOF).
    let mut open = 0;
    for stream in &mut hoard {
        let mut buf = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(1), stream.read(&mut buf)).await {
            Err(_) => open += 1,
            Ok(Ok(0) | Err(_)) => {}
            Ok(Ok(_)) => panic!("a refused connection was answered"),
        }
    }
    assert_eq!(open, 16);
    assert_eq!(server.stats.refused_per_client(), 2_000 - 16);
    assert_eq!(server.stats.open(), 17);
    let logged = logs.lock().unwrap().clone();
    assert!(
        logged.contains("connection refused") && logged.contains("127.0.0.2"),
        "{logged}"
    );
    assert!(
        logged.matches("connection refused").count() <= 2,
        "refusals are logged at most once a second: {logged}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_trusted_proxy_is_not_capped() {
    let limits = ServeLimits {
        max_connections_per_client: 2,
        ..limits()
    };
    let server = start(limits, ClientIp::default().trusted_proxies(["127.0.0.4"])).await;
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(connect_from("127.0.0.4", server.addr).await);
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(server.stats.open(), 10);
    assert_eq!(server.stats.refused_per_client(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_graceful_stop_closes_idle_connections_and_finishes_running_requests() {
    let mut server = start(limits(), ClientIp::default()).await;
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    read_response(&mut idle, "ok").await;
    let mut running = TcpStream::connect(server.addr).await.unwrap();
    running
        .write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = Instant::now();
    server.stop.take().unwrap().send(()).unwrap();
    read_to_close(&mut idle).await;
    assert!(
        start.elapsed() < SLACK,
        "idle closed at once: {:?}",
        start.elapsed()
    );
    let answer = String::from_utf8(read_to_close(&mut running).await).unwrap();
    assert!(answer.ends_with("slow"), "{answer}");
    server.done.await.unwrap().unwrap();
    assert!(
        TcpStream::connect(server.addr).await.is_err(),
        "no longer accepting"
    );
}

/// A connection from `source` whose receive buffer is small (4 KiB asked,
/// the kernel doubles it): what the server sends fills it at once.
async fn connect_small_window(source: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4 * 1024).unwrap();
    socket.set_send_buffer_size(4 * 1024).unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

/// Pipelines requests for `/pipelined` on `stream` and never reads,
/// until a write fails. Returns when the last write went through and
/// when one failed, since the start.
async fn pipeline_without_reading(mut stream: TcpStream) -> (Duration, Duration) {
    let batch = b"GET /pipelined HTTP/1.1\r\nHost: a\r\n\r\n".repeat(100);
    let start = Instant::now();
    let mut last_progress = Duration::ZERO;
    // A server that read on while its writes wait would take these as
    // fast as they come: 100,000 requests is more than any buffer holds.
    for _ in 0..1_000 {
        let write = tokio::time::timeout(NEVER, stream.write_all(&batch))
            .await
            .expect("the server never closed the connection");
        if write.is_err() {
            return (last_progress, start.elapsed());
        }
        last_progress = start.elapsed();
    }
    panic!(
        "100,000 requests taken without a response read: the server reads on while its writes wait"
    );
}

#[tokio::test(start_paused = true)]
async fn connections_that_pipeline_and_never_read_are_closed_at_the_write_timeout() {
    let server = start(limits(), ClientIp::default()).await;
    let mut clients = Vec::new();
    for _ in 0..20 {
        let stream = connect_small_window("127.0.0.5", server.addr).await;
        clients.push(tokio::spawn(pipeline_without_reading(stream)));
    }
    for client in clients {
        let (last_progress, closed) = client.await.unwrap();
        assert_closed_at("pipelining, never reading", closed - last_progress, WRITE);
    }
    tokio::time::sleep(SLACK).await;
    assert_eq!(server.stats.open(), 0);
    // While its writes waited, the server read no more requests: what it
    // answered is what its buffers and the client's window held.
    let answered = PIPELINED.load(Ordering::Relaxed);
    assert!(answered < 20 * 100, "{answered} requests answered");
}

#[tokio::test(start_paused = true)]
async fn a_long_response_read_slowly_but_steadily_is_sent_in_full() {
    // A small send buffer (accepted sockets inherit the listener's), so
    // that the response waits on the reader from its first kilobytes.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(16 * 1024).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1024).unwrap();
    let server = start_on(listener, limits(), ClientIp::default());
    let mut stream = connect_small_window("127.0.0.1", server.addr).await;
    stream
        .write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let complete = |got: &[u8]| {
        got.windows(4)
            .position(|w| w == b"\r\n\r\n")
            .is_some_and(|head| got.len() - head - 4 == BIG)
    };
    // 16 KiB every half write timeout: 256 KiB take eight write timeouts.
    while !complete(&got) {
        let mut turn = 0;
        while turn < 16 * 1024 && !complete(&got) {
            let n = tokio::time::timeout(NEVER, stream.read(&mut buf))
                .await
                .expect("no more of the response")
                .unwrap();
            assert!(
                n > 0,
                "closed after {} bytes, {:?}",
                got.len(),
                start.elapsed()
            );
            got.extend_from_slice(&buf[..n]);
            turn += n;
        }
        tokio::time::sleep(WRITE / 2).await;
    }
    assert!(got.starts_with(b"HTTP/1.1 200"));
    assert!(start.elapsed() >= WRITE * 7, "{:?}", start.elapsed());
    // And the connection is still served.
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    read_response(&mut stream, "ok").await;
}

/// The slots of the body tests' concurrency rule.
const SLOTS: u64 = 20;

/// `POST /json` reads a JSON body (axum's `Json`, which answers a body
/// error with 400), `GET /` reads none; both under one global concurrency
/// rule of `SLOTS`.
async fn start_held() -> Server {
    let policy = Policy::new().rule(Rule::concurrency("pool", SLOTS), Global);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route(
            "/json",
            post(|Json(_): Json<serde_json::Value>| async { "parsed" }),
        )
        .layer(ThrottleLayer::new(policy, MemoryBackend::default()).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    start_app(listener, app, limits(), ClientIp::default())
}

/// The head of a JSON request of `length` bytes whose body is still to
/// come.
fn json_head(length: usize) -> String {
    format!(
        "POST /json HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n\
         Content-Length: {length}\r\n\r\n"
    )
}

/// The status of a `GET /` on a connection of its own.
async fn status_of_get(addr: SocketAddr) -> u16 {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = String::from_utf8(read_to_close(&mut stream).await).unwrap();
    answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .unwrap_or_else(|| panic!("not an answer: {answer:?}"))
        .parse()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn requests_whose_body_never_comes_give_their_slots_back_at_the_body_timeout() {
    let server = start_held().await;
    let start = Instant::now();
    let mut held = Vec::new();
    for _ in 0..SLOTS {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream.write_all(json_head(100).as_bytes()).await.unwrap();
        held.push(stream);
    }
    // Their handlers wait for the bodies, holding every slot.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(status_of_get(server.addr).await, 429);
    for stream in &mut held {
        let answer = String::from_utf8(read_to_close(stream).await).unwrap();
        assert_closed_at("a body that never comes", start.elapsed(), BODY);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("connection: close"), "{answer}");
    }
    assert_eq!(status_of_get(server.addr).await, 200);
}

#[tokio::test(start_paused = true)]
async fn requests_whose_body_trickles_a_byte_a_second_give_their_slots_back() {
    let server = start_held().await;
    let start = Instant::now();
    let mut readers = Vec::new();
    let mut tricklers = Vec::new();
    for _ in 0..SLOTS {
        let stream = TcpStream::connect(server.addr).await.unwrap();
        let (read, mut write) = stream.into_split();
        // A megabyte announced: 11 days at this rate.
        write
            .write_all(json_head(1_000_000).as_bytes())
            .await
            .unwrap();
        tricklers.push(tokio::spawn(async move {
            // JSON's whitespace, a byte a second, for ever.
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if write.write_all(b" ").await.is_err() {
                    return;
                }
            }
        }));
        readers.push(read);
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(status_of_get(server.addr).await, 429);
    // No byte is ever late by the one-wait bound (1 s against 60 s): the
    // rate cuts them. 60 bytes in 60 s of waiting earned 60 / 500 s past
    // the 60 s of grace, so the wait for the 61st ends at 60.12 s.
    let cut = BODY + Duration::from_secs(60) / BODY_RATE;
    for read in &mut readers {
        let answer = String::from_utf8(read_to_close(read).await).unwrap();
        assert_closed_at("a body a byte a second", start.elapsed(), cut);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    assert_eq!(status_of_get(server.addr).await, 200);
    for trickler in tricklers {
        trickler.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_that_keeps_up_the_rate_is_read_in_full_however_long_it_takes() {
    let server = start_held().await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    // 60 KB in 118.5 s (500 bytes a second on average), 59 s of it one
    // pause.
    let body = format!("[{}0]", "0,".repeat(30_000 - 1));
    stream
        .write_all(json_head(body.len()).as_bytes())
        .await
        .unwrap();
    let start = Instant::now();
    let (first, rest) = body.as_bytes().split_at(500);
    stream.write_all(first).await.unwrap();
    tokio::time::sleep(Duration::from_secs(59)).await;
    for chunk in rest.chunks(500) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        stream.write_all(chunk).await.unwrap();
    }
    let answer = read_response(&mut stream, "parsed").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        start.elapsed() >= Duration::from_secs(118),
        "{:?}",
        start.elapsed()
    );
}

/// The counts of the per-client refusal lines logged so far, in order.
fn refusal_lines(logs: &Mutex<String>) -> Vec<u64> {
    let logs = logs.lock().unwrap();
    logs.lines()
        .filter(|line| line.contains("connection refused"))
        .map(|line| {
            let count = line.split("refused=").nth(1).expect("a refused= field");
            let digits: String = count.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().unwrap()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn refusals_that_no_later_refusal_follows_are_reported_when_their_second_is_up() {
    let logs = capture_logs();
    let limits = ServeLimits {
        max_connections_per_client: 1,
        ..limits()
    };
    let server = start(limits, ClientIp::default()).await;
    let _kept = connect_from("127.0.0.6", server.addr).await;
    let mut refused = Vec::new();
    for _ in 0..44 {
        refused.push(connect_from("127.0.0.6", server.addr).await);
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(server.stats.refused_per_client(), 44);
    // The first at once; the 43 after it within the same second wait.
    assert_eq!(refusal_lines(&logs), [1]);
    tokio::time::sleep(Duration::from_millis(980)).await;
    assert_eq!(refusal_lines(&logs), [1], "a line a second at most");
    // No later refusal comes: the second's end reports them.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(refusal_lines(&logs), [1, 43]);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(refusal_lines(&logs), [1, 43], "nothing more to report");
}

#[tokio::test]
async fn limits_that_cannot_work_are_refused_naming_the_field() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bad = ServeLimits {
        idle_timeout: Duration::ZERO,
        ..ServeLimits::default()
    };
    let err = serve(listener, app()).limits(bad).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("serve.idle_timeout"), "{err}");
}

/// Collects what `tracing` logs on this thread.
fn capture_logs() -> Arc<Mutex<String>> {
    #[derive(Clone)]
    struct Sink(Arc<Mutex<String>>);
    impl io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0
                .lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(buf));
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let logs = Arc::new(Mutex::new(String::new()));
    let sink = Sink(Arc::clone(&logs));
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    // The guard is leaked: the test's runtime runs on this thread to its end.
    std::mem::forget(tracing::subscriber::set_default(subscriber));
    logs
}
