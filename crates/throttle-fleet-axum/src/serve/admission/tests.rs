use super::*;

fn connections(max_connections_per_client: usize, clients: ClientIp) -> Connections {
    let limits = ServeLimits {
        max_connections_per_client,
        ..ServeLimits::default()
    };
    Connections::new(limits, clients).unwrap()
}

fn permit() -> OwnedSemaphorePermit {
    Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap()
}

fn peer(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[tokio::test]
async fn an_accepted_connection_has_nodelay_set() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let c = connections(2, ClientIp::default());
    let client = tokio::spawn(TcpStream::connect(addr));
    let (stream, peer, _admitted) = c.accept(&listener).await;
    let client = client.await.unwrap().unwrap();
    assert_eq!(peer, client.local_addr().unwrap());
    assert!(stream.nodelay().unwrap(), "TCP_NODELAY is set at accept");
}

#[tokio::test]
async fn an_ipv6_slash_64_is_one_client() {
    let c = connections(2, ClientIp::default());
    let a = c.admit(peer("[2001:db8:1:2::1]:1000"), permit()).unwrap();
    let b = c
        .admit(peer("[2001:db8:1:2:ffff::9]:1001"), permit())
        .unwrap();
    assert!(c.admit(peer("[2001:db8:1:2::3]:1002"), permit()).is_none());
    // Another /64 is another client.
    let other = c.admit(peer("[2001:db8:1:3::1]:1000"), permit()).unwrap();
    assert_eq!(c.stats().refused_per_client(), 1);
    assert_eq!(c.stats().open(), 3);
    drop((a, b, other));
    assert_eq!(c.stats().open(), 0);
    assert!(c.shared.hosts().is_empty(), "closed clients leave no entry");
}

#[tokio::test]
async fn an_ipv4_address_and_its_mapped_form_are_one_client() {
    let c = connections(1, ClientIp::default());
    let _a = c.admit(peer("203.0.113.7:1"), permit()).unwrap();
    assert!(c.admit(peer("[::ffff:203.0.113.7]:2"), permit()).is_none());
    assert!(c.admit(peer("203.0.113.8:1"), permit()).is_some());
}

#[tokio::test]
async fn a_closed_connection_gives_its_place_back() {
    let c = connections(1, ClientIp::default());
    let a = c.admit(peer("203.0.113.7:1"), permit()).unwrap();
    assert!(c.admit(peer("203.0.113.7:2"), permit()).is_none());
    drop(a);
    assert!(c.admit(peer("203.0.113.7:3"), permit()).is_some());
}

#[tokio::test]
async fn trusted_proxies_are_not_capped() {
    let c = connections(1, ClientIp::default().trusted_proxies(["10.0.0.0/8"]));
    let held: Vec<_> = (0..5)
        .map(|i| c.admit(peer(&format!("10.0.0.1:{i}")), permit()).unwrap())
        .collect();
    assert_eq!(c.stats().open(), 5);
    assert_eq!(c.stats().refused_per_client(), 0);
    drop(held);
}

#[tokio::test]
async fn the_clients_grouping_is_the_limiters() {
    let c = connections(1, ClientIp::default().ipv4_prefix(24));
    let _a = c.admit(peer("203.0.113.7:1"), permit()).unwrap();
    assert!(c.admit(peer("203.0.113.200:1"), permit()).is_none());
}

#[cfg(feature = "metrics")]
#[tokio::test]
async fn the_counts_reach_the_metrics_facade() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let c = connections(1, ClientIp::default());
    let a = c.admit(peer("203.0.113.7:1"), permit()).unwrap();
    assert!(c.admit(peer("203.0.113.7:2"), permit()).is_none());
    let _b = c.admit(peer("203.0.113.8:1"), permit()).unwrap();
    drop(a);
    // One snapshot: taking one resets the counters.
    let snapshot = snapshotter.snapshot().into_vec();
    let value = |name: &str| {
        snapshot
            .iter()
            .find(|(key, ..)| key.key().name() == name)
            .map(|(.., value)| value)
    };
    assert_eq!(value(names::ACCEPTED), Some(&DebugValue::Counter(2)));
    assert_eq!(value(names::REFUSED), Some(&DebugValue::Counter(1)));
    assert_eq!(value(names::OPEN), Some(&DebugValue::Gauge(1.0.into())));
}

#[test]
fn bad_limits_name_their_field() {
    let bad = ServeLimits {
        max_connections: 0,
        ..ServeLimits::default()
    };
    let err = Connections::new(bad, ClientIp::default()).err().unwrap();
    assert_eq!(err.field(), "serve.max_connections");
    let bad_proxy = ClientIp::default().trusted_proxies(["10.0.0.0/33"]);
    let err = Connections::new(ServeLimits::default(), bad_proxy)
        .err()
        .unwrap();
    assert_eq!(err.field(), "trusted_proxies");
}
