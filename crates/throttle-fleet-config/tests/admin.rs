//! `[admin]`: its address and a bearer token read from a file or the
//! environment, never from the file itself; every mistake names the field.

use std::path::PathBuf;

use throttle_fleet_config::GatewayConfig;

const RULE: &str = "[[rules]]\nname = \"r\"\nkey = \"ip\"\nlimit = 10\nperiod_secs = 60\n";

/// A fresh directory of the test's own under the system's temporary one.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "throttle-config-admin-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn parse(admin: &str, dir: Option<&std::path::Path>) -> Result<GatewayConfig, String> {
    let text = format!("listen = \"127.0.0.1:8080\"\n[admin]\n{admin}{RULE}");
    GatewayConfig::parse("g.toml", &text, dir).map_err(|e| e.to_string())
}

#[test]
fn without_an_admin_table_there_is_no_admin_endpoint() {
    let c = GatewayConfig::parse("g.toml", RULE, None).unwrap();
    assert!(c.admin.is_none());
}

#[test]
fn the_token_comes_from_a_file_next_to_the_config_trimmed() {
    let dir = scratch("file");
    let token = "t".repeat(40);
    std::fs::write(dir.join("admin.token"), format!("  {token}\n")).unwrap();
    let c = parse(
        "listen = \"127.0.0.1:9091\"\ntoken_file = \"admin.token\"\n",
        Some(&dir),
    )
    .unwrap();
    let admin = c.admin.unwrap();
    assert_eq!(admin.listen.to_string(), "127.0.0.1:9091");
    assert_eq!(admin.token.secret(), token);
    // Debug never shows it.
    assert!(!format!("{admin:?}").contains(&token), "{admin:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_token_comes_from_an_environment_variable() {
    // Cargo sets CARGO_PKG_DESCRIPTION (long) and CARGO_PKG_NAME (21 bytes)
    // for the tests it runs: no variable has to be set here.
    let c = parse(
        "listen = \"127.0.0.1:9091\"\ntoken_env = \"CARGO_PKG_DESCRIPTION\"\n",
        None,
    )
    .unwrap();
    assert_eq!(
        c.admin.unwrap().token.secret(),
        env!("CARGO_PKG_DESCRIPTION").trim()
    );
}

#[test]
fn each_admin_mistake_names_the_field() {
    let dir = scratch("errors");
    std::fs::write(dir.join("short.token"), "0123456789\n").unwrap();
    std::fs::write(dir.join("good.token"), "g".repeat(32)).unwrap();
    let cases = [
        (
            "listen = \"127.0.0.1:9091\"\ntoken = \"secret-secret-secret-secret-secret\"\n",
            "g.toml:4:9: field \"admin.token\": the token is never written in the file: use token_file",
        ),
        (
            "listen = \"127.0.0.1:9091\"\n",
            "field \"admin.token_file\": is missing: the admin endpoint needs a bearer token, from token_file",
        ),
        (
            "listen = \"127.0.0.1:9091\"\ntoken_file = \"good.token\"\ntoken_env = \"HOME\"\n",
            "g.toml:4:14: field \"admin.token_file\": give token_file or token_env, not both",
        ),
        (
            "listen = \"127.0.0.1:9091\"\ntoken_file = \"short.token\"\n",
            "g.toml:4:14: field \"admin.token_file\": \"short.token\" holds 10 bytes (trimmed): a token has at least 32",
        ),
        (
            "listen = \"127.0.0.1:9091\"\ntoken_file = \"absent.token\"\n",
            "g.toml:4:14: field \"admin.token_file\": \"absent.token\" cannot be read",
        ),
        (
            "listen = \"127.0.0.1:9091\"\ntoken_env = \"THROTTLE_TEST_NO_SUCH_VARIABLE\"\n",
            "g.toml:4:13: field \"admin.token_env\": names \"THROTTLE_TEST_NO_SUCH_VARIABLE\", which cannot be read",
        ),
        (
            "listen = \"127.0.0.1:9091\"\ntoken_env = \"CARGO_PKG_NAME\"\n",
            "field \"admin.token_env\": names \"CARGO_PKG_NAME\", which holds 21 bytes (trimmed): a token has at least 32",
        ),
        (
            "token_file = \"good.token\"\n",
            "field \"admin.listen\": is missing",
        ),
        (
            "listen = \"nowhere\"\ntoken_file = \"good.token\"\n",
            "g.toml:3:10: field \"admin.listen\": must be an address and port",
        ),
        (
            "listen = \"127.0.0.1:8080\"\ntoken_file = \"good.token\"\n",
            "g.toml:3:10: field \"admin.listen\": is also listen: the admin endpoint needs an address of its own",
        ),
        (
            "listen = \"127.0.0.1:9091\"\ntoken_file = \"good.token\"\nopen = true\n",
            "field \"open\": unknown field `open`",
        ),
    ];
    for (admin, want) in cases {
        let got = parse(admin, Some(&dir)).unwrap_err();
        assert!(
            got.contains(want),
            "for\n{admin}\nwant: {want}\n got: {got}"
        );
        assert!(!got.contains("secret-secret"), "the token is echoed: {got}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
