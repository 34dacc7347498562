//! Counters for `INFO slidingwindow`. Commands run on Redis's main thread; atomics with
//! relaxed ordering make the counters safe to read from anywhere at no real cost.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub static CHECKS: AtomicU64 = AtomicU64::new(0);
pub static ALLOWED: AtomicU64 = AtomicU64::new(0);
pub static DENIED: AtomicU64 = AtomicU64::new(0);
pub static PEEKS: AtomicU64 = AtomicU64::new(0);
pub static ERRORS: AtomicU64 = AtomicU64::new(0);

/// One answered call: a PEEK, or a CHECK that was allowed or denied.
pub fn record(peek: bool, allowed: bool) {
    if peek {
        PEEKS.fetch_add(1, Relaxed);
        return;
    }
    CHECKS.fetch_add(1, Relaxed);
    if allowed {
        ALLOWED.fetch_add(1, Relaxed);
    } else {
        DENIED.fetch_add(1, Relaxed);
    }
}

/// A call answered with an error (bad arguments, WRONGTYPE, internal).
pub fn error() {
    ERRORS.fetch_add(1, Relaxed);
}

/// (field, value) pairs in the order INFO shows them.
pub fn snapshot() -> [(&'static str, u64); 5] {
    [
        ("checks", CHECKS.load(Relaxed)),
        ("allowed", ALLOWED.load(Relaxed)),
        ("denied", DENIED.load(Relaxed)),
        ("peeks", PEEKS.load(Relaxed)),
        ("errors", ERRORS.load(Relaxed)),
    ]
}
