//! Classes of request: how much a request matters when capacity runs short.

use std::fmt;
use std::str::FromStr;

use crate::ConfigError;

/// How much a request matters when a backend's capacity runs short: a
/// concurrency rule with a reserve ([`InFlightLimit::reserve`](crate::InFlightLimit::reserve))
/// keeps part of its slots for the classes above a request's.
///
/// Three classes, ordered: [`Critical`](Self::Critical) (a purchase, a
/// login), [`Default`](Self::Default), [`Sheddable`](Self::Sheddable)
/// (prefetches, browsing, retries a client can make later). A request
/// whose class nobody chose is `Default`.
///
/// ```
/// use throttle_fleet_core::Class;
///
/// assert_eq!("critical".parse::<Class>().unwrap(), Class::Critical);
/// assert_eq!(Class::default(), Class::Default);
/// assert!(Class::Critical > Class::Default && Class::Default > Class::Sheddable);
/// assert_eq!(Class::Sheddable.steps_below_critical(), 2);
/// assert_eq!("urgent".parse::<Class>().unwrap_err().field(), "class");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Class {
    /// Shed last: may use every slot of a rule, its reserve included.
    Critical,
    /// What a request is unless told otherwise.
    #[default]
    Default,
    /// Shed first: may not use the slots kept for the two classes above.
    Sheddable,
}

impl Class {
    /// Every class, highest first.
    pub const ALL: [Class; 3] = [Class::Critical, Class::Default, Class::Sheddable];

    /// How many classes rank above this one (0 for `Critical`): the
    /// number of reserves it may not use.
    pub const fn steps_below_critical(self) -> u64 {
        match self {
            Class::Critical => 0,
            Class::Default => 1,
            Class::Sheddable => 2,
        }
    }

    /// The class's name, as files and metrics write it.
    pub const fn name(self) -> &'static str {
        match self {
            Class::Critical => "critical",
            Class::Default => "default",
            Class::Sheddable => "sheddable",
        }
    }

    /// The class named `name` (`critical`, `default`, `sheddable`; ASCII
    /// case ignored), if it is one.
    pub fn from_name(name: &str) -> Option<Class> {
        Class::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }
}

impl PartialOrd for Class {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Higher classes compare greater: `Critical > Default > Sheddable`.
impl Ord for Class {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .steps_below_critical()
            .cmp(&self.steps_below_critical())
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Class {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Class::from_name(s).ok_or_else(|| {
            ConfigError::new(
                "class",
                format!("must be one of critical, default, sheddable (got {s:?})"),
            )
        })
    }
}
