//! The server version, read from `INFO server`.

/// `redis_version:x.y.z` in an `INFO` text, as `(x, y)`.
pub(crate) fn parse_version(info: &str) -> Option<(u32, u32)> {
    let line = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("redis_version:"))?;
    let mut parts = line.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn versions_are_read_from_info() {
        assert_eq!(
            parse_version("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"),
            Some((7, 0))
        );
        assert_eq!(parse_version("redis_version:6.2.14"), Some((6, 2)));
        assert_eq!(parse_version("redis_version:garbage"), None);
        assert_eq!(parse_version("no version here"), None);
    }
}
