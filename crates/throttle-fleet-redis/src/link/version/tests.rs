use super::*;

const VALKEY_9_1: &str = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
    valkey_version:9.1.2\r\nvalkey_release_stage:ga\r\nserver_mode:standalone\r\n";

#[test]
fn versions_are_read_from_info() {
    let redis = |v| ServerVersion {
        server: Server::Redis,
        version: v,
    };
    assert_eq!(
        parse_version("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"),
        Some(redis((7, 0, 15)))
    );
    assert_eq!(
        parse_version("redis_version:6.2.14"),
        Some(redis((6, 2, 14)))
    );
    assert_eq!(parse_version("redis_version:garbage"), None);
    assert_eq!(parse_version("no version here"), None);
}

#[test]
fn valkey_is_read_by_its_own_name_and_version() {
    let found = parse_version(VALKEY_9_1).unwrap();
    assert_eq!(found.server, Server::Valkey);
    assert_eq!(found.version, (9, 1, 2));
    assert_eq!(found.to_string(), "Valkey 9.1.2");
    assert!(check_version(found).is_ok());
}

#[test]
fn an_old_redis_is_refused_by_name() {
    let old = parse_version("redis_version:5.0.14").unwrap();
    let err = check_version(old).unwrap_err();
    assert_eq!(err.field(), "redis.version");
    let text = err.to_string();
    assert!(
        text.contains("Redis 5.0.14") && text.contains("6.0"),
        "{text}"
    );
    for ok in [
        "redis_version:6.0.0",
        "redis_version:6.2.14",
        "redis_version:7.2.4",
    ] {
        assert!(check_version(parse_version(ok).unwrap()).is_ok(), "{ok}");
    }
}
