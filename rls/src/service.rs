//! ShouldRateLimit: each descriptor matched in the configuration, one Redis call per
//! descriptor (all sent at once, so they share the connection's pipeline), the answers
//! combined as envoyproxy/ratelimit combines them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use redis::{Cmd, RedisResult, Value};
use slidingwindow_client::{BoxFuture, Call, Decision, Limiter, SendCommand};

use crate::config::{descriptor_path, redis_key, Entry, Matched, RateLimit, Unit};
use crate::loader::Current;
use crate::metrics::{Counters, Metrics};
use crate::settings::{OutageAnswer, Settings};

/// A single node through a few multiplexed connections (REDIS_POOL_SIZE, taken in turn),
/// or a cluster through redis-rs's async cluster connection.
#[derive(Clone)]
pub enum Sender {
    Single(Arc<(Vec<redis::aio::ConnectionManager>, AtomicUsize)>),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl SendCommand for Sender {
    fn send(&self, cmd: Cmd) -> BoxFuture<RedisResult<Value>> {
        match self {
            Sender::Single(pool) => {
                let i = pool.1.fetch_add(1, Ordering::Relaxed) % pool.0.len();
                pool.0[i].send(cmd)
            }
            Sender::Cluster(c) => c.send(cmd),
        }
    }

    fn send_to_primaries(&self, cmd: Cmd) -> BoxFuture<RedisResult<Vec<RedisResult<Value>>>> {
        match self {
            Sender::Single(pool) => pool.0[0].send_to_primaries(cmd),
            Sender::Cluster(c) => c.send_to_primaries(cmd),
        }
    }

    fn is_cluster(&self) -> bool {
        matches!(self, Sender::Cluster(_))
    }
}

/// Why a request got no rate limit response.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// A request the API refuses (gRPC INVALID_ARGUMENT, HTTP 400).
    InvalidArgument(String),
    /// Redis unreachable and OUTAGE_ANSWER=error (gRPC UNAVAILABLE, HTTP 503).
    Unavailable(String),
    /// Anything else from Redis (the library not loadable, an ACL grant missing; gRPC
    /// INTERNAL, HTTP 500).
    Internal(String),
}

impl Failure {
    pub fn status(&self) -> tonic::Status {
        match self {
            Failure::InvalidArgument(m) => tonic::Status::invalid_argument(m.clone()),
            Failure::Unavailable(m) => tonic::Status::unavailable(m.clone()),
            Failure::Internal(m) => tonic::Status::internal(m.clone()),
        }
    }
}

/// The service's state, shared by gRPC, /json and the metrics.
pub struct Service {
    pub config: Current,
    pub limiter: Limiter<Sender>,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
}

/// What one descriptor is checked against.
enum Plan {
    /// No limit matched, or replaced: OK, no current_limit.
    None,
    /// `unlimited: true`: OK, limit_remaining u32::MAX.
    Unlimited,
    Limited {
        matched: Matched,
        /// Hits: 0 checks without counting.
        hits: u64,
        negative: bool,
    },
}

fn duration_ms(ms: u64) -> PbDuration {
    PbDuration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

fn pb_limit(l: &RateLimit, unit: Unit) -> PbRateLimit {
    PbRateLimit {
        name: l.name.clone().unwrap_or_default(),
        requests_per_unit: l.requests_per_unit,
        unit: unit.proto(),
    }
}

/// The hits of one descriptor: its own `hits_addend` when set (0: check only), else the
/// request's (0, unset: 1).
pub fn hits_of(d: &RateLimitDescriptor, request_hits: u32) -> u64 {
    match &d.hits_addend {
        Some(w) => w.value,
        None if request_hits == 0 => 1,
        None => u64::from(request_hits),
    }
}

/// One descriptor's outcome, before the request's codes are combined.
struct Outcome {
    status: DescriptorStatus,
    /// Over limit and enforcing (not shadow).
    over: bool,
    quota: bool,
    /// Retry-After candidate (ms), when over.
    retry_ms: Option<u64>,
    /// The reset for RateLimit-Reset (ms).
    reset_ms: u64,
    has_limit: bool,
}

impl Service {
    fn plan(&self, req: &RateLimitRequest) -> Result<Vec<Plan>, Failure> {
        let cfg = self.config.get();
        let mut plans = Vec::with_capacity(req.descriptors.len());
        let mut replacing: Vec<&str> = Vec::new();
        let mut holders = Vec::with_capacity(req.descriptors.len());
        for (i, d) in req.descriptors.iter().enumerate() {
            if d.entries.is_empty() {
                return Err(Failure::InvalidArgument(format!(
                    "descriptor {i} has no entries"
                )));
            }
            let entries: Vec<Entry> = d
                .entries
                .iter()
                .map(|e| Entry::new(&e.key, &e.value))
                .collect();
            let matched = match &d.limit {
                Some(o) => {
                    let unit = Unit::from_proto(o.unit).ok_or_else(|| {
                        Failure::InvalidArgument(format!(
                            "descriptor {i}: the limit override has no valid unit ({})",
                            o.unit
                        ))
                    })?;
                    // An override is never in shadow mode, as there.
                    Some(Matched {
                        limit: Arc::new(RateLimit {
                            full_key: descriptor_path(&req.domain, &entries),
                            requests_per_unit: o.requests_per_unit,
                            unit: Some(unit),
                            unlimited: false,
                            shadow_mode: false,
                            quota_mode: false,
                            name: None,
                            replaces: Vec::new(),
                            detailed_metric: false,
                        }),
                        metric_key: descriptor_path(&req.domain, &entries),
                        redis_key: redis_key(&req.domain, &entries, &[]),
                    })
                }
                None => cfg.lookup(&req.domain, &entries),
            };
            holders.push(matched);
        }
        for m in holders.iter().flatten() {
            replacing.extend(m.limit.replaces.iter().map(String::as_str));
        }
        for (d, m) in req.descriptors.iter().zip(holders.iter()) {
            let plan = match m {
                None => Plan::None,
                Some(m) if m.limit.unlimited => Plan::Unlimited,
                Some(m)
                    if m.limit
                        .name
                        .as_deref()
                        .is_some_and(|n| replacing.contains(&n)) =>
                {
                    Plan::None
                }
                Some(m) => Plan::Limited {
                    matched: m.clone(),
                    hits: hits_of(d, req.hits_addend),
                    negative: d.is_negative_hits,
                },
            };
            plans.push(plan);
        }
        Ok(plans)
    }

    /// Answers one request.
    pub async fn should_rate_limit(
        &self,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, Failure> {
        if req.domain.is_empty() {
            return Err(Failure::InvalidArgument(
                "rate limit domain must not be empty".into(),
            ));
        }
        if req.descriptors.is_empty() {
            return Err(Failure::InvalidArgument(
                "rate limit descriptor list must not be empty".into(),
            ));
        }
        let plans = self.plan(req)?;
        let started = Instant::now();
        let calls = plans.iter().map(|p| async move {
            match p {
                Plan::Limited {
                    matched,
                    hits,
                    negative,
                } => {
                    let l = &matched.limit;
                    let unit = l.unit.unwrap_or(Unit::Second);
                    let rpu = u64::from(l.requests_per_unit);
                    // requests_per_unit 0, or more hits than the limit: never allowed,
                    // answered without Redis.
                    if rpu == 0 || (!*negative && *hits > rpu) {
                        return None;
                    }
                    // No count exceeds u32::MAX (every counted hit fitted in a u32
                    // limit): a larger give-back is the same as that.
                    let cost = (*hits).clamp(1, u64::from(u32::MAX));
                    let call = Call::new(rpu, unit.millis()).ms().cost(cost);
                    let key = format!("{}{}", self.settings.cache_key_prefix, matched.redis_key);
                    let r = if *hits == 0 {
                        self.limiter.peek(&key, &call).await
                    } else if *negative {
                        self.limiter.refund(&key, &call).await
                    } else {
                        self.limiter.check(&key, &call).await
                    };
                    Some(r)
                }
                _ => None,
            }
        });
        let results = futures_util::future::join_all(calls).await;
        if plans.iter().any(|p| matches!(p, Plan::Limited { .. })) {
            self.metrics.redis_call(started.elapsed());
        }
        let mut outcomes = Vec::with_capacity(plans.len());
        let mut degraded = false;
        for (plan, r) in plans.iter().zip(results) {
            let decision = match r {
                Some(Ok(d)) => Some(d),
                Some(Err(e)) if e.is_outage() => {
                    degraded = true;
                    None
                }
                Some(Err(e)) => return Err(Failure::Internal(format!("redis: {e}"))),
                None => None,
            };
            if decision.as_ref().is_some_and(Decision::degraded) {
                degraded = true;
            }
            outcomes.push(self.outcome(plan, decision.as_ref()));
        }
        if degraded {
            self.metrics
                .outage_answers
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if self.settings.outage_answer == OutageAnswer::Error {
                return Err(Failure::Unavailable(
                    "redis unavailable: no rate limit decision (OUTAGE_ANSWER=error)".into(),
                ));
            }
            return Ok(RateLimitResponse {
                overall_code: Code::Ok as i32,
                statuses: outcomes
                    .into_iter()
                    .map(|mut o| {
                        o.status.code = Code::Ok as i32;
                        o.status
                    })
                    .collect(),
                ..Default::default()
            });
        }
        Ok(self.combine(outcomes))
    }

    fn outcome(&self, plan: &Plan, d: Option<&Decision>) -> Outcome {
        // As there: with QUOTA_MODE a descriptor without a limit is a quota descriptor that
        // passes; an unlimited one is none.
        let none = |code: Code, remaining: u32, quota: bool| Outcome {
            status: DescriptorStatus {
                code: code as i32,
                limit_remaining: remaining,
                ..Default::default()
            },
            over: false,
            quota,
            retry_ms: None,
            reset_ms: 0,
            has_limit: false,
        };
        let (matched, hits, negative) = match plan {
            Plan::None => return none(Code::Ok, 0, self.settings.quota_mode),
            Plan::Unlimited => return none(Code::Ok, u32::MAX, false),
            Plan::Limited {
                matched,
                hits,
                negative,
            } => (matched, *hits, *negative),
        };
        let l = &matched.limit;
        let unit = l.unit.unwrap_or(Unit::Second);
        let quota = self.settings.quota_mode || l.quota_mode;
        // (allowed, count after, remaining, retry ms, reset ms)
        let (allowed, count, remaining, retry, reset) = match d {
            // requests_per_unit 0 or hits over the limit: over, without asking Redis.
            None => (false, 0, 0, unit.millis(), unit.millis()),
            Some(d) => {
                let s = &d.summary;
                let retry = if s.retry_after < 0 {
                    unit.millis()
                } else {
                    s.retry_after as u64
                };
                if hits == 0 || negative {
                    // PEEK's reply (a check only, or what REFUND answers after giving
                    // back): `count` includes the cost sent when allowed. Report the
                    // count as it stands; a refund is never a refusal.
                    let sent = hits.max(1);
                    let now = if s.allowed {
                        s.count.saturating_sub(sent)
                    } else {
                        s.count
                    };
                    let remaining = s.limit.saturating_sub(now);
                    (s.allowed || negative, now, remaining, retry, s.reset_after)
                } else {
                    (s.allowed, s.count, s.remaining, retry, s.reset_after)
                }
            }
        };
        let mut c = Counters::default();
        let check_only = hits == 0 || negative;
        let over_limit = !allowed && !negative;
        if !negative {
            c.total_hits = hits;
            if over_limit && hits > 0 {
                c.over_limit = hits;
            } else if !check_only {
                c.within_limit = hits;
                let near = (f64::from(l.requests_per_unit)
                    * f64::from(self.settings.near_limit_ratio))
                .floor() as u64;
                if count > near {
                    let before = count.saturating_sub(hits);
                    c.near_limit = count - before.max(near);
                }
            }
        }
        let shadow = over_limit && l.shadow_mode;
        if shadow && hits > 0 {
            c.shadow_mode = hits;
        }
        self.metrics.add(&matched.metric_key, c);
        let code = if over_limit && !shadow {
            Code::OverLimit
        } else {
            Code::Ok
        };
        let until = if over_limit { retry } else { reset };
        Outcome {
            status: DescriptorStatus {
                code: code as i32,
                current_limit: Some(pb_limit(l, unit)),
                limit_remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
                duration_until_reset: Some(duration_ms(until)),
                ..Default::default()
            },
            over: over_limit && !shadow,
            quota,
            retry_ms: (over_limit && !shadow).then_some(retry),
            reset_ms: until,
            has_limit: true,
        }
    }

    fn combine(&self, outcomes: Vec<Outcome>) -> RateLimitResponse {
        let failed_rate = outcomes.iter().filter(|o| o.over && !o.quota).count();
        let total_quota = outcomes.iter().filter(|o| o.quota).count();
        let failed_quota = outcomes.iter().filter(|o| o.over && o.quota).count();
        let mut code = if failed_rate > 0 || (total_quota > 0 && total_quota == failed_quota) {
            Code::OverLimit
        } else {
            Code::Ok
        };
        let mut headers = Vec::new();
        if self.settings.headers_enabled {
            // The descriptor that governs: an enforced refusal, else the least remaining.
            let pick = outcomes
                .iter()
                .filter(|o| o.has_limit)
                .min_by_key(|o| (!o.over || o.quota, o.status.limit_remaining));
            if let Some(o) = pick {
                let limit = o
                    .status
                    .current_limit
                    .as_ref()
                    .map_or(0, |l| l.requests_per_unit);
                headers.push(header(&self.settings.header_limit, limit.to_string()));
                headers.push(header(
                    &self.settings.header_remaining,
                    o.status.limit_remaining.to_string(),
                ));
                headers.push(header(
                    &self.settings.header_reset,
                    o.reset_ms.div_ceil(1000).to_string(),
                ));
            }
        }
        if code == Code::OverLimit && self.settings.headers_enabled {
            if let Some(ms) = outcomes.iter().filter_map(|o| o.retry_ms).max() {
                headers.push(header("Retry-After", ms.div_ceil(1000).to_string()));
            }
        }
        if code == Code::OverLimit && self.settings.shadow_mode {
            code = Code::Ok;
            headers.retain(|h| h.key != "Retry-After");
            self.metrics
                .global_shadow_mode
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        RateLimitResponse {
            overall_code: code as i32,
            statuses: outcomes.into_iter().map(|o| o.status).collect(),
            response_headers_to_add: headers,
            ..Default::default()
        }
    }
}

fn header(k: &str, v: String) -> HeaderValue {
    HeaderValue {
        key: k.to_string(),
        value: v,
        ..Default::default()
    }
}
