use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;

#[test]
fn keys_are_the_version_tag_and_the_masked_bytes() {
    let p = IpPrefix::new();
    let v4 = p.key_of(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7)));
    assert_eq!(v4.as_bytes(), &[4, 203, 0, 113, 7]);
    let v6: Ipv6Addr = "2001:db8:1:2:aaaa::1".parse().unwrap();
    assert_eq!(
        p.key_of(v6.into()).as_bytes(),
        &[6, 0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2]
    );
    let p = IpPrefix::new().ipv4(20).ipv6(52);
    let v4 = p.key_of(IpAddr::V4(Ipv4Addr::new(10, 1, 255, 9)));
    assert_eq!(v4.as_bytes(), &[4, 10, 1, 240, 0]);
    assert_eq!(
        p.key_of(v6.into()).as_bytes(),
        &[6, 0x20, 0x01, 0x0d, 0xb8, 0, 1, 0]
    );
}

#[test]
fn out_of_range_prefixes_never_panic() {
    let p = IpPrefix::new().ipv4(0).ipv6(200);
    assert!(p.validate().is_err());
    let _ = p.key_of(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let _ = p.key_of(IpAddr::V6(Ipv6Addr::LOCALHOST));
}
