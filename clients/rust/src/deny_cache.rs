//! An exact local cache of refusals: denials that cost Redis nothing.
//!
//! The rules of the Python client's `deny_cache.py`, ported as they are. A refused
//! CHECK's `retry_after` is the smallest time after which the same request, with no
//! other traffic, is allowed; other traffic only raises the counts. So until then the
//! same request (same key, same limits, same cost, same unit and clock) is refused, and
//! the cache answers exactly what Redis would answer, without asking it. The instant
//! before which Redis cannot allow it is computed on the safe side:
//!
//! * Redis decided between sending and receiving: the deadline counts from the send.
//! * Milliseconds (`MS`, server clock): refused while `t < t_send + (r - 1) ms`.
//! * Seconds (server clock): the server floors its clock to seconds, so alone that gives
//!   `t_send + (r - 1) s`. When the limiter knows the server clock's offset to its own
//!   (`TIME`, measured as an interval from the call's send and receive instants, renewed
//!   every `clock_refresh`), the entry lasts until the server reaches `(S + r) * 1000`,
//!   the later of the two bounds. Not measured on a cluster (TIME reaches some node).
//! * Explicit `now` (the caller's clock): exact in units, `now0 <= now < now0 + r`.
//! * `margin` (1 ms plus 500 ppm of the interval and of the offset's age) covers slewing.
//! * `cost > limit` (`retry_after = -1` on a refusal) is never allowed: cached without end.
//!
//! A cached answer has the fields Redis would send: `retry_after` and `reset_after`
//! counted down by the whole units that have surely elapsed (never shorter than Redis's),
//! per-limit `retry_after` turned to -1 once that limit alone surely allows, `count` and
//! `remaining` as refused. While a refusal's entry has ended, calls on that key and limits
//! go to Redis one at a time (the others wait for the answer, and are answered from it if
//! it is again a refusal). A refund through the limiter clears the key's entries; during
//! an outage the cache is emptied and bypassed.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::error::Error;
use crate::result::{Decision, LimitResult};
use crate::send::SendCommand;

/// Redis keys held at the most by default.
pub const DEFAULT_MAX_ENTRIES: usize = 10_000;
const PPM: f64 = 500e-6;
const MARGIN: f64 = 0.001;
const WAIT_TIMEOUT: Duration = Duration::from_secs(5);
const CLOCK_SAMPLES: usize = 3;
const MAX_PER_KEY: usize = 8;

#[cfg(test)]
thread_local! {
    /// The conformance replay's clock (seconds), when set.
    pub(crate) static FAKE_NOW: std::cell::Cell<Option<f64>> = const { std::cell::Cell::new(None) };
}

fn mono() -> f64 {
    #[cfg(test)]
    if let Some(t) = FAKE_NOW.with(|c| c.get()) {
        return t;
    }
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// Where one CHECK (or REFUND) meets the cache.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    pub(crate) key: String,
    pub(crate) limits: Vec<(u64, u64)>,
    pub(crate) ms: bool,
    pub(crate) now: Option<u64>,
    pub(crate) cost: u64,
}

type Slot = (Vec<(u64, u64)>, bool, bool, u64);

impl Spec {
    fn slot(&self) -> Slot {
        (self.limits.clone(), self.ms, self.now.is_none(), self.cost)
    }
}

struct Entry {
    result: Decision,
    never: bool,
    deadline: f64,
    origin: f64,
    flight: Option<watch::Sender<bool>>,
    waiters: usize,
}

struct Held {
    tick: u64,
    slots: Vec<(Slot, Entry)>,
}

#[derive(Clone, Copy, Debug)]
struct Clock {
    lo: f64,
    hi: f64,
    at: f64,
}

/// What the cache answered, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DenyCacheStats {
    /// Answered without Redis.
    pub hits: u64,
    /// Consulted and sent to Redis.
    pub misses: u64,
    /// Refusals remembered.
    pub stored: u64,
    /// Entries that ended.
    pub expired: u64,
    /// Entries cleared by a refund or `forget`.
    pub cleared: u64,
    /// Entries evicted by the size bound.
    pub evicted: u64,
    /// Calls that waited for another call on the same key.
    pub waits: u64,
    /// Entries held now.
    pub entries: u64,
}

struct Inner {
    keys: HashMap<String, Held>,
    order: BTreeMap<u64, String>,
    tick: u64,
    stats: DenyCacheStats,
    clears: u64,
    clock: Option<Clock>,
    clock_busy: bool,
}

/// Refusals remembered until Redis could first allow the same request. Thread and task
/// safe: one lock, held for map operations only.
pub struct DenyCache {
    max_entries: usize,
    clock_refresh: Duration,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for DenyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DenyCache")
            .field("max_entries", &self.max_entries)
            .finish()
    }
}

impl Default for DenyCache {
    fn default() -> DenyCache {
        DenyCache::new(DEFAULT_MAX_ENTRIES, Duration::from_secs(10))
    }
}

enum Enter {
    Hit(Decision),
    Miss { lead: bool },
    Wait(watch::Receiver<bool>),
}

fn elapsed_units(spec: &Spec, origin: f64, t: f64) -> u64 {
    if let Some(now) = spec.now {
        return now.saturating_sub(origin as u64);
    }
    let seconds = (t - origin).max(0.0);
    if spec.ms {
        (seconds * 1000.0).floor() as u64
    } else {
        seconds.floor() as u64
    }
}

fn count_down(result: &Decision, cost: u64, e: u64) -> Decision {
    if e == 0 {
        return result.clone();
    }
    let e = e.min(i64::MAX as u64) as i64;
    let one = |r: &LimitResult, summary: bool| {
        let mut retry = r.retry_after;
        if retry > 0 {
            retry -= e;
            if retry <= 0 {
                retry = -1; // surely elapsed: this limit alone allows now
            }
        }
        let alone = r.allowed || (retry == -1 && cost <= r.limit);
        LimitResult {
            retry_after: retry,
            reset_after: r.reset_after.saturating_sub(e as u64),
            allowed: if summary { false } else { alone },
            ..*r
        }
    };
    let mut limits: Vec<LimitResult> = result.limits.iter().map(|r| one(r, false)).collect();
    let mut summary = one(&result.summary, true);
    if summary.retry_after == -1 && result.summary.retry_after > 0 {
        summary.retry_after = 1; // never reached: the entry ends first
    }
    if limits.len() == 1 {
        limits = vec![summary];
    }
    Decision {
        summary,
        limits,
        governing: result.governing,
    }
}

impl DenyCache {
    /// A cache of at most `max_entries` Redis keys (least recently used first out) that
    /// measures the server clock's offset every `clock_refresh` (zero: never; then a
    /// seconds refusal lasts `retry_after - 1` seconds).
    pub fn new(max_entries: usize, clock_refresh: Duration) -> DenyCache {
        DenyCache {
            max_entries: max_entries.max(1),
            clock_refresh,
            inner: Mutex::new(Inner {
                keys: HashMap::new(),
                order: BTreeMap::new(),
                tick: 0,
                stats: DenyCacheStats::default(),
                clears: 0,
                clock: None,
                clock_busy: false,
            }),
        }
    }

    /// The counters, for metrics.
    pub fn stats(&self) -> DenyCacheStats {
        let g = self.inner.lock().unwrap();
        let mut s = g.stats;
        s.entries = g.keys.values().map(|h| h.slots.len() as u64).sum();
        s
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap()
            .keys
            .values()
            .map(|h| h.slots.len())
            .sum()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every refusal held for the Redis key `key` (e.g. after deleting it).
    pub fn forget(&self, key: &str) {
        let mut g = self.inner.lock().unwrap();
        g.clears += 1;
        if let Some(held) = g.keys.remove(key) {
            g.order.remove(&held.tick);
            g.stats.cleared += held.slots.len() as u64;
            for (_, e) in held.slots {
                if let Some(f) = e.flight {
                    let _ = f.send(true);
                }
            }
        }
    }

    /// Drops everything.
    pub fn clear(&self) {
        let mut g = self.inner.lock().unwrap();
        g.clears += 1;
        for (_, held) in g.keys.drain() {
            for (_, e) in held.slots {
                if let Some(f) = e.flight {
                    let _ = f.send(true);
                }
            }
        }
        g.order.clear();
    }

    fn touch(g: &mut Inner, key: &str) {
        g.tick += 1;
        let tick = g.tick;
        if let Some(h) = g.keys.get_mut(key) {
            let old = std::mem::replace(&mut h.tick, tick);
            g.order.remove(&old);
            g.order.insert(tick, key.to_string());
        }
    }

    fn enter(&self, spec: &Spec) -> Enter {
        let t = mono();
        let slot = spec.slot();
        let mut g = self.inner.lock().unwrap();
        let found = g
            .keys
            .get(&spec.key)
            .and_then(|h| h.slots.iter().position(|(s, _)| *s == slot));
        let Some(i) = found else {
            g.stats.misses += 1;
            return Enter::Miss { lead: false };
        };
        Self::touch(&mut g, &spec.key);
        let inner = &mut *g;
        let entry = &mut inner.keys.get_mut(&spec.key).unwrap().slots[i].1;
        let live = entry.never
            || match spec.now {
                None => t < entry.deadline,
                Some(now) => entry.origin <= now as f64 && (now as f64) < entry.deadline,
            };
        if live {
            inner.stats.hits += 1;
            let e = elapsed_units(spec, entry.origin, t);
            return Enter::Hit(count_down(&entry.result, spec.cost, e));
        }
        if spec.now.is_some() {
            inner.stats.misses += 1;
            return Enter::Miss { lead: false };
        }
        // Ended: one call at a time goes to Redis; the others wait for its answer.
        if let Some(f) = &entry.flight {
            entry.waiters += 1;
            inner.stats.waits += 1;
            return Enter::Wait(f.subscribe());
        }
        if entry.deadline != f64::NEG_INFINITY {
            inner.stats.expired += 1;
            entry.deadline = f64::NEG_INFINITY;
        }
        let (tx, _) = watch::channel(false);
        entry.flight = Some(tx);
        inner.stats.misses += 1;
        Enter::Miss { lead: true }
    }

    fn left(&self, spec: &Spec) {
        let slot = spec.slot();
        let mut g = self.inner.lock().unwrap();
        if let Some(h) = g.keys.get_mut(&spec.key) {
            if let Some((_, e)) = h.slots.iter_mut().find(|(s, _)| *s == slot) {
                e.waiters = e.waiters.saturating_sub(1);
            }
        }
    }

    /// `call()` through the cache: a cached refusal, or the call's answer (remembered when
    /// it is a refusal).
    pub(crate) async fn run<S, F, Fut>(
        &self,
        spec: &Spec,
        sender: &S,
        refund: bool,
        call: F,
    ) -> Result<Decision, Error>
    where
        S: SendCommand,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Decision, Error>>,
    {
        if refund {
            self.forget(&spec.key);
            let answer = call().await;
            self.forget(&spec.key);
            return answer;
        }
        let lead = loop {
            match self.enter(spec) {
                Enter::Hit(d) => return Ok(d),
                Enter::Miss { lead } => break lead,
                Enter::Wait(mut rx) => {
                    let _ = tokio::time::timeout(WAIT_TIMEOUT, rx.wait_for(|v| *v)).await;
                    self.left(spec);
                }
            }
        };
        let clears = self.inner.lock().unwrap().clears;
        let t_send = mono();
        let answer = call().await;
        let t_recv = mono();
        if let Ok(d) = &answer {
            if self.wants_clock(spec, d, sender) {
                self.measure(sender).await;
            }
        }
        self.done(spec, lead, answer.as_ref().ok(), clears, t_send, t_recv);
        answer
    }

    fn wants_clock<S: SendCommand>(&self, spec: &Spec, d: &Decision, sender: &S) -> bool {
        if spec.ms || spec.now.is_some() || self.clock_refresh.is_zero() || sender.is_cluster() {
            return false;
        }
        if d.allowed() || d.degraded() {
            return false;
        }
        let mut g = self.inner.lock().unwrap();
        if g.clock_busy {
            return false;
        }
        let fresh = g
            .clock
            .is_some_and(|c| mono() - c.at < self.clock_refresh.as_secs_f64());
        if !fresh {
            g.clock_busy = true;
        }
        !fresh
    }

    async fn measure<S: SendCommand>(&self, sender: &S) {
        for _ in 0..CLOCK_SAMPLES {
            let c1 = mono();
            let reply =
                tokio::time::timeout(Duration::from_millis(500), sender.send(redis::cmd("TIME")))
                    .await;
            let c2 = mono();
            let Ok(Ok(v)) = reply else { break };
            let Ok((s, us)) = redis::from_redis_value::<(u64, u64)>(v) else {
                break;
            };
            let server_ms = s as f64 * 1000.0 + us as f64 / 1000.0;
            let clock = Clock {
                lo: server_ms - c2 * 1000.0,
                hi: server_ms - c1 * 1000.0,
                at: c2,
            };
            let mut g = self.inner.lock().unwrap();
            let keep_old = g.clock.is_some_and(|old| {
                (clock.hi - clock.lo) > (old.hi - old.lo)
                    && c2 - old.at < self.clock_refresh.as_secs_f64()
            });
            if !keep_old {
                g.clock = Some(clock);
            }
        }
        self.inner.lock().unwrap().clock_busy = false;
    }

    fn deadline(&self, spec: &Spec, result: &Decision, t_send: f64, clock: Option<Clock>) -> f64 {
        let r = result.retry_after() as f64;
        if let Some(now) = spec.now {
            return now as f64 + r;
        }
        if spec.ms {
            let span = (r - 1.0) / 1000.0;
            return t_send + span - MARGIN - PPM * span;
        }
        let span = r - 1.0;
        let mut best = t_send + span - MARGIN - PPM * span;
        if let Some(c) = clock {
            let age = t_send - c.at;
            let second = ((t_send * 1000.0 + c.lo) / 1000.0).floor();
            let end = ((second + r) * 1000.0 - c.hi) / 1000.0;
            let span = end - t_send;
            best = best.max(end - MARGIN - PPM * (span + age.abs()));
        }
        best
    }

    fn done(
        &self,
        spec: &Spec,
        lead: bool,
        answer: Option<&Decision>,
        clears: u64,
        t_send: f64,
        t_recv: f64,
    ) {
        let slot = spec.slot();
        let mut g = self.inner.lock().unwrap();
        let clock = g.clock;
        let same_clears = clears == g.clears;
        let refused = answer.filter(|d| !d.allowed() && !d.degraded() && same_clears);
        let mut wake = None;
        let pos = g
            .keys
            .get(&spec.key)
            .and_then(|h| h.slots.iter().position(|(s, _)| *s == slot));
        if let Some(stored) = refused {
            let never = stored.retry_after() < 0;
            let deadline = if never {
                f64::INFINITY
            } else {
                self.deadline(spec, stored, t_send, clock)
            };
            let origin = spec.now.map(|n| n as f64).unwrap_or(t_recv);
            let mut fresh = Entry {
                result: stored.clone(),
                never,
                deadline,
                origin,
                flight: None,
                waiters: 0,
            };
            if !g.keys.contains_key(&spec.key) {
                g.keys.insert(
                    spec.key.clone(),
                    Held {
                        tick: 0,
                        slots: Vec::new(),
                    },
                );
            }
            let held = g.keys.get_mut(&spec.key).unwrap();
            match pos {
                Some(i) => {
                    let old = &mut held.slots[i].1;
                    fresh.waiters = old.waiters;
                    // This call led the flight: wake the waiters (they read the new entry).
                    if lead {
                        wake = old.flight.take();
                    } else {
                        fresh.flight = old.flight.take();
                    }
                    held.slots[i].1 = fresh;
                }
                None => {
                    if held.slots.len() >= MAX_PER_KEY {
                        held.slots.remove(0);
                    }
                    held.slots.push((slot, fresh));
                }
            }
            Self::touch(&mut g, &spec.key);
            if g.keys.get(&spec.key).is_some_and(|h| h.tick == 0) {
                g.tick += 1;
                let tick = g.tick;
                g.keys.get_mut(&spec.key).unwrap().tick = tick;
                g.order.insert(tick, spec.key.clone());
            }
            g.stats.stored += 1;
            while g.keys.len() > self.max_entries {
                let Some((_, k)) = g.order.pop_first() else {
                    break;
                };
                if let Some(h) = g.keys.remove(&k) {
                    g.stats.evicted += h.slots.len() as u64;
                }
            }
        } else if lead {
            if let Some(i) = pos {
                let held = g.keys.get_mut(&spec.key).unwrap();
                let flight = held.slots[i].1.flight.take();
                let waiters = held.slots[i].1.waiters;
                let over = answer.is_none_or(|d| d.degraded()) || waiters == 0;
                if over {
                    // Allowed with nobody waiting, failed or degraded: the refusal is over.
                    held.slots.remove(i);
                    if held.slots.is_empty() {
                        let tick = held.tick;
                        g.keys.remove(&spec.key);
                        g.order.remove(&tick);
                    }
                }
                wake = flight;
            }
        }
        drop(g);
        if let Some(w) = wake {
            let _ = w.send(true);
        }
    }
}
