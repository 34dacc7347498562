//! slidingwindow-ratelimit: an Envoy global rate limit service (the
//! `envoy.service.ratelimit.v3.RateLimitService` API and envoyproxy/ratelimit's YAML)
//! whose every window is a true sliding window, counted by redis-slidingwindow (the
//! module when the server has it, else its Functions library).

pub mod config;
pub mod json;
pub mod loader;
pub mod logger;
pub mod metrics;
pub mod server;
pub mod service;
pub mod settings;
