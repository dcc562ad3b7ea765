use super::*;

#[test]
fn short_material_is_kept_and_long_material_hashed() {
    let k = Key::new([7u8; MAX_KEY_LEN]);
    assert!(!k.is_digest());
    assert_eq!(k.as_bytes(), &[7u8; MAX_KEY_LEN]);
    let k = Key::new([7u8; MAX_KEY_LEN + 1]);
    assert!(k.is_digest());
    assert_ne!(k, Key::new([7u8; MAX_KEY_LEN]));
}

#[test]
fn a_raw_key_never_equals_a_digest_with_the_same_bytes() {
    let long = Key::new(vec![1u8; 1000]);
    let raw = Key::new(long.as_bytes());
    assert_eq!(raw.as_bytes(), long.as_bytes());
    assert_ne!(raw, long);
    let (mut a, mut b) = (String::new(), String::new());
    raw.write_hex(&mut a);
    long.write_hex(&mut b);
    assert_ne!(a, b);
}

#[test]
fn composite_keys_are_unambiguous() {
    assert_ne!(Key::from_parts(&[b"a", b""]), Key::from_parts(&[b"", b"a"]));
    assert_ne!(Key::from_parts(&[b"a"]), Key::new("a"));
    let big = vec![0u8; 70_000];
    let k1 = Key::from_parts(&[&big, b"x"]);
    let k2 = Key::from_parts(&[&big[..69_999], b"\0x"]);
    assert!(k1.is_digest() && k2.is_digest());
    assert_ne!(k1, k2);
}

#[test]
fn hex_form_uses_only_safe_characters() {
    let k = Key::new("{a}:b\n\u{0}");
    let mut s = String::new();
    k.write_hex(&mut s);
    assert!(s.bytes().all(|b| b.is_ascii_alphanumeric()));
    assert_eq!(s, "r7b617d3a620a00");
}
