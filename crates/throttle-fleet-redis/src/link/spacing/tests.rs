use super::*;

#[test]
fn one_caller_per_interval() {
    let spacing = Spacing::new();
    assert!(spacing.take(Duration::from_secs(3_600)));
    assert!(!spacing.take(Duration::from_secs(3_600)));
    assert!(spacing.take(Duration::ZERO));
}
