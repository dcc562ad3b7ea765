//! `[backend]`'s TLS files and credentials: read and checked at load (each
//! mistake names its field, line and column), the password from a file or
//! the environment and never from the file itself, never printed.

use std::path::{Path, PathBuf};

use throttle_fleet_config::GatewayConfig;

const RULE: &str = "[[rules]]\nname = \"r\"\nkey = \"ip\"\nlimit = 10\nperiod_secs = 60\n";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "throttle-config-backend-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A CA certificate, and a certificate with its key, as PEM files in `dir`.
fn pem_files(dir: &Path) {
    let ca = rcgen::generate_simple_self_signed(vec!["ca".to_owned()]).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.cert.pem()).unwrap();
    let client = rcgen::generate_simple_self_signed(vec!["client".to_owned()]).unwrap();
    std::fs::write(dir.join("client.pem"), client.cert.pem()).unwrap();
    std::fs::write(
        dir.join("client-key.pem"),
        client.signing_key.serialize_pem(),
    )
    .unwrap();
}

fn parse(backend: &str, dir: Option<&Path>) -> Result<GatewayConfig, String> {
    let text = format!("[backend]\nkind = \"redis-exact\"\n{backend}{RULE}");
    GatewayConfig::parse("g.toml", &text, dir).map_err(|e| e.to_string())
}

#[cfg(feature = "redis-tls")]
#[test]
fn tls_files_and_a_password_file_are_read_at_load() {
    let dir = scratch("read");
    pem_files(&dir);
    std::fs::write(dir.join("redis.password"), "  s3cret-pass\n").unwrap();
    let c = parse(
        "url = \"rediss://redis.internal:6380\"\ntls_ca_file = \"ca.pem\"\n\
         tls_cert_file = \"client.pem\"\ntls_key_file = \"client-key.pem\"\n\
         username = \"throttle\"\npassword_file = \"redis.password\"\n",
        Some(&dir),
    )
    .unwrap();
    let b = &c.backend;
    assert_eq!(b.tls_ca_file.as_deref(), Some(dir.join("ca.pem").as_path()));
    assert_eq!(
        b.tls_key_file.as_deref(),
        Some(dir.join("client-key.pem").as_path())
    );
    assert_eq!(b.username.as_deref(), Some("throttle"));
    let password = b.password.as_ref().unwrap();
    assert_eq!(password.secret(), "s3cret-pass");
    assert_eq!(password.field(), "backend.password_file");
    assert!(
        !format!("{c:?}").contains("s3cret"),
        "Debug shows the password"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_password_comes_from_an_environment_variable() {
    // Cargo sets CARGO_PKG_NAME for the tests it runs.
    let c = parse(
        "url = \"redis://127.0.0.1:6379\"\npassword_env = \"CARGO_PKG_NAME\"\n",
        None,
    )
    .unwrap();
    let password = c.backend.password.unwrap();
    assert_eq!(password.secret(), "throttle-fleet-config");
    assert_eq!(password.field(), "backend.password_env");
}

#[cfg(not(feature = "redis-tls"))]
#[test]
fn a_rediss_url_needs_the_redis_tls_feature() {
    let error = parse("url = \"rediss://127.0.0.1:6380\"\n", None).unwrap_err();
    assert!(
        error.contains("backend.url") && error.contains("redis-tls"),
        "{error}"
    );
}

#[cfg(feature = "redis-tls")]
#[test]
fn every_mistake_names_its_field() {
    let dir = scratch("mistakes");
    pem_files(&dir);
    let tls = "url = \"rediss://127.0.0.1:6380\"\n";
    for (backend, field) in [
        (
            "url = \"redis://h:1\"\npassword = \"x\"\n",
            "backend.password",
        ),
        (
            "url = \"redis://h:1\"\npassword_file = \"none\"\n",
            "backend.password_file",
        ),
        (
            "url = \"redis://h:1\"\npassword_file = \"ca.pem\"\npassword_env = \"CARGO_PKG_NAME\"\n",
            "backend.password_file",
        ),
        (
            "url = \"redis://h:1\"\npassword_env = \"THROTTLE_NO_SUCH_VAR\"\n",
            "backend.password_env",
        ),
        (
            "url = \"redis://h:1\"\nusername = \"throttle\"\n",
            "backend.username",
        ),
        (
            "url = \"redis://h:1\"\nusername = \"two words\"\n",
            "backend.username",
        ),
        (
            "url = \"redis://h:1\"\ntls_ca_file = \"ca.pem\"\n",
            "backend.tls_ca_file",
        ),
        ("tls_ca_file = \"none.pem\"\n", "backend.tls_ca_file"),
        ("tls_ca_file = \"client-key.pem\"\n", "backend.tls_ca_file"),
        ("tls_cert_file = \"client.pem\"\n", "backend.tls_key_file"),
        (
            "tls_key_file = \"client-key.pem\"\n",
            "backend.tls_cert_file",
        ),
        (
            "tls_cert_file = \"client.pem\"\ntls_key_file = \"ca.pem\"\n",
            "backend.tls_key_file",
        ),
    ] {
        let backend = if backend.starts_with("url") {
            backend.to_owned()
        } else {
            format!("{tls}{backend}")
        };
        let error = parse(&backend, Some(&dir)).unwrap_err();
        assert!(
            error.contains(&format!("field \"{field}\"")),
            "{backend}: {error}"
        );
        // The file, line and column of the value at fault.
        assert!(error.starts_with("g.toml:"), "{error}");
        assert!(!error.contains("PRIVATE KEY"), "{error}");
    }
    let memory = GatewayConfig::parse(
        "g.toml",
        &format!("[backend]\nkind = \"memory\"\nusername = \"u\"\n{RULE}"),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(memory.contains("field \"backend.username\""), "{memory}");
    let _ = std::fs::remove_dir_all(&dir);
}
