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

/// The shortest admin bearer token accepted (`[admin] token_file` or
/// `token_env`), in bytes once trimmed: 32 random bytes' worth of
/// guessing.
pub const MIN_ADMIN_TOKEN_LEN: usize = 32;

/// The largest `[admin] token_file` read.
pub const MAX_ADMIN_TOKEN_FILE_BYTES: u64 = 4096;

/// The largest `[backend] password_file` read, in bytes.
pub const MAX_PASSWORD_FILE_BYTES: u64 = 4096;
