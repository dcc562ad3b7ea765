use super::line_col;

#[test]
fn positions_are_one_based() {
    let text = "a = 1\nbé = 2\n";
    assert_eq!(line_col(text, 0), (1, 1));
    assert_eq!(line_col(text, 4), (1, 5));
    assert_eq!(line_col(text, 6), (2, 1));
    // After the two-byte 'é': column counts characters.
    assert_eq!(line_col(text, 9), (2, 3));
    assert_eq!(line_col(text, 999), (3, 1));
}
