//! Key layout: `<prefix>:{<rule>:<key hex>}:<suffix>`.
//!
//! Everything inside the braces is ours: the rule name is validated
//! (`[A-Za-z0-9_.-]`) and the key is hex-encoded with a raw/digest marker,
//! so client input can neither choose the hash slot nor collide with
//! another client's key. All keys of one check share the hash tag, so they
//! land in one slot and one script can touch them atomically in a cluster.

#[derive(Debug, Clone)]
pub(crate) struct KeyBase {
    /// `<prefix>:{<rule>:`
    head: String,
}

impl KeyBase {
    pub(crate) fn new(prefix: &str, rule: &str) -> Self {
        Self {
            head: format!("{prefix}:{{{rule}:"),
        }
    }

    /// A name whose hash tag is the rule's and `tag`'s, for what the rule's
    /// keys share (the approximate mode's buckets):
    /// `<prefix>:{<rule>:<tag>}:<suffix>`.
    pub(crate) fn hash_head(&self, tag: &str, suffix: &str) -> String {
        format!("{}{tag}}}:{suffix}", self.head)
    }

    /// The cluster hash slot of every key of `key`: the CRC16 of the hash
    /// tag `<rule>:<key hex>`, streamed without building the string.
    pub(crate) fn slot(&self, key: &throttle_fleet_core::Key) -> u16 {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let head = self.head.as_bytes();
        let tag_start = head.iter().position(|&b| b == b'{').map_or(0, |i| i + 1);
        let mut crc = crate::hash_slot::crc16(0, &head[tag_start..]);
        crc = crate::hash_slot::crc16(crc, if key.is_digest() { b"h" } else { b"r" });
        for &b in key.as_bytes() {
            crc = crate::hash_slot::crc16(
                crc,
                &[HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]],
            );
        }
        crc % 16_384
    }

    pub(crate) fn key(&self, key: &throttle_fleet_core::Key, suffix: &str) -> String {
        let mut out =
            String::with_capacity(self.head.len() + 2 * key.as_bytes().len() + suffix.len() + 4);
        out.push_str(&self.head);
        key.write_hex(&mut out);
        out.push_str("}:");
        out.push_str(suffix);
        out
    }
}

#[cfg(test)]
mod tests;
