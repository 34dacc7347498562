//! The limiter: one command per call, the backend chosen by itself, outages answered at
//! once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Backend, Chooser, Mode, Op, Wire};
use crate::call::Call;
use crate::circuit::{Circuit, ErrorHook, Gate};
use crate::deny_cache::{DenyCache, Spec};
use crate::error::Error;
use crate::rates::Limit;
use crate::result::{Counts, Decision};
use crate::send::SendCommand;

/// The default per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);
/// The default time between two probes' starts during an outage.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(1);

struct Inner<S> {
    sender: S,
    chooser: Chooser,
    circuit: Circuit,
    prefix: String,
    timeout: Duration,
    deny_cache: Option<Arc<DenyCache>>,
    sent: AtomicU64,
}

/// A sliding-window-counter limiter on Redis: one `SLIDINGWINDOW.CHECK` (or the Functions
/// library's `FCALL`, or `EVALSHA` on Redis 6.2) per call, on one key per identity
/// (`<prefix><id>`, default prefix `rate:`).
///
/// Cheap to clone (an `Arc`); share one per application. Calls need a tokio runtime (a
/// probe during an outage is a spawned task).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use slidingwindow_client::{Call, Limiter};
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// let limiter = Limiter::new(client.get_connection_manager().await?);
/// let d = limiter.check("user:42", &Call::new(100, 60)).await?;
/// if !d.allowed() {
///     println!("retry in {:?} s", d.summary.retry_after_seconds());
/// }
/// let d = limiter.check_limits("user:42", "10/second;1000/hour").await?;
/// # let _ = d; Ok(()) }
/// ```
///
/// While Redis is unavailable (refused, reset, frozen past the timeout, loading, failing
/// over) calls answer at once without it: allowed (fail-open, the default) or denied
/// (`fail_open(false)`), with [`Decision::degraded`] set; one probe at a time, every
/// `probe_interval`, finds out when it is back.
pub struct Limiter<S> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for Limiter<S> {
    fn clone(&self) -> Self {
        Limiter {
            inner: self.inner.clone(),
        }
    }
}

impl<S> std::fmt::Debug for Limiter<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("prefix", &self.inner.prefix)
            .field("timeout", &self.inner.timeout)
            .field("backend", &self.inner.chooser.choice)
            .finish()
    }
}

/// Options of a [`Limiter`]; [`Limiter::builder`] makes one.
pub struct LimiterBuilder<S> {
    sender: S,
    prefix: String,
    timeout: Duration,
    fail_open: bool,
    probe_interval: Duration,
    backend: Backend,
    on_error: Option<ErrorHook>,
    deny_cache: Option<Arc<DenyCache>>,
}

impl<S: SendCommand> LimiterBuilder<S> {
    /// Put before every id to make the Redis key (default `rate:`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long one call may wait for Redis (default 500 ms); past it the call counts as
    /// an outage.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What calls answer during an outage: allowed (`true`, the default) or denied.
    pub fn fail_open(mut self, fail_open: bool) -> Self {
        self.fail_open = fail_open;
        self
    }

    /// Time between two probes' starts during an outage (default 1 s; at least 1 ms).
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Which server-side code answers (default [`Backend::Auto`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Called with the error of every call to Redis that failed with an outage.
    pub fn on_error(mut self, hook: impl Fn(&Error) + Send + Sync + 'static) -> Self {
        self.on_error = Some(Arc::new(hook));
        self
    }

    /// Remember refusals and answer them without Redis until Redis could allow them (off
    /// by default in the bare limiter; [`RateLimitLayer`](crate::RateLimitLayer) turns a
    /// default one on). See [`DenyCache`].
    pub fn deny_cache(mut self, cache: Option<DenyCache>) -> Self {
        self.deny_cache = cache.map(Arc::new);
        self
    }

    /// The limiter.
    pub fn build(self) -> Limiter<S> {
        Limiter {
            inner: Arc::new(Inner {
                sender: self.sender,
                chooser: Chooser::new(self.backend),
                circuit: Circuit::new(self.fail_open, self.probe_interval, self.on_error),
                prefix: self.prefix,
                timeout: self.timeout,
                deny_cache: self.deny_cache,
                sent: AtomicU64::new(0),
            }),
        }
    }
}

/// Counters of one limiter, for tests, logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimiterStats {
    /// Calls sent to Redis by requests (probes not included).
    pub sent: u64,
    /// Outages seen (each logged once).
    pub outages: u64,
    /// Probes started.
    pub probes: u64,
    /// Times the library was looked for.
    pub detections: u64,
    /// Times this limiter loaded the library.
    pub loads: u64,
    /// Whether the circuit is open (an outage now).
    pub down: bool,
    /// Whether a probe is in flight.
    pub probing: bool,
    /// What calls are sent as (`None` while undecided).
    pub mode: Option<Mode>,
}

impl<S: SendCommand> Limiter<S> {
    /// A limiter with the defaults (prefix `rate:`, 500 ms timeout, fail-open, backend
    /// auto, no deny cache).
    pub fn new(sender: S) -> Limiter<S> {
        Limiter::builder(sender).build()
    }

    /// A builder for the other options.
    pub fn builder(sender: S) -> LimiterBuilder<S> {
        LimiterBuilder {
            sender,
            prefix: "rate:".into(),
            timeout: DEFAULT_TIMEOUT,
            fail_open: true,
            probe_interval: DEFAULT_PROBE_INTERVAL,
            backend: Backend::Auto,
            on_error: None,
            deny_cache: None,
        }
    }

    /// The client this limiter sends through.
    pub fn sender(&self) -> &S {
        &self.inner.sender
    }

    /// The Redis key of `id`: `<prefix><id>`.
    pub fn key(&self, id: &str) -> String {
        format!("{}{id}", self.inner.prefix)
    }

    /// Whether this limiter allows during an outage.
    pub fn fails_open(&self) -> bool {
        self.inner.circuit.fail_open
    }

    /// The deny cache, if one is on.
    pub fn deny_cache(&self) -> Option<&DenyCache> {
        self.inner.deny_cache.as_deref()
    }

    /// The counters.
    pub fn stats(&self) -> LimiterStats {
        let i = &self.inner;
        LimiterStats {
            sent: i.sent.load(Ordering::Relaxed),
            outages: i.circuit.outages.load(Ordering::Relaxed),
            probes: i.circuit.probes.load(Ordering::Relaxed),
            detections: i.chooser.detections.load(Ordering::Relaxed),
            loads: i.chooser.loads.load(Ordering::Relaxed),
            down: i.circuit.is_down(),
            probing: i.circuit.is_probing(),
            mode: i.chooser.mode(),
        }
    }

    /// Counts the request (`cost` units) when every limit allows it; answers the
    /// decision. See [`Call`] for limits, unit, cost and `now`.
    pub async fn check(&self, id: &str, call: &Call) -> Result<Decision, Error> {
        self.run(Op::Check, id, call, true).await
    }

    /// What `check` would answer, changing nothing (read-only: runs on replicas).
    pub async fn peek(&self, id: &str, call: &Call) -> Result<Decision, Error> {
        self.run(Op::Peek, id, call, true).await
    }

    /// Gives back what an allowed `check` with the same arguments counted (never below
    /// 0, the key's expiry kept) and answers what `peek` answers right after. Not
    /// idempotent: refund once, only after an allowed, not degraded check. During an
    /// outage: the placeholder (degraded), nothing given back, no error.
    pub async fn refund(&self, id: &str, call: &Call) -> Result<Decision, Error> {
        self.run(Op::Refund, id, call, true).await
    }

    /// `check` with a rate string (`"10/second;1000/hour"`, windows in ms).
    pub async fn check_limits(&self, id: &str, rates: &str) -> Result<Decision, Error> {
        self.check(id, &Call::rates(rates)?).await
    }

    /// `peek` with a rate string.
    pub async fn peek_limits(&self, id: &str, rates: &str) -> Result<Decision, Error> {
        self.peek(id, &Call::rates(rates)?).await
    }

    /// `refund` with a rate string.
    pub async fn refund_limits(&self, id: &str, rates: &str) -> Result<Decision, Error> {
        self.refund(id, &Call::rates(rates)?).await
    }

    /// The seed's call: `(allowed, count)` for `limit` per `window_seconds`. During an
    /// outage `(fail_open, 0)`.
    pub async fn is_allowed(
        &self,
        id: &str,
        limit: u64,
        window_seconds: u64,
    ) -> Result<(bool, u64), Error> {
        self.is_allowed_at(id, limit, window_seconds, None).await
    }

    /// `is_allowed` at an explicit `now` (Unix seconds).
    pub async fn is_allowed_at(
        &self,
        id: &str,
        limit: u64,
        window_seconds: u64,
        now: Option<u64>,
    ) -> Result<(bool, u64), Error> {
        // The seed's command: CHECK without DETAILS, answered [allowed, count].
        let mut args = vec![limit.to_string(), window_seconds.to_string()];
        if let Some(n) = now {
            args.push(n.to_string());
        }
        let wire = Wire {
            op: Op::Check,
            key: self.key(id),
            args,
        };
        match self.send_gated(&wire).await {
            Ok(redis::Value::Array(items)) if items.len() == 2 => {
                let n = |v: &redis::Value| redis::from_redis_value_ref::<i64>(v).unwrap_or(0);
                Ok((n(&items[0]) == 1, n(&items[1]).max(0) as u64))
            }
            Ok(other) => Err(Error::UnexpectedReply(format!(
                "[allowed, count]: {other:?}"
            ))),
            Err(Error::Timeout(_)) if self.inner.circuit.is_down() => {
                Ok((self.inner.circuit.fail_open, 0))
            }
            Err(e) => Err(e),
        }
    }

    /// `COUNTS`: the previous and current counts of one window of the key and the units
    /// elapsed in the current one. During an outage: zeros, `degraded`.
    pub async fn counts(
        &self,
        id: &str,
        window: u64,
        ms: bool,
        now: Option<u64>,
    ) -> Result<Counts, Error> {
        let mut args = vec![window.to_string()];
        if let Some(n) = now {
            args.push(n.to_string());
        }
        if ms {
            args.push("MS".into());
        }
        let wire = Wire {
            op: Op::Counts,
            key: self.key(id),
            args,
        };
        match self.send_gated(&wire).await {
            Ok(v) => Counts::from_reply(&v),
            Err(Error::Timeout(_)) if self.inner.circuit.is_down() => Ok(Counts {
                previous: 0,
                current: 0,
                elapsed: 0,
                degraded: true,
            }),
            Err(e) => Err(e),
        }
    }

    /// Deletes the identity's key (every window's counts), and its cached refusals.
    pub async fn reset(&self, id: &str) -> Result<(), Error> {
        let key = self.key(id);
        let mut cmd = redis::cmd("DEL");
        cmd.arg(&key);
        let out = tokio::time::timeout(self.inner.timeout, self.inner.sender.send(cmd)).await;
        if let Some(c) = &self.inner.deny_cache {
            c.forget(&key);
        }
        match out {
            Err(_) => Err(Error::Timeout(self.inner.timeout)),
            Ok(r) => r
                .and_then(redis::Value::extract_error)
                .map(|_| ())
                .map_err(Error::from),
        }
    }

    /// `check`, and while denied, sleep exactly its `retry_after` (never past `timeout`
    /// from now) and check again. Returns the last decision: allowed, or denied at the
    /// timeout, or at once when it can never pass (cost > limit) or Redis is down with
    /// fail-closed. Not a fair queue. An explicit `now` in `call` is ignored.
    pub async fn wait(&self, id: &str, call: &Call, timeout: Duration) -> Result<Decision, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut call = call.clone();
        call.now = None;
        loop {
            let d = self.check(id, &call).await?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if d.allowed() || d.degraded() || d.retry_after() < 0 || left.is_zero() {
                return Ok(d);
            }
            let r = d.retry_after() as u64;
            let pause = if call.ms {
                Duration::from_millis(r)
            } else {
                Duration::from_secs(r)
            };
            tokio::time::sleep(pause.min(left)).await;
        }
    }

    async fn run(&self, op: Op, id: &str, call: &Call, cache: bool) -> Result<Decision, Error> {
        let cache = if cache {
            self.inner.deny_cache.as_deref()
        } else {
            None
        };
        self.run_cached(op, id, call, cache).await
    }

    /// A call through `cache` (the layer's own, or none) instead of the limiter's.
    pub(crate) async fn run_cached(
        &self,
        op: Op,
        id: &str,
        call: &Call,
        cache: Option<&DenyCache>,
    ) -> Result<Decision, Error> {
        call.validate()?;
        let wire = call.wire(op, self.key(id));
        let decide = || self.decide(&wire, call);
        match cache {
            Some(c) if matches!(op, Op::Check | Op::Refund) => {
                if self.inner.circuit.is_down() {
                    // During an outage the circuit answers as without a cache, and a server
                    // that comes back may have lost its counts.
                    c.clear();
                    return decide().await;
                }
                let spec = Spec {
                    key: wire.key.clone(),
                    limits: call.limits.iter().map(|l| (l.limit, l.window)).collect(),
                    ms: call.ms,
                    now: call.now,
                    cost: call.cost,
                };
                c.run(&spec, &self.inner.sender, op == Op::Refund, decide)
                    .await
            }
            _ => decide().await,
        }
    }

    fn without_redis(&self, call: &Call) -> Decision {
        Decision::unavailable(self.inner.circuit.fail_open, &call.limits, call.ms)
    }

    async fn decide(&self, wire: &Wire, call: &Call) -> Result<Decision, Error> {
        match self.send_gated(wire).await {
            Ok(v) => Decision::from_reply(&v, &call.windows(), call.cost, call.ms),
            Err(Error::Timeout(_)) if self.inner.circuit.is_down() => Ok(self.without_redis(call)),
            Err(e) => Err(e),
        }
    }

    /// One call through the circuit: its reply, or `Err(Timeout)` when answered without
    /// Redis (the callers turn that into their placeholder), or a non-outage error.
    async fn send_gated(&self, wire: &Wire) -> Result<redis::Value, Error> {
        let i = &self.inner;
        match i.circuit.gate() {
            Gate::Call => {}
            Gate::Skip => return Err(Error::Timeout(i.timeout)),
            Gate::Probe => {
                self.start_probe(wire);
                return Err(Error::Timeout(i.timeout));
            }
        }
        i.sent.fetch_add(1, Ordering::Relaxed);
        let err = match tokio::time::timeout(i.timeout, i.chooser.call(&i.sender, wire)).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => e,
            Err(_) => Error::Timeout(i.timeout),
        };
        if i.circuit.failed(&err) {
            return Err(Error::Timeout(i.timeout));
        }
        Err(err)
    }

    fn start_probe(&self, wire: &Wire) {
        // A CHECK or a REFUND probes with PEEK, as in every client: a probe only looks. It
        // never counts, or gives back, a request that was answered without Redis.
        let mut wire = wire.clone();
        if matches!(wire.op, Op::Check | Op::Refund) {
            wire.op = Op::Peek;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let i = &me.inner;
            let outcome =
                match tokio::time::timeout(i.timeout, i.chooser.call(&i.sender, &wire)).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(Error::Timeout(i.timeout)),
                };
            i.circuit.probed(outcome.as_ref().map(|_| ()));
        });
    }
}

impl<S: SendCommand> Limiter<S> {
    /// The placeholder a call on `limits` answers during an outage.
    pub fn unavailable(&self, limits: &[Limit], ms: bool) -> Decision {
        Decision::unavailable(self.inner.circuit.fail_open, limits, ms)
    }
}
