use super::*;

#[test]
fn base64_lengths_and_values_match_the_engine() {
    for len in 0..20 {
        let data: Vec<u8> = (0..len as u8).collect();
        let expected = STANDARD_NO_PAD.encode(&data);
        assert_eq!(base64_len(len), expected.len(), "{len}");
        let value = write(64, |w| w.base64(&data)).unwrap();
        assert_eq!(value.as_bytes(), expected.as_bytes());
    }
}

#[test]
fn values_outlive_a_full_buffer() {
    let first = write(8, |w| w.number(12_345)).unwrap();
    // Fill several buffers while `first` is alive.
    let kept: Vec<_> = (0..3 * CHUNK / 100)
        .map(|i| {
            write(200, |w| {
                w.value(|b| b.put_slice(&[b'a' + (i % 26) as u8; 100]))
            })
        })
        .collect();
    assert_eq!(first, "12345");
    for (i, v) in kept.iter().enumerate() {
        assert_eq!(v.as_ref().unwrap().as_bytes(), [b'a' + (i % 26) as u8; 100]);
    }
    assert!(write(8, |w| w.value(|b| b.put_slice(b"\n"))).is_none());
}
