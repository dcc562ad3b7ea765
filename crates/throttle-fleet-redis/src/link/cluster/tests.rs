use super::split_addr;

#[test]
fn addresses_split_at_the_last_colon() {
    assert_eq!(split_addr("127.0.0.1:7000"), Some(("127.0.0.1", 7000)));
    assert_eq!(split_addr("::1:7000"), Some(("::1", 7000)));
    assert_eq!(split_addr("host"), None);
    assert_eq!(split_addr("host:port"), None);
}
