use redis::{FromRedisValue, Value};

use super::Reply;

fn read(v: Value) -> Option<Vec<i64>> {
    Reply::from_redis_value(v).ok().map(|r| r.0)
}

#[test]
fn replies_read_as_the_scripts_write_them() {
    let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    assert_eq!(
        read(text("1 1800000000123456 7 1800000000000001")),
        Some(vec![1, 1_800_000_000_123_456, 7, 1_800_000_000_000_001])
    );
    assert_eq!(read(text("0 -1 -42")), Some(vec![0, -1, -42]));
    assert_eq!(
        read(Value::Array(vec![Value::Int(1), Value::Int(-1)])),
        Some(vec![1, -1])
    );
    // Nothing else is taken for a reply: empty fields, other characters,
    // more digits than an i64 holds, other values.
    for bad in ["", "1  2", "1 ", "-", "1.5", "1e15", "12345678901234567890"] {
        assert_eq!(read(text(bad)), None, "{bad:?}");
    }
    assert_eq!(read(Value::Array(vec![Value::Nil])), None);
    assert_eq!(read(Value::Int(1)), None);
}
