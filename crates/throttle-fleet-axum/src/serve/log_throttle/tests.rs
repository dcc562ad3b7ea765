use super::*;

const MS: Duration = Duration::from_millis(1);

#[test]
fn the_first_event_is_logged_at_once_and_the_rest_of_its_second_once_it_is_up() {
    let t0 = Instant::now();
    let mut log = LogThrottle::default();
    assert_eq!(log.count('a', t0), Count::Log(1, 'a'));
    assert_eq!(log.count('b', t0 + MS), Count::FlushAt(t0 + LOG_EVERY));
    assert_eq!(log.count('c', t0 + 2 * MS), Count::Held);
    // No later event: the flush reports the two, with the latest.
    assert_eq!(log.flush(t0 + LOG_EVERY), Flush::Log(2, 'c'));
    // And the next event is held for a second after that line.
    assert_eq!(
        log.count('d', t0 + LOG_EVERY + MS),
        Count::FlushAt(t0 + 2 * LOG_EVERY)
    );
}

#[test]
fn an_event_after_the_second_logs_what_was_held_and_the_flush_finds_nothing() {
    let t0 = Instant::now();
    let mut log = LogThrottle::default();
    assert_eq!(log.count(1, t0), Count::Log(1, 1));
    assert_eq!(log.count(2, t0 + MS), Count::FlushAt(t0 + LOG_EVERY));
    // An event at the second's end comes before the flush runs.
    assert_eq!(log.count(3, t0 + LOG_EVERY), Count::Log(2, 3));
    assert_eq!(log.flush(t0 + LOG_EVERY), Flush::Done);
}

#[test]
fn a_flush_that_comes_early_waits_for_the_second_since_the_last_line() {
    let t0 = Instant::now();
    let mut log = LogThrottle::default();
    assert_eq!(log.count(1, t0), Count::Log(1, 1));
    assert_eq!(log.count(2, t0 + MS), Count::FlushAt(t0 + LOG_EVERY));
    // A line at t0 + 1 s took the held event, and a new one is held
    // within the next second, under the flush already due.
    assert_eq!(log.count(3, t0 + LOG_EVERY), Count::Log(2, 3));
    assert_eq!(log.count(4, t0 + LOG_EVERY + MS), Count::Held);
    // The flush, run late, is still too early for that one.
    assert_eq!(
        log.flush(t0 + LOG_EVERY + 2 * MS),
        Flush::Again(t0 + 2 * LOG_EVERY)
    );
    assert_eq!(log.flush(t0 + 2 * LOG_EVERY), Flush::Log(1, 4));
}
