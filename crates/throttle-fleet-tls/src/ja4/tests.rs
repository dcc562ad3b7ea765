use super::*;

#[test]
fn grease_is_the_sixteen_values() {
    let all: Vec<u16> = (0..=u16::MAX).filter(|&v| is_grease(v)).collect();
    assert_eq!(all.len(), 16);
    assert!(all.contains(&0x0a0a) && all.contains(&0xfafa));
    assert!(!is_grease(0x0a1a));
}

#[test]
fn alpn_codes() {
    assert_eq!(&alpn_code(b"h2"), b"h2");
    assert_eq!(&alpn_code(b"http/1.1"), b"h1");
    assert_eq!(&alpn_code(b""), b"00");
    assert_eq!(&alpn_code(b"h"), b"hh");
    assert_eq!(&alpn_code(&[0xab, 0x01, 0xcd]), b"ad");
}
