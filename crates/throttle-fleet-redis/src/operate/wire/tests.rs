use super::*;

#[test]
fn fields_and_blocks_come_back_as_they_went() {
    let key = Key::new("a key with spaces and \u{e9}");
    let (rule, back) = parse_field(&field("login", &key)).unwrap();
    assert_eq!((&*rule, back), ("login", key));
    for block in [
        Block {
            until_us: 42,
            label: Arc::from("203.0.113.7 on login"),
            cause: BlockCause::Operator,
        },
        Block {
            until_us: 7,
            label: Arc::from(""),
            cause: BlockCause::Penalty { level: 3 },
        },
    ] {
        assert_eq!(parse_block(&block_value(&block)), Some(block));
    }
}
