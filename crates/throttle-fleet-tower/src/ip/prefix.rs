use std::net::IpAddr;

use throttle_fleet_core::{ConfigError, Key};

/// How client IP addresses are grouped into keys: IPv4 by a prefix length
/// (default `/32`, each address) and IPv6 by another (default `/64`, one
/// subscriber's network). An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`)
/// counts as the IPv4 address, so a dual-stack listener and an IPv4 listener
/// give the same client the same key.
///
/// Every peer-address extractor builds its keys here, so the same address
/// has the same key whichever protocol it came in by.
///
/// ```
/// use std::net::IpAddr;
/// use throttle_fleet_tower::key::IpPrefix;
///
/// let by_subnet = IpPrefix::new().ipv4(24);
/// let a: IpAddr = "203.0.113.7".parse().unwrap();
/// let b: IpAddr = "::ffff:203.0.113.200".parse().unwrap();
/// assert_eq!(by_subnet.key_of(a), by_subnet.key_of(b));
/// assert!(by_subnet.validate().is_ok());
/// assert_eq!(IpPrefix::new().ipv6(0).validate().unwrap_err().field(), "key.ipv6_prefix");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpPrefix {
    v4: u8,
    v6: u8,
}

impl Default for IpPrefix {
    fn default() -> Self {
        Self::new()
    }
}

impl IpPrefix {
    /// IPv4 by `/32`, IPv6 by `/64`.
    pub const fn new() -> Self {
        Self { v4: 32, v6: 64 }
    }

    /// Groups IPv4 addresses by this prefix length (1 to 32).
    #[must_use]
    pub const fn ipv4(mut self, bits: u8) -> Self {
        self.v4 = bits;
        self
    }

    /// Groups IPv6 addresses by this prefix length (1 to 128).
    #[must_use]
    pub const fn ipv6(mut self, bits: u8) -> Self {
        self.v6 = bits;
        self
    }

    /// The key of `ip` under this grouping: a version tag and the masked
    /// address bytes (IPv6 cut to the prefix's whole bytes).
    #[inline]
    pub fn key_of(&self, ip: IpAddr) -> Key {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match ip {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4) & mask32(self.v4);
                let mut buf = [0u8; 5];
                buf[0] = 4;
                buf[1..].copy_from_slice(&bits.to_be_bytes());
                Key::new(buf)
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6) & mask128(self.v6);
                let len = usize::from(self.v6.min(128).div_ceil(8));
                let mut buf = [0u8; 17];
                buf[0] = 6;
                buf[1..].copy_from_slice(&bits.to_be_bytes());
                Key::new(&buf[..1 + len])
            }
        }
    }

    /// Checks both prefix lengths; the error names `key.ipv4_prefix` or
    /// `key.ipv6_prefix`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=32).contains(&self.v4) {
            return Err(ConfigError::new(
                "key.ipv4_prefix",
                format!("must be from 1 to 32 (got {})", self.v4),
            ));
        }
        if !(1..=128).contains(&self.v6) {
            return Err(ConfigError::new(
                "key.ipv6_prefix",
                format!("must be from 1 to 128 (got {})", self.v6),
            ));
        }
        Ok(())
    }
}

fn mask32(bits: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(bits.min(32)))
        .unwrap_or(0)
}

fn mask128(bits: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(bits.min(128)))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
