use std::time::Duration;

use http::{HeaderMap, HeaderValue};

use super::*;

fn with(name: &'static str, value: &str) -> HeaderMap {
    let mut map = HeaderMap::new();
    map.insert(name, HeaderValue::from_str(value).unwrap());
    map
}

#[test]
fn grpc_timeout_in_every_unit() {
    for (text, expected) in [
        ("1H", Duration::from_secs(3600)),
        ("2M", Duration::from_secs(120)),
        ("3S", Duration::from_secs(3)),
        ("40m", Duration::from_millis(40)),
        ("50u", Duration::from_micros(50)),
        ("99999999n", Duration::from_nanos(99_999_999)),
    ] {
        assert_eq!(
            timeout(&with("grpc-timeout", text)),
            Some(expected),
            "{text}"
        );
    }
    for bad in ["", "S", "123456789S", "-1S", "1s", "1.5S", "10"] {
        assert_eq!(timeout(&with("grpc-timeout", bad)), None, "{bad:?}");
    }
}

#[test]
fn a_message_that_ends_inside_a_field_is_not_read() {
    // A length that runs past the end, a varint of 11 bytes, a wire type 7.
    for bytes in [
        &[0x1a, 0x05, 0x01][..],
        &[
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ],
        &[0x0f],
    ] {
        let map = with("grpc-status-details-bin", &encode_binary(bytes));
        assert_eq!(retry_info(&map), None);
    }
}

#[test]
fn status_and_grpc_content() {
    assert_eq!(status(&with("grpc-status", "8")), Some(8));
    assert_eq!(status(&with("grpc-status", "x")), None);
    assert!(is_grpc(&with("content-type", "application/grpc+proto")));
    assert!(!is_grpc(&with("content-type", "application/json")));
}
