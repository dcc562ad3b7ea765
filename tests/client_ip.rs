//! Client IP behind proxies, over real TCP: the server trusts 127.0.0.2 and
//! 127.0.0.3 as its proxies; clients connect from other loopback addresses.
//! What a key is shows in who runs out of quota (two requests each).

use std::net::Ipv4Addr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use throttle_fleet_axum::key::{ForwardedHeader, UserAgentHash};
use throttle_fleet_axum::{ClientIp, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
use throttle_fleet_test_support::http::{HttpClient, client_from, serve};

const PROXY: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const INNER_PROXY: &str = "127.0.0.3";

async fn server(ip: ClientIp) -> std::net::SocketAddr {
    let policy = Policy::new().rule(
        Rule::new("ip", Quota::new(2, Duration::from_secs(600))).fixed_window(),
        ip.trusted_proxies(["127.0.0.2/32", INNER_PROXY]),
    );
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(ThrottleLayer::new(policy, MemoryBackend::default()).unwrap());
    serve(app, true).await
}

async fn status(
    c: &HttpClient,
    addr: std::net::SocketAddr,
    header: &str,
    value: &str,
) -> StatusCode {
    let headers: &[(&str, &str)] = match value {
        "" => &[],
        v => &[(header, v)],
    };
    c.get(addr, "/", headers).await.status
}

async fn xff(c: &HttpClient, addr: std::net::SocketAddr, value: &str) -> StatusCode {
    status(c, addr, "x-forwarded-for", value).await
}

#[tokio::test]
async fn an_untrusted_peers_forwarding_headers_are_ignored() {
    let addr = server(ClientIp::default()).await;
    let direct = client_from(Ipv4Addr::new(127, 0, 0, 5));
    // A fresh spoofed address on every request would be a fresh quota if
    // the header were read.
    assert_eq!(xff(&direct, addr, "198.51.100.1").await, StatusCode::OK);
    assert_eq!(xff(&direct, addr, "198.51.100.2").await, StatusCode::OK);
    assert_eq!(
        xff(&direct, addr, "198.51.100.3").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    let forwarded = status(&direct, addr, "forwarded", "for=198.51.100.4").await;
    assert_eq!(forwarded, StatusCode::TOO_MANY_REQUESTS);
    // ...and what it claimed to be has its whole quota, via the proxy.
    let proxy = client_from(PROXY);
    assert_eq!(xff(&proxy, addr, "198.51.100.1").await, StatusCode::OK);
}

#[tokio::test]
async fn spoofed_leftmost_entries_are_ignored_and_clients_behind_one_proxy_are_apart() {
    let addr = server(ClientIp::default()).await;
    let proxy = client_from(PROXY);
    // The client writes whatever it likes; the proxy appends its address.
    for spoof in ["6.6.6.1", "6.6.6.2"] {
        let chain = format!("{spoof}, 203.0.113.7");
        assert_eq!(xff(&proxy, addr, &chain).await, StatusCode::OK);
    }
    assert_eq!(
        xff(&proxy, addr, "6.6.6.3, 203.0.113.7").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another client behind the same proxy has its own quota, and so has
    // the proxy itself.
    assert_eq!(xff(&proxy, addr, "203.0.113.8").await, StatusCode::OK);
    assert_eq!(xff(&proxy, addr, "203.0.113.8").await, StatusCode::OK);
    assert_eq!(xff(&proxy, addr, "").await, StatusCode::OK);
}

#[tokio::test]
async fn a_trusted_chain_is_walked_right_to_left() {
    let addr = server(ClientIp::default()).await;
    let proxy = client_from(PROXY);
    // Two untrusted entries: the rightmost one, 203.0.113.11, is the client.
    assert_eq!(xff(&proxy, addr, "203.0.113.11").await, StatusCode::OK);
    assert_eq!(xff(&proxy, addr, "203.0.113.11").await, StatusCode::OK);
    let denied = xff(&proxy, addr, "203.0.113.10, 203.0.113.11").await;
    assert_eq!(denied, StatusCode::TOO_MANY_REQUESTS);
    let other = xff(&proxy, addr, "203.0.113.11, 203.0.113.10").await;
    assert_eq!(other, StatusCode::OK);
    // The inner proxy's hop is skipped, over two header lines too.
    let two_lines = [
        ("x-forwarded-for", "203.0.113.11"),
        ("x-forwarded-for", INNER_PROXY),
    ];
    let r = proxy.get(addr, "/", &two_lines).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    // A malformed entry ends the walk at the last good address, here the
    // inner proxy, which then has a key (and a quota) of its own.
    let malformed = format!("203.0.113.12, garbage, {INNER_PROXY}");
    assert_eq!(xff(&proxy, addr, &malformed).await, StatusCode::OK);
    assert_eq!(xff(&proxy, addr, &malformed).await, StatusCode::OK);
    assert_eq!(
        xff(&proxy, addr, INNER_PROXY).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn rfc_7239_forwarded_when_chosen_and_then_only_it() {
    let addr = server(ClientIp::default().forwarded_header(ForwardedHeader::Forwarded)).await;
    let proxy = client_from(PROXY);
    let fwd = |v: &'static str| {
        let proxy = &proxy;
        async move { status(proxy, addr, "forwarded", v).await }
    };
    let chain = r#"for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https"#;
    assert_eq!(fwd(chain).await, StatusCode::OK);
    // The same /64, another spoofed leftmost entry: the same key.
    let same_net = r#"for=6.6.6.7, For="[2001:db8:cafe::99]""#;
    assert_eq!(fwd(same_net).await, StatusCode::OK);
    assert_eq!(fwd(chain).await, StatusCode::TOO_MANY_REQUESTS);
    // X-Forwarded-For is not what these proxies write: never read, so a
    // client's own X-Forwarded-For gets it nothing.
    assert_eq!(xff(&proxy, addr, "203.0.113.50").await, StatusCode::OK);
    assert_eq!(xff(&proxy, addr, "203.0.113.51").await, StatusCode::OK);
    assert_eq!(
        xff(&proxy, addr, "203.0.113.52").await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn a_subnet_and_user_agent_composite_keeps_nat_neighbours_apart() {
    let policy = Policy::new().rule(
        Rule::new("anon", Quota::new(2, Duration::from_secs(600))).fixed_window(),
        (
            ClientIp::v4_prefix(24).trusted_proxies(["127.0.0.2"]),
            UserAgentHash,
        ),
    );
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(ThrottleLayer::new(policy, MemoryBackend::default()).unwrap());
    let addr = serve(app, true).await;
    let proxy = client_from(PROXY);
    let get = |ip: &'static str, ua: &'static str| {
        let proxy = &proxy;
        async move {
            let headers = [("x-forwarded-for", ip), ("user-agent", ua)];
            proxy.get(addr, "/", &headers).await.status
        }
    };
    // Two addresses of one /24 with one browser: one key.
    assert_eq!(get("100.64.0.1", "Firefox/140").await, StatusCode::OK);
    assert_eq!(get("100.64.0.2", "Firefox/140").await, StatusCode::OK);
    assert_eq!(
        get("100.64.0.3", "Firefox/140").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another browser behind the same NAT pool has its own quota.
    assert_eq!(get("100.64.0.1", "Chrome/141").await, StatusCode::OK);
    // No User-Agent: the key is missing, rejected with 400 by default.
    let r = proxy
        .get(addr, "/", &[("x-forwarded-for", "100.64.0.1")])
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}
