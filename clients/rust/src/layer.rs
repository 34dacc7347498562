//! The tower [`Layer`](tower_layer::Layer)/[`Service`](tower_service::Service): rate
//! limiting for axum 0.8, hyper and tonic services.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use slidingwindow_client::{Identity, Limiter, Policy, RateLimitLayer, TrustedProxies};
//! let client = redis::Client::open("redis://127.0.0.1:6379")?;
//! let limiter = Limiter::new(client.get_connection_manager().await?);
//! let layer = RateLimitLayer::new(limiter, Policy::rates("api", "10/second;1000/hour")?)
//!     .key(Identity::new()
//!         .trusted_proxies(TrustedProxies::new(["10.0.0.0/8"]))
//!         .api_key("x-api-key", |k| k.starts_with("k_")));
//! // axum: Router::new().route(...).layer(layer)
//! # let _ = layer; Ok(()) }
//! ```
//!
//! Every response carries `X-RateLimit-*` and the draft-11 `RateLimit-Policy`/`RateLimit`
//! headers (the Python client's strings, see [`headers`](crate::headers)); a refused
//! request gets 429 with `Retry-After` and a JSON body (503 when Redis is down and the
//! limiter fails closed). A gRPC request (`content-type: application/grpc...`) is refused
//! as gRPC status `RESOURCE_EXHAUSTED` (8; `UNAVAILABLE`, 14, fail-closed) in a
//! trailers-only response, with the retry delay in the metadata as `retry-after` (whole
//! seconds) and `grpc-retry-pushback-ms`. The deny cache is on (a default
//! [`DenyCache`]); shadow mode never refuses and bypasses it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};

use crate::backend::Op;
use crate::call::Call;
use crate::deny_cache::DenyCache;
use crate::error::Error;
use crate::headers::limits_headers;
use crate::identity::Identity;
use crate::result::{Decision, LimitResult};
use crate::send::SendCommand;
use crate::Limiter;

type CountWhen = Arc<dyn Fn(StatusCode) -> bool + Send + Sync>;

/// How many requests per window (one limit or several), at what cost, under which name.
/// The name appears in `RateLimit-Policy` and in the Redis key (`<prefix><name>:<id>`),
/// so two policies never share a counter.
#[derive(Clone)]
pub struct Policy {
    name: String,
    call: Call,
    count_when: Option<CountWhen>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("name", &self.name)
            .field("call", &self.call)
            .field("count_when", &self.count_when.is_some())
            .finish()
    }
}

fn check_name(name: &str) -> Result<(), Error> {
    crate::headers::sf_string(name).map(|_| ()).ok_or_else(|| {
        Error::InvalidArgument(format!("policy name must be printable ASCII: {name:?}"))
    })
}

impl Policy {
    /// `limit` requests per sliding `window` seconds.
    pub fn new(name: &str, limit: u64, window: u64) -> Result<Policy, Error> {
        Policy::from_call(name, Call::new(limit, window))
    }

    /// The limits of a rate string (`"10/second;1000/hour"`, windows in ms).
    pub fn rates(name: &str, rates: &str) -> Result<Policy, Error> {
        Policy::from_call(name, Call::rates(rates)?)
    }

    /// Any [`Call`] (several limits, ms, cost); an explicit `now` in it is dropped.
    pub fn from_call(name: &str, mut call: Call) -> Result<Policy, Error> {
        check_name(name)?;
        call.now = None;
        call.validate()?;
        if call.limits.iter().any(|l| l.window == 0) {
            return Err(Error::InvalidArgument(format!(
                "policy {name:?}: need window >= 1"
            )));
        }
        Ok(Policy {
            name: name.into(),
            call,
            count_when: None,
        })
    }

    /// Each request counts `cost` (default 1).
    pub fn cost(mut self, cost: u64) -> Policy {
        self.call.cost = cost.max(1);
        self
    }

    /// After the response, whether the request counts: when `count_when(status)` is
    /// false, an allowed request is given back (REFUND with the CHECK's arguments) before
    /// the response goes out. A refused request counts nothing anyway.
    pub fn count_when(mut self, f: impl Fn(StatusCode) -> bool + Send + Sync + 'static) -> Policy {
        self.count_when = Some(Arc::new(f));
        self
    }

    /// Only 4xx and 5xx responses count (failed logins limited, successful ones free).
    pub fn count_only_failures(self) -> Policy {
        self.count_when(|s| s.as_u16() >= 400)
    }

    /// Only responses below 400 count.
    pub fn count_only_successes(self) -> Policy {
        self.count_when(|s| s.as_u16() < 400)
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The call each request makes.
    pub fn call(&self) -> &Call {
        &self.call
    }

    /// `"100 per 60s"`, `"10 per 1000ms and 1000 per 3600000ms"`.
    pub fn describe(&self) -> String {
        let unit = if self.call.ms { "ms" } else { "s" };
        self.call
            .limits
            .iter()
            .map(|l| format!("{} per {}{unit}", l.limit, l.window))
            .collect::<Vec<_>>()
            .join(" and ")
    }
}

/// What picks the identity a request counts against. [`Identity`] is the default; any
/// `Fn(&http::HeaderMap, &http::Extensions) -> String` is one too.
pub trait KeyExtractor: Clone + Send + Sync + 'static {
    /// The identity (without the policy's name, which the layer puts before it).
    fn key(&self, headers: &http::HeaderMap, extensions: &http::Extensions) -> String;
}

impl KeyExtractor for Identity {
    fn key(&self, headers: &http::HeaderMap, extensions: &http::Extensions) -> String {
        self.of_head(headers, extensions)
    }
}

impl<F> KeyExtractor for F
where
    F: Fn(&http::HeaderMap, &http::Extensions) -> String + Clone + Send + Sync + 'static,
{
    fn key(&self, headers: &http::HeaderMap, extensions: &http::Extensions) -> String {
        self(headers, extensions)
    }
}

/// A request refused (or, in shadow mode, let through that would have been refused).
#[derive(Clone, Debug)]
pub struct Refusal {
    /// The policy's name.
    pub policy: String,
    /// The identity.
    pub identity: String,
    /// The request's method.
    pub method: http::Method,
    /// The request's path.
    pub path: String,
    /// The decision (degraded: Redis unavailable with a fail-closed limiter, a 503).
    pub decision: Decision,
    /// Whether the layer is in shadow mode (the request went on).
    pub shadow: bool,
}

type RefusalHook = Arc<dyn Fn(&Refusal) + Send + Sync>;

/// The tower layer. See the [module docs](self).
pub struct RateLimitLayer<S, K = Identity> {
    limiter: Limiter<S>,
    policy: Arc<Policy>,
    key: K,
    shadow: bool,
    deny_cache: Option<Arc<DenyCache>>,
    on_refusal: Option<RefusalHook>,
}

impl<S, K: Clone> Clone for RateLimitLayer<S, K> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            limiter: self.limiter.clone(),
            policy: self.policy.clone(),
            key: self.key.clone(),
            shadow: self.shadow,
            deny_cache: self.deny_cache.clone(),
            on_refusal: self.on_refusal.clone(),
        }
    }
}

impl<S: SendCommand> RateLimitLayer<S, Identity> {
    /// Limits every request by `policy`, identities from [`Identity::new`] (user, else
    /// client address), with a default deny cache.
    pub fn new(limiter: Limiter<S>, policy: Policy) -> Self {
        RateLimitLayer {
            limiter,
            policy: Arc::new(policy),
            key: Identity::new(),
            shadow: false,
            deny_cache: Some(Arc::new(DenyCache::default())),
            on_refusal: None,
        }
    }
}

impl<S: SendCommand, K: KeyExtractor> RateLimitLayer<S, K> {
    /// Another key extractor.
    pub fn key<K2: KeyExtractor>(self, key: K2) -> RateLimitLayer<S, K2> {
        RateLimitLayer {
            limiter: self.limiter,
            policy: self.policy,
            key,
            shadow: self.shadow,
            deny_cache: self.deny_cache,
            on_refusal: self.on_refusal,
        }
    }

    /// Never refuse: each would-be refusal goes to `on_refusal` and to a WARNING line
    /// (target `slidingwindow::shadow`). Counting and headers are as when enforcing, but
    /// for `Retry-After`; the deny cache is bypassed.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// Another deny cache, or none (`None`).
    pub fn deny_cache(mut self, cache: Option<DenyCache>) -> Self {
        self.deny_cache = cache.map(Arc::new);
        self
    }

    /// Called with every refusal, enforced or shadow.
    pub fn on_refusal(mut self, hook: impl Fn(&Refusal) + Send + Sync + 'static) -> Self {
        self.on_refusal = Some(Arc::new(hook));
        self
    }

    /// The layer's deny cache, if on.
    pub fn deny_cache_ref(&self) -> Option<&DenyCache> {
        self.deny_cache.as_deref()
    }
}

impl<S: SendCommand, K: KeyExtractor, I> tower_layer::Layer<I> for RateLimitLayer<S, K> {
    type Service = RateLimitService<S, K, I>;

    fn layer(&self, inner: I) -> Self::Service {
        RateLimitService {
            layer: self.clone(),
            inner,
        }
    }
}

/// The service [`RateLimitLayer`] wraps around another.
pub struct RateLimitService<S, K, I> {
    layer: RateLimitLayer<S, K>,
    inner: I,
}

impl<S, K: Clone, I: Clone> Clone for RateLimitService<S, K, I> {
    fn clone(&self) -> Self {
        RateLimitService {
            layer: self.layer.clone(),
            inner: self.inner.clone(),
        }
    }
}

pin_project_lite::pin_project! {
    /// The body of a limited service's response: the inner service's, or a refusal's
    /// (JSON, or empty for gRPC).
    pub struct RateLimitBody<B> {
        #[pin]
        kind: BodyKind<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = BodyProj]
    enum BodyKind<B> {
        Inner { #[pin] body: B },
        Refusal { data: Option<Bytes> },
    }
}

impl<B> RateLimitBody<B> {
    /// The inner service's body, as it is.
    pub fn inner(body: B) -> Self {
        RateLimitBody {
            kind: BodyKind::Inner { body },
        }
    }

    fn refusal(data: Bytes) -> Self {
        RateLimitBody {
            kind: BodyKind::Refusal {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

impl<B: Body<Data = Bytes>> Body for RateLimitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            BodyProj::Inner { body } => body.poll_frame(cx),
            BodyProj::Refusal { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            BodyKind::Inner { body } => body.is_end_stream(),
            BodyKind::Refusal { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            BodyKind::Inner { body } => body.size_hint(),
            BodyKind::Refusal { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// gRPC's percent-encoding of `grpc-message`.
fn grpc_message(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn set(headers: &mut http::HeaderMap, name: &str, value: &str) {
    if let (Ok(n), Ok(v)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        headers.insert(n, v);
    }
}

fn refusal_response<B>(
    policy: &Policy,
    r: &LimitResult,
    headers: &[(&'static str, String)],
    grpc: bool,
) -> Response<RateLimitBody<B>> {
    let (status, grpc_code, message, body) = if r.degraded {
        let msg = "The rate limiter is unavailable; try again later.";
        let body = format!(
            "{{\"error\": \"rate_limiter_unavailable\", \"message\": {}}}",
            json_string(msg)
        );
        (StatusCode::SERVICE_UNAVAILABLE, 14, msg.to_string(), body)
    } else {
        let msg = format!(
            "Too many requests: {} ('{}').",
            policy.describe(),
            policy.name
        );
        let retry = r
            .retry_after_seconds()
            .map_or("null".to_string(), |s| s.to_string());
        let body = format!(
            "{{\"error\": \"rate_limited\", \"message\": {}, \"policy\": {}, \"limit\": {}, \"retry_after\": {retry}}}",
            json_string(&msg),
            json_string(&policy.name),
            r.limit
        );
        (StatusCode::TOO_MANY_REQUESTS, 8, msg, body)
    };
    let mut resp = if grpc {
        let mut resp = Response::new(RateLimitBody::refusal(Bytes::new()));
        let h = resp.headers_mut();
        set(h, "content-type", "application/grpc");
        set(h, "grpc-status", &grpc_code.to_string());
        set(h, "grpc-message", &grpc_message(&message));
        if let Some(ms) = u64::try_from(r.retry_after)
            .ok()
            .map(|u| if r.ms { u } else { u * 1000 })
        {
            set(h, "grpc-retry-pushback-ms", &ms.to_string());
        }
        resp
    } else {
        let mut resp = Response::new(RateLimitBody::refusal(Bytes::from(body.clone())));
        *resp.status_mut() = status;
        let h = resp.headers_mut();
        set(h, "content-type", "application/json");
        set(h, "content-length", &body.len().to_string());
        resp
    };
    for (k, v) in headers {
        set(resp.headers_mut(), k, v);
    }
    resp
}

fn is_grpc(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

impl<S, K, I, ReqB, ResB> tower_service::Service<Request<ReqB>> for RateLimitService<S, K, I>
where
    S: SendCommand,
    K: KeyExtractor,
    I: tower_service::Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    I::Future: Send + 'static,
    I::Error: Send + 'static,
    ReqB: Send + 'static,
    ResB: Send + 'static,
{
    type Response = Response<RateLimitBody<ResB>>;
    type Error = I::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, I::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), I::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The clone is the one polled ready: take it, leave a fresh clone behind.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            let policy = &layer.policy;
            let who = layer.key.key(req.headers(), req.extensions());
            let id = format!("{}:{who}", policy.name);
            let grpc = is_grpc(req.headers());
            let cache = if layer.shadow {
                None
            } else {
                layer.deny_cache.as_deref()
            };
            let decision = match layer
                .limiter
                .run_cached(Op::Check, &id, &policy.call, cache)
                .await
            {
                Ok(d) => d,
                Err(e) => {
                    // Configuration errors (the library not loaded, an ACL grant missing):
                    // said loudly, and the request goes on unlimited rather than failing.
                    log::error!(target: "slidingwindow", "rate limiter: {e}");
                    let resp = inner.call(req).await?;
                    return Ok(resp.map(RateLimitBody::inner));
                }
            };
            let mut headers = limits_headers(&decision, &policy.name);
            if !decision.allowed() {
                let event = Refusal {
                    policy: policy.name.clone(),
                    identity: who.clone(),
                    method: req.method().clone(),
                    path: req.uri().path().to_string(),
                    decision: decision.clone(),
                    shadow: layer.shadow,
                };
                if let Some(hook) = &layer.on_refusal {
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(&event)))
                        .is_err()
                    {
                        log::error!(target: "slidingwindow", "rate limiter: on_refusal hook panicked");
                    }
                }
                if !layer.shadow {
                    return Ok(refusal_response(policy, &decision.summary, &headers, grpc));
                }
                let why = if decision.degraded() {
                    "rate limiter unavailable, fail-closed: 503".to_string()
                } else {
                    format!(
                        "429, retry after {}s",
                        decision
                            .summary
                            .retry_after_seconds()
                            .map_or("-".into(), |s| s.to_string())
                    )
                };
                log::warn!(
                    target: "slidingwindow::shadow",
                    "shadow: would refuse {} {} for {who} under '{}' ({}; {why})",
                    event.method, event.path, policy.name, policy.describe()
                );
                // Retry-After belongs to a refusal; the request goes on, so it is left out.
                headers.retain(|(k, _)| *k != "Retry-After");
            }
            let mut resp = inner.call(req).await?;
            if let Some(count_when) = &policy.count_when {
                if decision.allowed() && !decision.degraded() && !count_when(resp.status()) {
                    // Before the response goes out: the client's next request sees it.
                    if let Err(e) = layer
                        .limiter
                        .run_cached(Op::Refund, &id, &policy.call, cache)
                        .await
                    {
                        log::error!(target: "slidingwindow", "rate limiter: refund failed: {e}");
                    }
                }
            }
            for (k, v) in &headers {
                if let (Ok(n), Ok(v)) = (
                    HeaderName::from_bytes(k.as_bytes()),
                    HeaderValue::from_str(v),
                ) {
                    // The app's own headers win.
                    resp.headers_mut().entry(n).or_insert(v);
                }
            }
            Ok(resp.map(RateLimitBody::inner))
        })
    }
}
