//! A log line a second at most for one kind of event, with the count since
//! the last line: the first event is logged at once; those that follow
//! within the second are counted, and reported by one line when the
//! second is up, whether or not another event comes then. The caller
//! runs the timer ([`Count::FlushAt`]); this is the bookkeeping alone, on
//! the times it is given.

use std::time::Duration;

use tokio::time::Instant;

/// At most one log line per this long for each kind of event, with the
/// count since the last line: a flood of refused connections must not
/// become a flood of log lines.
pub(super) const LOG_EVERY: Duration = Duration::from_secs(1);

/// The events of one kind, and when their last line was.
pub(super) struct LogThrottle<T> {
    last: Option<Instant>,
    /// Events not yet in a line.
    pending: u64,
    /// The latest of them (its detail goes in the line).
    latest: Option<T>,
    /// Whether a flush has been asked of the caller and not yet run.
    flush_due: bool,
}

impl<T> Default for LogThrottle<T> {
    fn default() -> Self {
        Self {
            last: None,
            pending: 0,
            latest: None,
            flush_due: false,
        }
    }
}

/// What to do about an event just counted.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Count<T> {
    /// Log a line now for this many events, the latest being this one.
    Log(u64, T),
    /// Held for a line at this time: call [`LogThrottle::flush`] then.
    FlushAt(Instant),
    /// Held for the line a flush already due will log.
    Held,
}

/// What a flush found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Flush<T> {
    /// Log a line now for this many events, the latest being this one.
    Log(u64, T),
    /// Too early (a line went out since the flush was asked): flush again
    /// at this time.
    Again(Instant),
    /// Nothing held: a line since took them.
    Done,
}

impl<T> LogThrottle<T> {
    /// Counts `event`, which happened `now`.
    pub(super) fn count(&mut self, event: T, now: Instant) -> Count<T> {
        self.pending += 1;
        match self.last {
            Some(last) if now < last + LOG_EVERY => {
                self.latest = Some(event);
                if self.flush_due {
                    Count::Held
                } else {
                    self.flush_due = true;
                    Count::FlushAt(last + LOG_EVERY)
                }
            }
            _ => {
                self.last = Some(now);
                self.latest = None;
                Count::Log(std::mem::take(&mut self.pending), event)
            }
        }
    }

    /// The flush asked by [`Count::FlushAt`], run `now`.
    pub(super) fn flush(&mut self, now: Instant) -> Flush<T> {
        if let Some(last) = self.last
            && self.pending > 0
            && now < last + LOG_EVERY
        {
            return Flush::Again(last + LOG_EVERY);
        }
        self.flush_due = false;
        match self.latest.take() {
            Some(event) if self.pending > 0 => {
                self.last = Some(now);
                Flush::Log(std::mem::take(&mut self.pending), event)
            }
            _ => Flush::Done,
        }
    }
}

#[cfg(test)]
mod tests;
