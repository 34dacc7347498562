//! The sliding window counter as pure code, with no Redis types and no I/O: what the
//! `slidingwindow` module (the crate at the repository's root) decides with.
//!
//! * `window`: the algorithm: one or several limits judged on a key's counters, the
//!   decision, the state after it, retry and reset times, refunds;
//! * `encoding`: a key's state as the bytes of a Redis string, and back (versioned;
//!   anything else is refused);
//! * `args`: the arguments after the key, parsed into a request; every argument error
//!   is made here.
//!
//! The module reads argv into `args`, the key's bytes into `encoding`, asks `window`,
//! and writes and replies; lua/slidingwindow.lua mirrors these three files.

pub mod args;
pub mod encoding;
pub mod window;

#[cfg(test)]
#[path = "unit_tests/support.rs"]
mod test_support;
