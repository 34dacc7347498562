//! Counters for `INFO slidingwindow`. Commands run on Redis's main thread; atomics with
//! relaxed ordering make the counters safe to read from anywhere at no real cost.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static CHECKS: AtomicU64 = AtomicU64::new(0);
static ALLOWED: AtomicU64 = AtomicU64::new(0);
static DENIED: AtomicU64 = AtomicU64::new(0);
static PEEKS: AtomicU64 = AtomicU64::new(0);
static COUNTS: AtomicU64 = AtomicU64::new(0);
static ERRORS: AtomicU64 = AtomicU64::new(0);
static REFUNDS: AtomicU64 = AtomicU64::new(0);
static REFUNDED_UNITS: AtomicU64 = AtomicU64::new(0);

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

/// One answered REFUND, which gave back `units` (summed over its windows).
pub fn record_refund(units: u64) {
    REFUNDS.fetch_add(1, Relaxed);
    REFUNDED_UNITS.fetch_add(units, Relaxed);
}

/// One answered COUNTS.
pub fn record_counts() {
    COUNTS.fetch_add(1, Relaxed);
}

/// A call answered with an error (bad arguments, WRONGTYPE, internal).
pub fn error() {
    ERRORS.fetch_add(1, Relaxed);
}

/// The counters at one moment.
pub struct Snapshot {
    pub checks: u64,
    pub allowed: u64,
    pub denied: u64,
    pub peeks: u64,
    pub counts: u64,
    pub errors: u64,
    pub refunds: u64,
    pub refunded_units: u64,
}

pub fn snapshot() -> Snapshot {
    Snapshot {
        checks: CHECKS.load(Relaxed),
        allowed: ALLOWED.load(Relaxed),
        denied: DENIED.load(Relaxed),
        peeks: PEEKS.load(Relaxed),
        counts: COUNTS.load(Relaxed),
        errors: ERRORS.load(Relaxed),
        refunds: REFUNDS.load(Relaxed),
        refunded_units: REFUNDED_UNITS.load(Relaxed),
    }
}
