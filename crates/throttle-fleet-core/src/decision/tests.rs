use super::*;
use crate::algorithm::Step;

#[test]
fn the_bit_shared_by_shadow_and_shed_says_each_only_of_its_own_kind() {
    let step = |allowed| Step {
        allowed,
        ..Step::default()
    };
    let shed = |allowed| Outcome {
        shed: true,
        ..Outcome::new(step(allowed), 1)
    };
    let denied = from_outcome(0, &shed(false));
    assert!(denied.is_shed() && !denied.is_shadow());
    // An allowed request is never shed, and is not shadow for it.
    let allowed = from_outcome(0, &shed(true));
    assert!(!allowed.is_shed() && !allowed.is_shadow());
    let plain = from_outcome(0, &Outcome::new(step(false), 1));
    assert!(!plain.is_shed());
}

#[test]
fn a_decision_is_at_most_32_bytes() {
    assert!(
        std::mem::size_of::<Decision>() <= 32,
        "{}",
        std::mem::size_of::<Decision>()
    );
}

#[test]
fn spans_round_up_and_never_report_a_shorter_wait() {
    for us in [
        0,
        1,
        999_999,
        (1 << 30) - 1,
        1 << 30,
        3_600_000_001,
        86_400_000_000 * 13,
        (1 << 30) * 1_000_000 + 1,
        u64::MAX,
    ] {
        let got = Span::from_us(us).get();
        assert!(got >= Duration::from_micros(us), "{us}: {got:?}");
    }
    assert_eq!(
        Span::from_us(1_500_000).get(),
        Duration::from_micros(1_500_000)
    );
    assert_eq!(
        Span::from_us(3_600_000_001).get(),
        Duration::from_millis(3_600_001)
    );
    assert_eq!(
        Span::from_us(30 * 86_400_000_000 + 1).get(),
        Duration::from_secs(30 * 86_400 + 1)
    );
}

#[test]
fn the_figures_read_back_as_written() {
    let step = Step {
        allowed: false,
        remaining: 7,
        reset_us: 60_000_000,
        retry_after_us: 1_500,
        delay_us: 9,
    };
    let d = from_outcome(
        3,
        &Outcome {
            step,
            at_us: 42,
            degraded: true,
            shed: false,
        },
    );
    assert_eq!(
        (d.kind(), d.rule(), d.remaining(), d.at_us()),
        (Kind::Denied, Some(3), 7, 42)
    );
    assert_eq!(
        (d.reset(), d.retry_after(), d.delay()),
        (
            Duration::from_secs(60),
            Duration::from_micros(1_500),
            Duration::ZERO
        )
    );
    assert!(d.is_degraded() && !d.is_shadow() && !d.is_allowed());
    let a = from_outcome(
        1,
        &Outcome {
            step: Step {
                allowed: true,
                ..step
            },
            at_us: 1,
            degraded: false,
            shed: false,
        },
    )
    .in_tier(2);
    assert_eq!(
        (a.kind(), a.delay(), a.retry_after(), a.tier()),
        (
            Kind::Allowed,
            Duration::from_micros(9),
            Duration::ZERO,
            Some(2)
        )
    );
    let r = Decision::refused(5, Unavailable::new("down"));
    assert_eq!(
        (r.kind(), r.rule(), r.remaining()),
        (Kind::Refused, Some(5), 0)
    );
    assert_eq!(r.error().map(|e| &*e.reason), Some("down"));
}

/// What the rule at index `rule` decided alone, `outcome`, as the rule set's
/// fold makes it for one rule (`rule_set/combine.rs`).
fn from_outcome(rule: usize, outcome: &Outcome) -> Decision {
    let step = &outcome.step;
    let wait = if step.allowed {
        step.delay_us
    } else {
        step.retry_after_us.max(1)
    };
    // Only a denial is shed (see `Flags`).
    let outcome = &Outcome {
        shed: outcome.shed && !step.allowed,
        ..*outcome
    };
    let rule = u16::try_from(rule).unwrap();
    Decision::decided(
        rule,
        NO_TIER,
        outcome,
        wait,
        step.allowed,
        false,
        ShadowDenials::default(),
    )
}

/// `d` for a key in tier `tier` of its rule.
trait InTier {
    fn in_tier(self, tier: u8) -> Self;
}

impl InTier for Decision {
    fn in_tier(mut self, tier: u8) -> Self {
        if let Repr::Decided(f) = &mut self.repr {
            f.tier = tier;
        }
        self
    }
}
