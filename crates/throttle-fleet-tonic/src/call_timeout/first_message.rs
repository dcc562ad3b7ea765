//! Where a gRPC request stream is in its first message: the 5-byte prefix
//! (a compression flag, then the message's length, big-endian), then that
//! many bytes. Plain bookkeeping over the stream's bytes as they come.

/// How much of the first message has come.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct FirstMessage {
    /// Bytes of the prefix seen (up to 5).
    prefix_seen: u8,
    /// Bytes of the message still to come, once the prefix is whole.
    remaining: u64,
}

/// The prefix's size: a flag byte and a 4-byte length.
const PREFIX: u8 = 5;

impl FirstMessage {
    /// Takes the stream's next bytes; whether the first message is whole
    /// with them (what follows it is the next message's).
    pub(super) fn feed(&mut self, mut bytes: &[u8]) -> bool {
        while self.prefix_seen < PREFIX {
            let Some((&byte, rest)) = bytes.split_first() else {
                return false;
            };
            if self.prefix_seen > 0 {
                self.remaining = self.remaining << 8 | u64::from(byte);
            }
            self.prefix_seen += 1;
            bytes = rest;
        }
        let taken = self.remaining.min(bytes.len() as u64);
        self.remaining -= taken;
        self.remaining == 0
    }
}

#[cfg(test)]
mod tests {
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
}
