//! What the unit tests (crates/core) and the integration tests (tests/) share, and
//! nothing the module ships:
//!
//! * `reference`: the model every limiter answer is checked against, built from the
//!   seed's arithmetic and sharing no code with `slidingwindow_core::window`;
//! * `rng`: a small seeded generator, so a failing random case can be replayed.

pub mod reference;
pub mod rng;
