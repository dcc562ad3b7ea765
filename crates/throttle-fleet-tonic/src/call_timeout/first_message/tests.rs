use super::*;

/// A message of `len` bytes with its prefix.
fn framed(len: u32) -> Vec<u8> {
    let mut bytes = vec![0];
    bytes.extend_from_slice(&len.to_be_bytes());
    bytes.resize(5 + len as usize, b'x');
    bytes
}

#[test]
fn a_message_in_one_frame_is_whole_with_it() {
    let mut first = FirstMessage::default();
    assert!(first.feed(&framed(300)));
}

#[test]
fn a_message_split_anywhere_is_whole_at_its_last_byte() {
    let message = framed(300);
    for cut in [1, 3, 5, 6, 200, 304] {
        let mut first = FirstMessage::default();
        assert!(!first.feed(&message[..cut]), "cut at {cut}");
        assert!(first.feed(&message[cut..]), "cut at {cut}");
    }
    // A byte at a time.
    let mut first = FirstMessage::default();
    let whole: Vec<bool> = message.iter().map(|b| first.feed(&[*b])).collect();
    assert_eq!(whole.iter().position(|w| *w), Some(message.len() - 1));
}

#[test]
fn an_empty_message_is_whole_with_its_prefix() {
    let mut first = FirstMessage::default();
    assert!(!first.feed(&[0, 0, 0]));
    assert!(!first.feed(&[]));
    assert!(first.feed(&[0, 0]));
}

#[test]
fn the_next_messages_bytes_in_the_same_frame_change_nothing() {
    let mut both = framed(10);
    both.extend_from_slice(&framed(1_000)[..7]);
    let mut first = FirstMessage::default();
    assert!(first.feed(&both));
}
