//! JA4 of ClientHellos captured from real TLS stacks equals what an
//! independent implementation computed (see `vectors/README.md`).

use throttle_fleet_tls::Ja4;

fn vectors() -> Vec<(String, Vec<u8>, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors");
    let expected = std::fs::read_to_string(format!("{dir}/expected.txt")).unwrap();
    expected
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (file, ja4) = line.split_once(' ').unwrap();
            let bytes = std::fs::read(format!("{dir}/{file}")).unwrap();
            (file.to_owned(), bytes, ja4.trim().to_owned())
        })
        .collect()
}

#[test]
fn captured_hellos_match_the_independent_implementation() {
    let vectors = vectors();
    assert!(vectors.len() >= 4, "{} vectors", vectors.len());
    for (file, bytes, expected) in &vectors {
        let ja4 = Ja4::from_records(bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(ja4.as_str(), expected, "{file}");
    }
}

#[test]
fn the_same_hello_split_into_one_record_per_byte_gives_the_same_ja4() {
    for (file, bytes, expected) in vectors() {
        let body = &bytes[5..];
        let mut split = Vec::new();
        for b in body {
            split.extend_from_slice(&[22, 3, 1, 0, 1, *b]);
        }
        assert_eq!(
            Ja4::from_records(&split).unwrap().as_str(),
            expected,
            "{file}"
        );
    }
}

#[test]
fn the_stacks_are_told_apart() {
    let mut seen: Vec<String> = vectors().into_iter().map(|v| v.2).collect();
    seen.sort();
    seen.dedup();
    assert!(seen.len() >= 4, "{seen:?}");
}
