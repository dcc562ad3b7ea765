use std::net::IpAddr;

use throttle_fleet_tower::key::IpPrefix;

use super::*;

fn grpc(path: &str) -> http::request::Parts {
    http::Request::post(path)
        .header("content-type", "application/grpc")
        .body(())
        .unwrap()
        .into_parts()
        .0
}

#[test]
fn method_paths_split_into_service_and_method() {
    assert_eq!(
        split_method("/helloworld.Greeter/SayHello"),
        Some(("helloworld.Greeter", "SayHello"))
    );
    for bad in ["", "/", "//", "/a", "/a/", "//b", "/a/b/c", "a/b"] {
        assert_eq!(split_method(bad), None, "{bad:?}");
    }
}

#[test]
fn a_method_named_by_an_operator_is_the_key_its_calls_get() {
    use throttle_fleet_tower::key::KeyInputs;
    let say_hello = "/helloworld.Greeter/SayHello";
    let inputs = KeyInputs::new().route(say_hello);
    for extractor in [GrpcMethod::full(), GrpcMethod::only([say_hello])] {
        let req = grpc(say_hello);
        let Extracted::Key(seen) = extractor.extract(&RequestHead::from_parts(&req)) else {
            panic!("no key")
        };
        assert_eq!(extractor.key_for(&inputs), Some(Ok(seen)));
    }
    let only = GrpcMethod::only([say_hello]);
    let other = KeyInputs::new().route("/helloworld.Greeter/SayGoodbye");
    assert!(
        only.key_for(&other)
            .unwrap()
            .unwrap_err()
            .contains("does not apply")
    );
    let bad = KeyInputs::new().route("SayHello");
    assert!(GrpcMethod::full().key_for(&bad).unwrap().is_err());
    assert!(
        GrpcMethod::full()
            .key_for(&KeyInputs::new())
            .unwrap()
            .is_err()
    );
}

#[test]
fn methods_and_services_key_grpc_calls_only() {
    let req = grpc("/helloworld.Greeter/SayHello");
    let key = |k: &str| Extracted::Key(Key::new(k));
    assert_eq!(
        GrpcMethod::full().extract(&RequestHead::from_parts(&req)),
        key("/helloworld.Greeter/SayHello")
    );
    assert_eq!(
        GrpcService::each().extract(&RequestHead::from_parts(&req)),
        key("helloworld.Greeter")
    );
    assert_eq!(
        GrpcMethod::only(["/x.Y/Z"]).extract(&RequestHead::from_parts(&req)),
        Extracted::Skip
    );
    assert_eq!(
        GrpcService::only(["x.Y"]).extract(&RequestHead::from_parts(&req)),
        Extracted::Skip
    );
    assert_eq!(
        GrpcMethod::full().extract(&RequestHead::from_parts(&grpc("/bad"))),
        Extracted::Missing
    );
    assert_eq!(
        GrpcService::each().extract(&RequestHead::from_parts(&grpc("/bad"))),
        Extracted::Missing
    );
    assert_eq!(
        GrpcService::only(["x.Y"]).extract(&RequestHead::from_parts(&grpc("/bad"))),
        Extracted::Skip
    );
    let http = http::Request::get("/helloworld.Greeter/SayHello")
        .body(())
        .unwrap()
        .into_parts()
        .0;
    assert_eq!(
        GrpcMethod::full().extract(&RequestHead::from_parts(&http)),
        Extracted::Skip
    );
    assert_eq!(
        GrpcService::each().extract(&RequestHead::from_parts(&http)),
        Extracted::Skip
    );
}

#[test]
fn bad_configuration_names_its_field() {
    let field = |e: &dyn KeyExtractor| e.validate().unwrap_err().field();
    assert_eq!(field(&GrpcMethod::only(["SayHello"])), "key.methods");
    assert_eq!(
        field(&GrpcMethod::only(Vec::<String>::new())),
        "key.methods"
    );
    assert_eq!(field(&GrpcService::only(["a/b"])), "key.services");
    assert_eq!(field(&Metadata::new("X-Api-Key")), "key.metadata");
    assert_eq!(field(&Metadata::new("grpc-timeout")), "key.metadata");
    assert_eq!(field(&Metadata::new("bad name")), "key.metadata");
    assert_eq!(field(&PeerIp::default().ipv6_prefix(0)), "key.ipv6_prefix");
    assert!(GrpcMethod::only(["/a.B/C"]).validate().is_ok());
    assert!(Metadata::new("x-api-key").validate().is_ok());
}

#[test]
fn kinds_name_what_is_limited() {
    assert_eq!(GrpcMethod::full().kind(), "method");
    assert_eq!(GrpcMethod::only(["/a.B/C"]).kind(), "method");
    assert_eq!(GrpcService::each().kind(), "service");
    assert_eq!(Metadata::new("x-api-key").kind(), "metadata:x-api-key");
    assert_eq!(PeerIp::default().kind(), "peer-ip");
}

#[test]
fn peer_ip_reads_axum_connect_info_and_folds_mapped_addresses() {
    let mut req = grpc("/a.B/C");
    assert_eq!(
        PeerIp::default().extract(&RequestHead::from_parts(&req)),
        Extracted::Missing
    );
    let mapped: SocketAddr = "[::ffff:203.0.113.7]:5000".parse().unwrap();
    req.extensions.insert(ConnectInfo(mapped));
    let v4: IpAddr = "203.0.113.7".parse().unwrap();
    assert_eq!(
        PeerIp::default().extract(&RequestHead::from_parts(&req)),
        Extracted::Key(IpPrefix::new().key_of(v4))
    );
}

#[test]
fn peer_ip_reads_metadata_only_from_a_trusted_proxy() {
    let mut req = grpc("/a.B/C");
    req.headers
        .insert("x-forwarded-for", "6.6.6.6, 203.0.113.7".parse().unwrap());
    let proxy: SocketAddr = "10.0.0.1:5000".parse().unwrap();
    req.extensions.insert(ConnectInfo(proxy));
    let key = |ip: &str| Extracted::Key(IpPrefix::new().key_of(ip.parse().unwrap()));
    assert_eq!(
        PeerIp::default().extract(&RequestHead::from_parts(&req)),
        key("10.0.0.1")
    );
    let trusting = PeerIp::default().trusted_proxies(["10.0.0.0/8"]);
    assert_eq!(
        trusting.extract(&RequestHead::from_parts(&req)),
        key("203.0.113.7")
    );
}
