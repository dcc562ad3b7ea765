//! What several of this crate's test binaries share that names this
//! crate's types: the fleet scenario driver and the leased mode's fleets.
//! Not in the test support, which would then depend on this crate while
//! this crate takes it as a dev-dependency. Each binary uses a part.
#![allow(dead_code, unreachable_pub)]

pub mod fleet;
pub mod leased;
