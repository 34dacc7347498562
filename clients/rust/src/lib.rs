//! A client for redis-slidingwindow: an
//! exact sliding-window-counter rate limiter that runs inside Redis, as a module
//! (`SLIDINGWINDOW.CHECK`) or as a Redis Functions library (`lua/slidingwindow.lua`,
//! shipped in this crate), with a tower layer for axum, hyper and tonic services.
//!
//! * [`Limiter`]: `check`, `peek`, `refund`, `counts`, `reset`, `wait`, `is_allowed`,
//!   several limits in one call, cost, milliseconds, an explicit `now` or the server's
//!   clock; typed [`Decision`]s; rate strings ([`parse_limits`]).
//! * Backends as the Python client's: the module when present, else the bundled library
//!   loaded when allowed, else `EVALSHA` on Redis 6.2 ([`Backend`]); reloaded after
//!   `FUNCTION FLUSH`, `NOSCRIPT` or a failover.
//! * Outages: a per-call timeout (500 ms), a circuit that answers at once (fail-open by
//!   default), one probe at a time, one warning when it opens and one line when it
//!   recovers (the `log` crate, target `slidingwindow`); an exact [`DenyCache`].
//! * Any client: [`SendCommand`] is implemented for redis-rs's `MultiplexedConnection`,
//!   `ConnectionManager` and the async cluster connection, and can be for others.
//! * [`RateLimitLayer`] (feature `tower`, on by default): 429 with `Retry-After`,
//!   `X-RateLimit-*` and draft-11 `RateLimit-Policy`/`RateLimit` headers, identities by
//!   API key, user or client IP ([`Identity`]), count-only-failures, shadow mode, gRPC
//!   `RESOURCE_EXHAUSTED`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use slidingwindow_client::{Call, Limiter};
//! let client = redis::Client::open("redis://127.0.0.1:6379")?;
//! let limiter = Limiter::new(client.get_connection_manager().await?);
//! let d = limiter.check("user:42", &Call::new(100, 60)).await?;
//! println!("allowed {} remaining {}", d.allowed(), d.summary.remaining);
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod backend;
mod call;
mod circuit;
#[cfg(test)]
mod conformance_tests;
pub mod deny_cache;
mod error;
pub mod headers;
pub mod identity;
#[cfg(feature = "tower")]
pub mod layer;
mod limiter;
pub mod permissions;
pub mod rates;
mod result;
mod send;

pub use backend::{library, Backend, Mode};
pub use call::Call;
pub use circuit::ErrorHook;
pub use deny_cache::{DenyCache, DenyCacheStats};
pub use error::{is_outage, Error};
pub use headers::{limits_headers, rate_limit_headers};
pub use identity::{client_identity, client_ip, Identity, TrustedProxies, UserId};
#[cfg(feature = "tower")]
pub use layer::{KeyExtractor, Policy, RateLimitBody, RateLimitLayer, RateLimitService, Refusal};
pub use limiter::{Limiter, LimiterBuilder, LimiterStats, DEFAULT_PROBE_INTERVAL, DEFAULT_TIMEOUT};
pub use rates::{parse_limits, Limit, RateError, MAX_LIMITS};
pub use result::{Counts, Decision, LimitResult};
pub use send::{BoxFuture, SendCommand};
