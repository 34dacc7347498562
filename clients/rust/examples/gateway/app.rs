//! The gateway's app, apart from `main` so that tests/gateway.rs serves the very same
//! router over real HTTP.

use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use slidingwindow_client::{
    Identity, Limiter, Policy, RateLimitLayer, SendCommand, TrustedProxies,
};

/// `/` limited by `policy` per client (API key `k_...` in `x-api-key`, else address);
/// `/login` counts only failed logins (5 per minute per address; password `open-sesame`).
pub fn router<S: SendCommand>(
    limiter: Limiter<S>,
    policy: Policy,
    trusted: TrustedProxies,
) -> Router {
    let peer = |e: &axum::http::Extensions| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let api = RateLimitLayer::new(limiter.clone(), policy).key(
        Identity::new()
            .trusted_proxies(trusted.clone())
            .api_key("x-api-key", |k| k.starts_with("k_"))
            .peer_with(peer),
    );
    let login = RateLimitLayer::new(
        limiter,
        Policy::new("login", 5, 60)
            .expect("a valid policy")
            .count_only_failures(),
    )
    .key(Identity::by_ip(trusted).peer_with(peer));
    Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(api)
        .merge(
            Router::new()
                .route("/login", post(login_handler))
                .layer(login),
        )
}

async fn login_handler(body: String) -> (StatusCode, &'static str) {
    if body.trim() == "open-sesame" {
        (StatusCode::OK, "welcome\n")
    } else {
        (StatusCode::UNAUTHORIZED, "wrong password\n")
    }
}
