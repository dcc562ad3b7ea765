use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;

#[test]
fn ipv4_mapped_addresses_count_as_ipv4() {
    let ip = ClientIp::default();
    let v4 = ip.key_of(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7)));
    let mapped = ip.key_of(IpAddr::V6(Ipv4Addr::new(203, 0, 113, 7).to_ipv6_mapped()));
    assert_eq!(v4, mapped);
}

#[test]
fn prefixes_group_addresses() {
    let ip = ClientIp::default();
    let a: Ipv6Addr = "2001:db8:1:2:aaaa::1".parse().unwrap();
    let b: Ipv6Addr = "2001:db8:1:2:bbbb::9".parse().unwrap();
    let c: Ipv6Addr = "2001:db8:1:3::1".parse().unwrap();
    assert_eq!(ip.key_of(a.into()), ip.key_of(b.into()));
    assert_ne!(ip.key_of(a.into()), ip.key_of(c.into()));
    assert_eq!(ip.key_of(a.into()).as_bytes().len(), 9);

    let v4 = |s: &str| IpAddr::V4(s.parse().unwrap());
    assert_ne!(ip.key_of(v4("10.0.0.1")), ip.key_of(v4("10.0.0.2")));
    let subnet = ClientIp::default().ipv4_prefix(24);
    assert_eq!(
        subnet.key_of(v4("10.0.0.1")),
        subnet.key_of(v4("10.0.0.200"))
    );
    assert_ne!(subnet.key_of(v4("10.0.0.1")), subnet.key_of(v4("10.0.1.1")));
}

#[test]
fn bad_prefixes_are_rejected_by_field() {
    assert_eq!(
        ClientIp::default()
            .ipv4_prefix(33)
            .validate()
            .unwrap_err()
            .field(),
        "key.ipv4_prefix"
    );
    assert_eq!(
        ClientIp::default()
            .ipv4_prefix(0)
            .validate()
            .unwrap_err()
            .field(),
        "key.ipv4_prefix"
    );
    assert_eq!(
        ClientIp::default()
            .ipv6_prefix(129)
            .validate()
            .unwrap_err()
            .field(),
        "key.ipv6_prefix"
    );
    assert_eq!(
        Route::only(["search"]).validate().unwrap_err().field(),
        "key.routes"
    );
    assert_eq!(
        Route::only(Vec::<String>::new())
            .validate()
            .unwrap_err()
            .field(),
        "key.routes"
    );
}
