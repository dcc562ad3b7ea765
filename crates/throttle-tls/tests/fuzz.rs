//! The fingerprint parser never panics and never reads past its bound,
//! whatever the bytes.

use proptest::prelude::*;
use throttle_tls::{HelloError, Ja4};

const CURL: &[u8] = include_bytes!("vectors/curl.bin");

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = Ja4::from_records(&bytes);
        let _ = Ja4::from_handshake(&bytes);
    }

    #[test]
    fn a_real_hello_with_bytes_flipped(flips in proptest::collection::vec((0..CURL.len(), any::<u8>()), 1..8)) {
        let mut bytes = CURL.to_vec();
        for (at, value) in flips {
            bytes[at] = value;
        }
        if let Ok(ja4) = Ja4::from_records(&bytes) {
            prop_assert_eq!(ja4.as_str().len(), 36);
            prop_assert!(ja4.as_str().is_ascii());
        }
    }

    #[test]
    fn a_real_hello_cut_anywhere_is_truncated(cut in 0..CURL.len()) {
        prop_assert_eq!(Ja4::from_records(&CURL[..cut]), Err(HelloError::Truncated));
    }

    #[test]
    fn a_real_hello_split_into_records_anywhere(cuts in proptest::collection::btree_set(1..CURL.len() - 5, 0..12)) {
        let body = &CURL[5..];
        let mut wire = Vec::new();
        let mut from = 0;
        for to in cuts.into_iter().chain([body.len()]) {
            let part = &body[from..to.min(body.len())];
            if part.is_empty() { continue; }
            wire.extend_from_slice(&[22, 3, 1]);
            wire.extend_from_slice(&(part.len() as u16).to_be_bytes());
            wire.extend_from_slice(part);
            from = to;
        }
        prop_assert_eq!(Ja4::from_records(&wire), Ja4::from_records(CURL));
    }
}
