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
mod tests;
