use super::*;

fn record(body: &[u8]) -> Vec<u8> {
    let mut r = vec![22, 3, 1];
    r.extend_from_slice(&(body.len() as u16).to_be_bytes());
    r.extend_from_slice(body);
    r
}

fn hello(len: usize) -> Vec<u8> {
    let mut m = vec![1, (len >> 16) as u8, (len >> 8) as u8, len as u8];
    m.resize(4 + len, 0xab);
    m
}

#[test]
fn one_record_and_every_prefix_of_it() {
    let m = hello(100);
    let r = record(&m);
    assert_eq!(scan(&r, DEFAULT_MAX_HELLO), Scan::Complete(m));
    for cut in 0..r.len() {
        assert_eq!(
            scan(&r[..cut], DEFAULT_MAX_HELLO),
            Scan::NeedMore,
            "cut {cut}"
        );
    }
}

#[test]
fn a_hello_split_over_records_is_reassembled() {
    let m = hello(300);
    let mut wire = Vec::new();
    for chunk in m.chunks(7) {
        wire.extend(record(chunk));
    }
    wire.extend_from_slice(b"trailing application bytes");
    assert_eq!(scan(&wire, DEFAULT_MAX_HELLO), Scan::Complete(m));
}

fn split_into_records(m: &[u8], size: usize) -> Vec<u8> {
    m.chunks(size).flat_map(record).collect()
}

#[test]
fn bytes_arriving_one_at_a_time_give_the_same_answer() {
    let m = hello(300);
    let wire = split_into_records(&m, 7);
    let mut scanner = Scanner::new(DEFAULT_MAX_HELLO);
    for end in 0..wire.len() {
        assert_eq!(scanner.scan(&wire[..end]), Scan::NeedMore, "end {end}");
    }
    assert_eq!(scanner.scan(&wire), Scan::Complete(m));
}

#[test]
fn records_already_read_are_not_looked_at_again() {
    // Read the first half of the records, then spoil the bytes already
    // read: a scanner that rescans from the start would see garbage.
    let m = hello(300);
    let mut wire = split_into_records(&m, 10);
    let half = wire.len() / 2;
    let mut scanner = Scanner::new(DEFAULT_MAX_HELLO);
    assert_eq!(scanner.scan(&wire[..half]), Scan::NeedMore);
    let read = scanner.at;
    assert!(read > half / 2, "{read} of {half} bytes read");
    wire[..read].fill(0xff);
    assert_eq!(scanner.scan(&wire), Scan::Complete(m));
}

#[test]
fn an_oversized_hello_is_refused_as_its_header_arrives_byte_by_byte() {
    let m = hello(20_000);
    let wire = record(&m[..100]);
    let mut scanner = Scanner::new(DEFAULT_MAX_HELLO);
    for end in 0..9 {
        assert_eq!(scanner.scan(&wire[..end]), Scan::NeedMore, "end {end}");
    }
    assert_eq!(
        scanner.scan(&wire[..9]),
        Scan::Invalid(HelloError::TooLarge)
    );
}

#[test]
fn oversized_hellos_are_refused_from_their_header() {
    let m = hello(20_000);
    let r = record(&m[..10]);
    assert_eq!(
        scan(&r, DEFAULT_MAX_HELLO),
        Scan::Invalid(HelloError::TooLarge)
    );
    assert_eq!(
        scan(&r[..9], DEFAULT_MAX_HELLO),
        Scan::Invalid(HelloError::TooLarge)
    );
}

#[test]
fn garbage_is_not_tls() {
    assert_eq!(
        scan(b"GET / HTTP/1.1\r\n", 100),
        Scan::Invalid(HelloError::NotTls)
    );
    let mut server_hello = record(&hello(10));
    server_hello[5] = 2;
    assert_eq!(
        scan(&server_hello, 100),
        Scan::Invalid(HelloError::NotClientHello)
    );
    assert_eq!(
        scan(&[22, 3, 1, 0, 0], 100),
        Scan::Invalid(HelloError::Malformed)
    );
}
