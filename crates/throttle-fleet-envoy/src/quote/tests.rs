use super::*;

#[test]
fn a_long_value_is_cut_at_a_character_boundary() {
    assert_eq!(quoted("api"), "\"api\"");
    let long = "é".repeat(1_000);
    let q = quoted(&long);
    assert!(q.len() < QUOTED_BYTES + 32, "{q}");
    assert!(q.ends_with("... (2000 bytes)"), "{q}");
}
