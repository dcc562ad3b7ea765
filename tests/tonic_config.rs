//! A tonic server whose limits come from a configuration file (the
//! gateway's format, through `throttle_fleet_tonic::from_config`), called by a
//! real tonic client over TCP: past the quota, calls fail with
//! `RESOURCE_EXHAUSTED`. Once with the file `tonic_greeter --config` ships,
//! once with a file keyed by method and a composite of the peer and a
//! metadata value.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use throttle_fleet_config::GatewayConfig;
use throttle_fleet_tonic::from_config;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Status};

#[path = "../examples/support/greeter.rs"]
mod greeter;

use greeter::MyGreeter;
use greeter::helloworld::HelloRequest;
use greeter::helloworld::greeter_client::GreeterClient;
use greeter::helloworld::greeter_server::GreeterServer;

/// Serves the greeter under the file at `path` on a free port, as the
/// example does with `--config`.
async fn serve(path: &Path) -> (SocketAddr, GatewayConfig) {
    let file = path.display().to_string();
    let config = GatewayConfig::load(path).unwrap_or_else(|e| panic!("{e}"));
    let backend = config.backend.build(&file).await.unwrap();
    let layer = from_config::layer(&config, &file, backend.as_backend()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        Server::builder()
            .layer(layer)
            .add_service(GreeterServer::new(MyGreeter))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    (addr, config)
}

async fn client(addr: SocketAddr) -> GreeterClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    GreeterClient::new(channel)
}

/// One `SayHello`, with `x-api-key` metadata if given.
async fn hello(
    client: &mut GreeterClient<tonic::transport::Channel>,
    api_key: Option<&str>,
) -> Result<String, Status> {
    let mut req = tonic::Request::new(HelloRequest {
        name: "throttle".into(),
    });
    if let Some(key) = api_key {
        req.metadata_mut().insert("x-api-key", key.parse().unwrap());
    }
    client.say_hello(req).await.map(|r| r.into_inner().message)
}

fn exhausted(result: Result<String, Status>) -> Status {
    match result {
        Err(status) if status.code() == Code::ResourceExhausted => status,
        other => panic!("not RESOURCE_EXHAUSTED: {other:?}"),
    }
}

#[tokio::test]
async fn the_example_file_limits_each_peer_to_five_calls() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/tonic_greeter.toml");
    let (addr, config) = serve(Path::new(path)).await;
    assert_eq!(
        config.listen.map(|l| l.to_string()).as_deref(),
        Some("127.0.0.1:50051"),
        "the example listens where its README says"
    );
    let mut c = client(addr).await;
    for _ in 0..5 {
        assert_eq!(hello(&mut c, None).await.unwrap(), "Hello throttle!");
    }
    let status = exhausted(hello(&mut c, None).await);
    assert!(
        status.metadata().get("retry-after").is_some(),
        "{:?}",
        status.metadata()
    );
    assert!(!status.details().is_empty(), "RetryInfo and QuotaFailure");
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "throttle-fleet-tonic-config-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn methods_and_composite_keys_from_a_file() {
    let dir = scratch("composite");
    let path = dir.join("greeter.toml");
    std::fs::write(
        &path,
        r#"
[[rules]]
name = "tenant-hello"
key = "composite"
parts = ["ip", "header:x-api-key"]
routes = ["/helloworld.Greeter/SayHello"]
algorithm = "fixed_window"
limit = 2
period_secs = 3600

[[rules]]
name = "other-methods"
key = "route"
routes = ["/helloworld.Greeter/SayGoodbye"]
limit = 1
period_secs = 3600
"#,
    )
    .unwrap();
    let (addr, _) = serve(&path).await;
    let mut c = client(addr).await;
    assert!(hello(&mut c, Some("acme")).await.is_ok());
    assert!(hello(&mut c, Some("acme")).await.is_ok());
    let status = exhausted(hello(&mut c, Some("acme")).await);
    assert!(status.message().contains("tenant-hello"), "{status:?}");
    // Another tenant from the same peer has its own count; the rule on a
    // method never called never denies SayHello.
    assert!(hello(&mut c, Some("globex")).await.is_ok());
    assert!(hello(&mut c, Some("globex")).await.is_ok());
    exhausted(hello(&mut c, Some("globex")).await);
    // No tenant: the composite's key is missing, the client's fault.
    let missing = hello(&mut c, None).await.unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument, "{missing:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
