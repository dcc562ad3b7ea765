//! The charges of response-aware limits, given back by status once the
//! inner service has answered.

use std::sync::Arc;

use smallvec::SmallVec;
use throttle_fleet_core::Demand;
use throttle_fleet_core::backend::Outcome;
use throttle_fleet_core::decision::Charged;

use super::Engine;

/// The charges of response-aware limits, settled when the inner service
/// answers (boxed in the response future only when there are some).
pub(crate) struct Settle<R> {
    shared: Arc<Engine<R>>,
    charges: SmallVec<[(Demand, Outcome); 2]>,
}

impl<R> Settle<R> {
    /// Keeps the charges of `taken` whose limit refunds by response.
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
        (!charges.is_empty()).then(|| {
            Box::new(Self {
                shared: shared.clone(),
                charges,
            })
        })
    }

    /// Gives back the costs whose limit says so for `status`.
    pub(crate) fn settle(self, status: http::StatusCode) {
        for (demand, outcome) in &self.charges {
            if let Some(refund) = &self.shared.limits[demand.rule].refund
                && refund(status)
            {
                self.shared.rules.refund(demand, outcome);
            }
        }
    }
}
