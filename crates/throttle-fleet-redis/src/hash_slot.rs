//! Redis Cluster hash slots: CRC16 of a key's hash tag.

/// Hash slots of a Redis Cluster.
pub(crate) const HASH_SLOTS: usize = 16_384;

/// The cluster hash slot of a key: CRC16 (XMODEM) of its hash tag (the
/// part between the first `{` and the next `}`, if not empty), mod 16384.
/// (For a check's keys the backend streams it from the key's parts:
/// `KeyBase::slot`.)
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(0, tag) % HASH_SLOTS as u16
}

/// CRC16 (XMODEM, as Redis Cluster uses) of `bytes`, continuing from `crc`.
pub(crate) fn crc16(mut crc: u16, bytes: &[u8]) -> u16 {
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests;
