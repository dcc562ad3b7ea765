//! Any bytes as the first bytes a client sends, and as a handshake message:
//! the reader never panics, and a fingerprint it returns has JA4's shape.

#![no_main]

use libfuzzer_sys::fuzz_target;
use throttle_fleet_tls::Ja4;

fn shaped(ja4: &Ja4) {
    let text = ja4.as_str();
    assert_eq!(text.len(), 36, "{text}");
    let parts: Vec<&str> = text.split('_').collect();
    assert_eq!(
        parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
        [10, 12, 12],
        "{text}"
    );
    assert!(
        text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
        "{text}"
    );
}

fuzz_target!(|data: &[u8]| {
    if let Ok(ja4) = Ja4::from_records(data) {
        shaped(&ja4);
    }
    if let Ok(ja4) = Ja4::from_handshake(data) {
        shaped(&ja4);
    }
});
