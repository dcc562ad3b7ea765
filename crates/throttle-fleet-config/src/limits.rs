//! The bounds a file is held to, each checked when it loads (the error
//! names the field).

/// The most rules one file may hold.
pub const MAX_RULES: usize = 256;

/// The most tiers one rule may hold.
pub const MAX_TIER_KEYS: usize = 10_000;

/// The most parts of a composite key.
pub const MAX_KEY_PARTS: usize = 4;

/// The most entries of a rule's Envoy `descriptor`.
pub const MAX_DESCRIPTOR_ENTRIES: usize = 8;

/// The largest file read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
