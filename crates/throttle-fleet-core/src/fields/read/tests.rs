use super::*;
use crate::fields::{in_flight_policy_item, in_flight_ratelimit_item, policy_item, ratelimit_item};
use std::time::Duration;

#[test]
fn what_the_servers_write_reads_back() {
    let field = [
        ratelimit_item("ip", 3, 42),
        ratelimit_item("b.c-d_e", 0, 1),
        in_flight_ratelimit_item("slots", 7),
    ]
    .join(", ");
    let items = ratelimit_items(&field).unwrap();
    let read: Vec<_> = items
        .iter()
        .map(|i| (i.name, i.remaining, i.reset_secs))
        .collect();
    assert_eq!(
        read,
        [
            ("ip", 3, Some(42)),
            ("b.c-d_e", 0, Some(1)),
            ("slots", 7, None)
        ]
    );

    let field = [
        policy_item("ip", 100, Duration::from_secs(60)),
        in_flight_policy_item("slots", 64),
    ]
    .join(",");
    let items = policy_items(&field).unwrap();
    assert_eq!(
        (
            items[0].name,
            items[0].quota,
            items[0].window_secs,
            items[0].quota_unit
        ),
        ("ip", 100, Some(60), None)
    );
    assert_eq!(
        (items[1].quota, items[1].window_secs, items[1].quota_unit),
        (64, None, Some("concurrent-requests"))
    );
}

#[test]
fn a_value_that_is_not_a_list_is_ignored_whole() {
    for bad in [
        "\"a\";r=1,",
        "\"a\";r=1,,\"b\";r=2",
        "\"a\";r=1 \"b\";r=2",
        "\"a;r=1",
        "\"a\";R=1",
        "\"a\";r=",
        "\"a\";r=1;",
        "(\"a\" \"b\");r=1",
        "\"a\";r=9999999999999999",
        "\"a\";pk=:abc",
        "\"a\u{7f}\";r=1",
        "\"a\\x\";r=1",
        "\"a\";r=1.2345",
        "\"a\";r=-",
        "\"a\";r=?2",
    ] {
        assert_eq!(ratelimit_items(bad), None, "{bad:?}");
    }
}

#[test]
fn an_item_with_a_figure_that_is_not_a_count_is_dropped_and_the_rest_kept() {
    for (bad, reason) in [
        ("\"x\";r=-1;t=5", "negative r"),
        ("\"x\";r=1;t=-5", "negative t"),
        ("\"x\";r=1.5;t=5", "decimal r"),
        ("\"x\";r=\"1\";t=5", "string r"),
        ("\"x\";t=5", "no r"),
        ("\"x\";r;t=5", "boolean r"),
        ("?1;r=1", "a boolean, not a name"),
        ("7;r=1", "an integer, not a name"),
    ] {
        let field = format!("{bad}, \"ok\";r=2;t=3");
        let items = ratelimit_items(&field).unwrap();
        assert_eq!(items.len(), 1, "{reason}");
        assert_eq!((items[0].name, items[0].remaining), ("ok", 2), "{reason}");
    }
    let policies =
        policy_items("\"x\";q=-1, \"y\";q=5;w=1.5, \"z\";q=5;qu=1, \"ok\";q=9;w=2").unwrap();
    assert_eq!(policies.len(), 1);
    assert_eq!(policies[0].name, "ok");
}

#[test]
fn the_last_value_of_a_parameter_counts_and_unknown_ones_are_skipped() {
    let items = ratelimit_items("default;r=5;t=9;r=0;x=\"y\";z;pk=:AA==:").unwrap();
    assert_eq!(
        items,
        [RateLimitItem {
            name: "default",
            remaining: 0,
            reset_secs: Some(9),
            partition_key: Some("AA=="),
        }]
    );
}

#[test]
fn the_largest_integers_are_fifteen_digits() {
    let items = ratelimit_items("\"a\";r=999999999999999;t=999999999999999").unwrap();
    assert_eq!(items[0].remaining, 999_999_999_999_999);
    assert_eq!(items[0].reset_secs, Some(999_999_999_999_999));
    assert_eq!(ratelimit_items("\"a\";r=1000000000000000"), None);
}

#[test]
fn whitespace_and_empty_values() {
    assert_eq!(ratelimit_items(""), Some(vec![]));
    assert_eq!(ratelimit_items("   "), Some(vec![]));
    let items = ratelimit_items("  \"a\";r=1;t=2 ,\t\"b\"; r=0").unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[1].reset_secs, None);
}
