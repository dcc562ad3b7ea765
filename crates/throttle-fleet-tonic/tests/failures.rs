//! What gRPC clients get when the limiter cannot decide normally: a server
//! that records no peer address (a real tonic server on a Unix socket), and
//! a fail-closed rule whose backend is down.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use throttle_fleet_core::Answer;
use throttle_fleet_core::backend::{Limiter, Outcome, Unavailable};
use throttle_fleet_test_support::grpc::{GreeterClient, details, expect_code, meta, say_hello};
use throttle_fleet_tonic::core::backend::Backend;
use throttle_fleet_tonic::key::Global;
use throttle_fleet_tonic::{
    ConfigError, Key, KeyExtractorExt, MemoryBackend, PeerIp, Policy, Quota, Rule, ThrottleLayer,
};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::Code;
use tonic::transport::{Endpoint, Server};

/// Serves the test services behind `layer` on a fresh Unix socket, where
/// tonic records `UdsConnectInfo`: there is no peer IP address.
async fn serve_unix(layer: ThrottleLayer) -> GreeterClient {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path: PathBuf = std::env::temp_dir().join(format!(
        "throttle-fleet-tonic-{}-{n}.sock",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let server = Server::builder()
        .layer(layer)
        .add_routes(throttle_fleet_test_support::grpc::routes());
    tokio::spawn(server.serve_with_incoming(UnixListenerStream::new(listener)));
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
        .unwrap();
    GreeterClient::new(channel)
}

/// Two a day in a fixed window: the memory backend aligns the window to the
/// system clock, and a window boundary inside the run would admit a second
/// window's quota; a day's boundary is all but never inside it.
fn per_peer(extractor: impl throttle_fleet_tonic::KeyExtractor) -> ThrottleLayer {
    let policy = Policy::new().rule(Rule::new("ip", Quota::per_day(2)).fixed_window(), extractor);
    ThrottleLayer::new(policy, MemoryBackend::default()).unwrap()
}

#[tokio::test]
async fn without_a_peer_address_peer_ip_answers_internal_naming_the_rule() {
    let mut client = serve_unix(per_peer(PeerIp::default())).await;
    for _ in 0..3 {
        // Every call, not only the first: never passed unlimited.
        let status = expect_code(say_hello(&mut client, &[]).await, Code::Internal);
        assert!(status.message().contains("ip"), "{}", status.message());
        let d = details(&status);
        let info = d.info.unwrap();
        assert_eq!(info.reason, "RATE_LIMIT_KEY_MISSING");
        assert_eq!(info.domain, "throttle");
        assert_eq!(info.metadata["dimension"], "ip");
        assert!(d.retry.is_none() && d.quota.is_none());
    }
}

#[tokio::test]
async fn a_fallback_key_covers_servers_without_peer_addresses() {
    let mut client = serve_unix(per_peer(PeerIp::default().or(Global))).await;
    for left in ["1", "0"] {
        let reply = say_hello(&mut client, &[]).await.unwrap();
        assert_eq!(meta(reply.metadata(), "x-ratelimit-remaining"), Some(left));
    }
    expect_code(say_hello(&mut client, &[]).await, Code::ResourceExhausted);
}

/// A backend whose store is down: every check fails, as a fail-closed remote
/// backend reports when it cannot be reached.
struct Down;

impl Backend for Down {
    fn limiter(&self, _rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        Ok(Arc::new(Down))
    }
}

impl Limiter for Down {
    fn acquire(&self, _key: &Key, _cost: u64, _limit: u64) -> Answer<Result<Outcome, Unavailable>> {
        Answer::Ready(Err(Unavailable::new("connection refused")))
    }

    fn refund(&self, _key: &Key, _cost: u64, _outcome: &Outcome) {}
}

#[tokio::test]
async fn an_unreachable_fail_closed_backend_answers_unavailable_with_a_retry_hint() {
    let policy = Policy::new().rule(
        Rule::new("ip", Quota::per_minute(100)).fail_closed(),
        PeerIp::default(),
    );
    let layer = ThrottleLayer::new(policy, Down).unwrap();
    let addr: SocketAddr = support::serve(layer).await;
    let mut client = GreeterClient::new(throttle_fleet_test_support::grpc::channel(addr).await);

    let status = expect_code(say_hello(&mut client, &[]).await, Code::Unavailable);
    assert_eq!(
        status.message(),
        "The rate limiter is unavailable. Please retry after 1 second."
    );
    assert_eq!(meta(status.metadata(), "retry-after"), Some("1"));
    assert_eq!(
        meta(status.metadata(), "grpc-retry-pushback-ms"),
        Some("1000")
    );
    let d = details(&status);
    assert_eq!(d.retry.unwrap().retry_delay, Some(Duration::from_secs(1)));
    let info = d.info.unwrap();
    assert_eq!(info.reason, "RATE_LIMITER_UNAVAILABLE");
    assert_eq!(info.metadata["dimension"], "ip");
    assert!(d.quota.is_none());
}
