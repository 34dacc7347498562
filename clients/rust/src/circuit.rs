//! The circuit that answers at once while Redis is unavailable.
//!
//! While Redis is up it costs one atomic load per call. After a call fails with an outage
//! error it opens: calls are answered at once without Redis (fail-open or fail-closed),
//! and at most once per `probe_interval` one call starts a probe in the background (a
//! task no request waits on). The first probe that gets an answer closes it again. One
//! WARNING line (target `slidingwindow`) when it opens, one when it recovers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::Error;

/// Called with every outage error (requests and probes), e.g. to count them.
pub type ErrorHook = Arc<dyn Fn(&Error) + Send + Sync>;

/// What a call does, as the circuit says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Redis is up: make the call.
    Call,
    /// Outage: answer without Redis.
    Skip,
    /// Outage, a probe is due: start one in the background, answer without Redis.
    Probe,
}

#[derive(Debug)]
struct State {
    probing: bool,
    since: Instant,
    next_probe: Instant,
    answered_without: u64,
}

/// Outage state of one limiter, shared by all its tasks.
pub(crate) struct Circuit {
    pub(crate) fail_open: bool,
    pub(crate) probe_interval: Duration,
    down: AtomicBool,
    state: Mutex<State>,
    pub(crate) outages: AtomicU64,
    pub(crate) probes: AtomicU64,
    on_error: Option<ErrorHook>,
}

impl Circuit {
    pub(crate) fn new(
        fail_open: bool,
        probe_interval: Duration,
        on_error: Option<ErrorHook>,
    ) -> Circuit {
        let now = Instant::now();
        Circuit {
            fail_open,
            probe_interval,
            down: AtomicBool::new(false),
            state: Mutex::new(State {
                probing: false,
                since: now,
                next_probe: now,
                answered_without: 0,
            }),
            outages: AtomicU64::new(0),
            probes: AtomicU64::new(0),
            on_error,
        }
    }

    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    pub(crate) fn is_probing(&self) -> bool {
        self.state.lock().unwrap().probing
    }

    pub(crate) fn gate(&self) -> Gate {
        if !self.is_down() {
            return Gate::Call; // the common case, lock-free
        }
        let mut s = self.state.lock().unwrap();
        if !self.is_down() {
            return Gate::Call;
        }
        s.answered_without += 1;
        let now = Instant::now();
        if s.probing || now < s.next_probe {
            return Gate::Skip;
        }
        s.probing = true;
        self.probes.fetch_add(1, Ordering::Relaxed);
        s.next_probe = now + self.probe_interval; // between two probes' starts
        Gate::Probe
    }

    /// Records a failed call. False when `e` is no outage: the caller returns it.
    pub(crate) fn failed(&self, e: &Error) -> bool {
        if !e.is_outage() {
            return false;
        }
        let opened = {
            let mut s = self.state.lock().unwrap();
            let opened = !self.is_down();
            if opened {
                let now = Instant::now();
                self.down.store(true, Ordering::Release);
                s.since = now;
                s.next_probe = now + self.probe_interval;
                s.answered_without = 0;
                self.outages.fetch_add(1, Ordering::Relaxed);
            }
            opened
        };
        if opened {
            let verdict = if self.fail_open {
                "allowing (fail-open)"
            } else {
                "denying (fail-closed)"
            };
            log::warn!(
                target: "slidingwindow",
                "rate limiter: Redis unavailable ({e}); {verdict} requests without asking it \
                 until a probe (one every {:?}) gets an answer",
                self.probe_interval
            );
        }
        self.hook(e);
        true
    }

    /// Records how a probe ended: `Ok` when the server answered (a reply, or an error
    /// reply that is no outage: WRONGTYPE proves the server is back).
    pub(crate) fn probed(&self, outcome: Result<(), &Error>) {
        let recovered = match outcome {
            Ok(()) => true,
            Err(e) => !e.is_outage(),
        };
        let (was_down, since, answered) = {
            let mut s = self.state.lock().unwrap();
            s.probing = false;
            let was = self.is_down();
            if recovered {
                self.down.store(false, Ordering::Release);
            }
            (was, s.since, s.answered_without)
        };
        if recovered && was_down {
            log::warn!(
                target: "slidingwindow",
                "rate limiter: Redis reachable again after {:.1}s; {answered} requests were \
                 answered without it",
                since.elapsed().as_secs_f64()
            );
        } else if let Err(e) = outcome {
            if e.is_outage() {
                self.hook(e);
            }
        }
    }

    fn hook(&self, e: &Error) {
        if let Some(h) = &self.on_error {
            // A broken hook must not turn fail-open into an error.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(e))).is_err() {
                log::error!(target: "slidingwindow", "rate limiter: on_error hook panicked");
            }
        }
    }
}
