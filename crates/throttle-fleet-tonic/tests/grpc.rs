//! The tonic integration over real TCP: a real `tonic::transport::Server` on
//! an ephemeral port with the layer added by `Server::builder().layer(..)`,
//! and real tonic clients.

mod support;

use std::net::Ipv4Addr;
use std::time::Duration;

use http::StatusCode;
use support::serve;
use throttle_fleet_test_support::grpc::echo::Tick;
use throttle_fleet_test_support::grpc::{
    EchoClient, GreeterClient, SAY_HELLO, channel, channel_from, details, expect_code, meta,
    meta_u64, say_hello,
};
use throttle_fleet_test_support::unix_secs;
use throttle_fleet_tonic::key::Extension;
use throttle_fleet_tonic::{
    GrpcMethod, GrpcResponder, GrpcService, Key, Limit, MemoryBackend, Metadata, MissingKey,
    PeerIp, Policy, Quota, Rule, ThrottleLayer,
};
use tokio_stream::StreamExt;
use tonic::Code;

/// `limit` a day, for a fixed window a test's calls must all fall in: the
/// memory backend aligns the window to the system clock, and a window
/// boundary inside the run (a minute's would be, once in a while) would
/// admit a second window's quota.
fn one_window(limit: u64) -> Quota {
    Quota::per_day(limit)
}

/// The example's policy: 5 per 60 s per peer IP, token bucket, burst 5.
fn per_peer_5_per_minute() -> ThrottleLayer {
    let policy = Policy::new().rule(
        Rule::new("ip", Quota::new(5, Duration::from_secs(60)).with_burst(5)).token_bucket(),
        PeerIp::default(),
    );
    let responder = GrpcResponder::new().key_kind("ip", "peer-ip");
    ThrottleLayer::with_responder(policy, MemoryBackend::default(), responder).unwrap()
}

#[tokio::test]
async fn five_calls_pass_with_metadata_then_resource_exhausted_with_retry_info_and_quota_failure() {
    let addr = serve(per_peer_5_per_minute()).await;
    let mut client = GreeterClient::new(channel(addr).await);

    for expected_remaining in (0..5).rev() {
        let reply = say_hello(&mut client, &[]).await.unwrap();
        let md = reply.metadata();
        assert_eq!(meta(md, "x-ratelimit-limit"), Some("5"));
        assert_eq!(meta_u64(md, "x-ratelimit-remaining"), expected_remaining);
        let reset = meta_u64(md, "x-ratelimit-reset");
        assert!(reset >= unix_secs() && reset <= unix_secs() + 61, "{reset}");
        assert_eq!(reply.into_inner().message, "Hello throttle!");
    }

    let status = expect_code(say_hello(&mut client, &[]).await, Code::ResourceExhausted);
    let retry = meta_u64(status.metadata(), "retry-after");
    assert!((1..=12).contains(&retry), "one token every 12 s: {retry}");
    assert_eq!(
        status.message(),
        format!("Quota exceeded for ip. Please retry after {retry} seconds.")
    );
    let md = status.metadata();
    assert_eq!(meta(md, "x-ratelimit-limit"), Some("5"));
    assert_eq!(meta(md, "x-ratelimit-remaining"), Some("0"));
    let reset = meta_u64(md, "x-ratelimit-reset");
    assert!(reset > unix_secs() && reset <= unix_secs() + 61, "{reset}");
    let pushback = meta_u64(md, "grpc-retry-pushback-ms");

    let d = details(&status);
    assert_eq!(d.count, 3, "{d:?}");
    let delay = d.retry.unwrap().retry_delay.unwrap();
    assert!(
        delay > Duration::ZERO && delay <= Duration::from_secs(12),
        "{delay:?}"
    );
    // The metadata round the exact wait up, never down.
    assert_eq!(retry, delay.as_secs() + u64::from(delay.subsec_nanos() > 0));
    assert_eq!(pushback, delay.as_micros().div_ceil(1000) as u64);
    let violations = d.quota.unwrap().violations;
    assert_eq!(violations.len(), 1);
    assert_eq!(violations[0].subject, "ip:peer-ip");
    assert_eq!(violations[0].description, "ip: 5 per 60s");
    let info = d.info.unwrap();
    assert_eq!(info.reason, "RATE_LIMIT_EXCEEDED");
    assert_eq!(info.domain, "throttle");
    assert_eq!(info.metadata["dimension"], "ip");
}

/// `(ip by peer, tenant by a closure)`, in that order or reversed.
fn ip_and_tenant(tenant_first: bool) -> Policy {
    let ip = Limit::new(Rule::new("ip", Quota::per_minute(1)), PeerIp::default());
    let tenant = Limit::new(
        Rule::new("tenant", Quota::per_minute(1)),
        |_: &throttle_fleet_tonic::RequestHead<'_>| Some(Key::global()),
    );
    let (a, b) = if tenant_first {
        (tenant, ip)
    } else {
        (ip, tenant)
    };
    Policy::new().limit(a).limit(b)
}

/// Denies the second call and gives its `QuotaFailure` subject.
async fn second_call_subject(layer: ThrottleLayer) -> String {
    let mut client = GreeterClient::new(channel(serve(layer).await).await);
    say_hello(&mut client, &[]).await.unwrap();
    let status = expect_code(say_hello(&mut client, &[]).await, Code::ResourceExhausted);
    details(&status).quota.unwrap().violations[0]
        .subject
        .clone()
}

/// The subjects `key_kind` used to be needed for come from the extractors'
/// own kinds; `key_kind` still overrides them, and a reload binds the
/// responder to the new rules.
#[tokio::test]
async fn subjects_name_the_extractors_kind_unless_told_otherwise() {
    let memory = MemoryBackend::default;
    let layer = ThrottleLayer::new(ip_and_tenant(false), memory()).unwrap();
    assert_eq!(second_call_subject(layer).await, "ip:peer-ip");
    let layer = ThrottleLayer::new(ip_and_tenant(false), memory()).unwrap();
    layer.reload(ip_and_tenant(true), memory()).unwrap();
    assert_eq!(second_call_subject(layer).await, "tenant:custom");

    let responder = GrpcResponder::new()
        .key_kind("ip", "addr")
        .key_kind("tenant", "everyone");
    let layer = |tenant_first| {
        ThrottleLayer::with_responder(ip_and_tenant(tenant_first), memory(), responder.clone())
            .unwrap()
    };
    assert_eq!(second_call_subject(layer(false)).await, "ip:addr");
    let reloaded = layer(false);
    reloaded.reload(ip_and_tenant(true), memory()).unwrap();
    assert_eq!(second_call_subject(reloaded).await, "tenant:everyone");
}

#[tokio::test]
async fn each_peer_address_has_its_own_count() {
    let addr = serve(per_peer_5_per_minute()).await;
    let mut a = GreeterClient::new(channel_from(addr, Ipv4Addr::new(127, 0, 0, 2)).await);
    let mut b = GreeterClient::new(channel_from(addr, Ipv4Addr::new(127, 0, 0, 3)).await);
    for _ in 0..5 {
        say_hello(&mut a, &[]).await.unwrap();
    }
    expect_code(say_hello(&mut a, &[]).await, Code::ResourceExhausted);
    let reply = say_hello(&mut b, &[]).await.unwrap();
    assert_eq!(meta(reply.metadata(), "x-ratelimit-remaining"), Some("4"));
    // A new connection from the same address is the same peer.
    let mut a2 = GreeterClient::new(channel_from(addr, Ipv4Addr::new(127, 0, 0, 2)).await);
    expect_code(say_hello(&mut a2, &[]).await, Code::ResourceExhausted);
}

#[tokio::test]
async fn per_method_limits_apply_to_their_methods_only() {
    let policy = Policy::new()
        .rule(
            Rule::new("hello", one_window(2)).fixed_window(),
            GrpcMethod::only([SAY_HELLO]),
        )
        .rule(
            Rule::new("method", one_window(3)).fixed_window(),
            GrpcMethod::full(),
        );
    let layer = ThrottleLayer::new(policy, MemoryBackend::default()).unwrap();
    let addr = serve(layer).await;
    let ch = channel(addr).await;
    let (mut greeter, mut echo) = (GreeterClient::new(ch.clone()), EchoClient::new(ch));

    for left in [1, 0] {
        let reply = say_hello(&mut greeter, &[]).await.unwrap();
        assert_eq!(meta(reply.metadata(), "x-ratelimit-limit"), Some("2"));
        assert_eq!(meta_u64(reply.metadata(), "x-ratelimit-remaining"), left);
    }
    let status = expect_code(say_hello(&mut greeter, &[]).await, Code::ResourceExhausted);
    assert_eq!(
        details(&status).info.unwrap().metadata["dimension"],
        "hello"
    );
    // Subject without a configured key kind: the dimension and the kind
    // the extractor names.
    assert_eq!(
        details(&status).quota.unwrap().violations[0].subject,
        "hello:method"
    );

    // Echo.Unary is not SayHello: only the per-method rule, with its own
    // count for this method.
    for left in [2, 1, 0] {
        let reply = echo.unary(Tick { n: 7 }).await.unwrap();
        assert_eq!(meta(reply.metadata(), "x-ratelimit-limit"), Some("3"));
        assert_eq!(meta_u64(reply.metadata(), "x-ratelimit-remaining"), left);
        assert_eq!(reply.into_inner().n, 7);
    }
    let status = expect_code(echo.unary(Tick { n: 7 }).await, Code::ResourceExhausted);
    assert_eq!(
        details(&status).info.unwrap().metadata["dimension"],
        "method"
    );
    // Another method of the same service still has its own count.
    let mut stream = echo.server_stream(Tick { n: 1 }).await.unwrap();
    assert_eq!(meta(stream.metadata(), "x-ratelimit-remaining"), Some("2"));
    assert_eq!(stream.get_mut().next().await.unwrap().unwrap().n, 1);
}

#[tokio::test]
async fn a_service_limit_is_shared_by_the_services_methods() {
    let policy = Policy::new().rule(
        Rule::new("echo", one_window(3)).fixed_window(),
        GrpcService::only(["echo.Echo"]),
    );
    let addr = serve(ThrottleLayer::new(policy, MemoryBackend::default()).unwrap()).await;
    let ch = channel(addr).await;
    let (mut greeter, mut echo) = (GreeterClient::new(ch.clone()), EchoClient::new(ch));
    echo.unary(Tick { n: 1 }).await.unwrap();
    echo.server_stream(Tick { n: 1 }).await.unwrap();
    echo.client_stream(tokio_stream::iter([Tick { n: 1 }]))
        .await
        .unwrap();
    expect_code(
        echo.bidi(tokio_stream::empty()).await,
        Code::ResourceExhausted,
    );
    // The greeter is another service: unlimited, and without headers.
    for _ in 0..5 {
        let reply = say_hello(&mut greeter, &[]).await.unwrap();
        assert_eq!(meta(reply.metadata(), "x-ratelimit-limit"), None);
    }
}

#[tokio::test]
async fn streaming_calls_are_limited_once_when_they_start() {
    let policy = Policy::new().rule(
        Rule::new("streams", one_window(2)).fixed_window(),
        GrpcService::each(),
    );
    let addr = serve(ThrottleLayer::new(policy, MemoryBackend::default()).unwrap()).await;
    let mut echo = EchoClient::new(channel(addr).await);

    // A server stream of 10 messages is one call: its messages are not
    // counted, and it is not cut off.
    let mut stream = echo.server_stream(Tick { n: 10 }).await.unwrap();
    assert_eq!(meta(stream.metadata(), "x-ratelimit-remaining"), Some("1"));
    let mut got = Vec::new();
    while let Some(tick) = stream.get_mut().next().await {
        got.push(tick.unwrap().n);
    }
    assert_eq!(got, (1..=10).collect::<Vec<_>>());

    // A bidi stream that starts within the quota keeps going after the
    // quota is spent.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let mut bidi = echo
        .bidi(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    for n in 0..5 {
        tx.send(Tick { n }).await.unwrap();
        assert_eq!(bidi.next().await.unwrap().unwrap().n, n);
    }

    // The next call of any kind is denied before its first message.
    let status = expect_code(
        echo.server_stream(Tick { n: 10 }).await,
        Code::ResourceExhausted,
    );
    assert!(details(&status).retry.is_some());
    expect_code(
        echo.client_stream(tokio_stream::iter((0..3).map(|n| Tick { n })))
            .await,
        Code::ResourceExhausted,
    );
    expect_code(
        echo.bidi(tokio_stream::empty()).await,
        Code::ResourceExhausted,
    );

    // The open stream still works.
    for n in 5..8 {
        tx.send(Tick { n }).await.unwrap();
        assert_eq!(bidi.next().await.unwrap().unwrap().n, n);
    }
    drop(tx);
    assert!(bidi.next().await.is_none());
}

#[tokio::test]
async fn metadata_keys_and_their_absence() {
    let policy = Policy::new()
        .rule(
            Rule::new("tenant", Quota::per_minute(2)).token_bucket(),
            Metadata::new("x-api-key"),
        )
        .limit(
            Limit::new(
                Rule::new("user", Quota::per_minute(100)),
                Metadata::new("x-user"),
            )
            .on_missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED)),
        );
    let responder = GrpcResponder::new().key_kind("tenant", "metadata:x-api-key");
    let layer = ThrottleLayer::with_responder(policy, MemoryBackend::default(), responder).unwrap();
    let addr = serve(layer).await;
    let mut client = GreeterClient::new(channel(addr).await);

    let acme = [("x-api-key", "acme"), ("x-user", "u1")];
    for left in [1, 0] {
        let reply = say_hello(&mut client, &acme).await.unwrap();
        assert_eq!(meta_u64(reply.metadata(), "x-ratelimit-remaining"), left);
    }
    let status = expect_code(say_hello(&mut client, &acme).await, Code::ResourceExhausted);
    let quota = details(&status).quota.unwrap();
    assert_eq!(quota.violations[0].subject, "tenant:metadata:x-api-key");
    assert_eq!(quota.violations[0].description, "tenant: 2 per 60s");
    // Another key has its own count.
    say_hello(&mut client, &[("x-api-key", "globex"), ("x-user", "u1")])
        .await
        .unwrap();

    // No API key: INVALID_ARGUMENT (the default 400), naming the rule.
    let status = expect_code(
        say_hello(&mut client, &[("x-user", "u1")]).await,
        Code::InvalidArgument,
    );
    let d = details(&status);
    let info = d.info.unwrap();
    assert_eq!(info.reason, "RATE_LIMIT_KEY_MISSING");
    assert_eq!(info.metadata["dimension"], "tenant");
    assert!(d.retry.is_none() && d.quota.is_none());
    assert!(status.message().contains("tenant"), "{}", status.message());

    // No user, and the rule answers 401: UNAUTHENTICATED.
    let status = expect_code(
        say_hello(&mut client, &[("x-api-key", "initech")]).await,
        Code::Unauthenticated,
    );
    assert_eq!(details(&status).info.unwrap().metadata["dimension"], "user");
}

#[derive(Clone)]
struct User(String);

#[tokio::test]
async fn a_verified_identity_from_an_auth_interceptor_layer_is_a_key() {
    // The auth interceptor runs as a layer in front of the throttle layer,
    // so the identity it verified is in the request when the limit applies.
    let auth = |mut req: tonic::Request<()>| -> Result<tonic::Request<()>, tonic::Status> {
        let user = match req.metadata().get("authorization").map(|v| v.to_str()) {
            Some(Ok("Bearer alice-token")) => "alice",
            Some(Ok("Bearer bob-token")) => "bob",
            _ => return Err(tonic::Status::unauthenticated("who are you?")),
        };
        req.extensions_mut().insert(User(user.to_owned()));
        Ok(req)
    };
    let policy = Policy::new().rule(
        Rule::new("user", one_window(2)).fixed_window(),
        Extension::new(|u: &User| Key::new(&u.0)),
    );
    let throttle = ThrottleLayer::new(policy, MemoryBackend::default()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tonic::transport::Server::builder()
        .layer(tonic::service::InterceptorLayer::new(auth))
        .layer(throttle)
        .add_routes(throttle_fleet_test_support::grpc::routes());
    tokio::spawn(server.serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)));
    let mut client = GreeterClient::new(channel(addr).await);

    let alice = [("authorization", "Bearer alice-token")];
    for _ in 0..2 {
        say_hello(&mut client, &alice).await.unwrap();
    }
    let status = expect_code(
        say_hello(&mut client, &alice).await,
        Code::ResourceExhausted,
    );
    assert_eq!(details(&status).info.unwrap().metadata["dimension"], "user");
    // Same connection, another verified user: another count.
    say_hello(&mut client, &[("authorization", "Bearer bob-token")])
        .await
        .unwrap();
    // A claim the interceptor did not verify never becomes a key.
    expect_code(
        say_hello(&mut client, &[("authorization", "Bearer mallory")]).await,
        Code::Unauthenticated,
    );
}
