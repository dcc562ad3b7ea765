//! What an admitted request keeps until its response: the charges of
//! response-aware limits, given back by status once the inner service has
//! answered, and the slots of concurrency rules, handed to the response
//! body.

use std::sync::Arc;

use smallvec::SmallVec;
use throttle_fleet_core::Demand;
use throttle_fleet_core::backend::Outcome;
use throttle_fleet_core::decision::Charged;
use throttle_fleet_core::rule_set::Slots;

use super::Engine;

/// What a request keeps until the inner service answers (boxed in the
/// response future only when there is something: policies with neither a
/// response-aware limit nor a concurrency rule pay for one empty field).
pub(crate) struct Settle<R> {
    shared: Arc<Engine<R>>,
    charges: SmallVec<[(Demand, Outcome); 2]>,
    slots: Option<Box<Slots>>,
}

impl<R> Settle<R> {
    /// Keeps the charges of `charged` whose limit refunds by response, and
    /// the slots it took under concurrency rules.
    pub(crate) fn of(
        shared: &Arc<Engine<R>>,
        demands: &[Demand],
        charged: &Charged,
    ) -> Option<Box<Self>> {
        let charges: SmallVec<[(Demand, Outcome); 2]> = charged
            .taken
            .iter()
            .map(|&(i, o)| (demands[i], o))
            .filter(|(d, _)| shared.limits[d.rule].refund.is_some())
            .collect();
        let slots = shared.rules.slots(demands, charged);
        (!charges.is_empty() || slots.is_some()).then(|| {
            Box::new(Self {
                shared: shared.clone(),
                charges,
                slots,
            })
        })
    }

    /// Keeps `slots` alone (a policy with no response-aware limit).
    pub(crate) fn holding(shared: &Arc<Engine<R>>, slots: Option<Box<Slots>>) -> Option<Box<Self>> {
        slots.map(|slots| {
            Box::new(Self {
                shared: shared.clone(),
                charges: SmallVec::new(),
                slots: Some(slots),
            })
        })
    }

    /// Gives back the costs whose limit says so for `status`; hands back
    /// the slots, for the response body to hold until it ends.
    pub(crate) fn settle(self, status: http::StatusCode) -> Option<Box<Slots>> {
        for (demand, outcome) in &self.charges {
            if let Some(refund) = &self.shared.limits[demand.rule].refund
                && refund(status)
            {
                self.shared.rules.refund(demand, outcome);
            }
        }
        self.slots
    }
}
