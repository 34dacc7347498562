//! The tower layer on an axum app, through `oneshot` (the HTTP side is tests/gateway.rs):
//! headers on every response, 429, identities, count-only-failures, shadow mode, gRPC
//! refusals, and the deny cache (counted by the server's own INFO commandstats).

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use http_body_util::BodyExt;
use slidingwindow_client::{
    Call, Identity, Limiter, Policy, RateLimitLayer, TrustedProxies, UserId,
};
use support::{Kind, Server};
use tower::ServiceExt;

fn request(path: &str, peer: &str) -> Request<Body> {
    let mut r = Request::builder().uri(path).body(Body::empty()).unwrap();
    r.extensions_mut()
        .insert(peer.parse::<SocketAddr>().unwrap());
    r
}

async fn send(app: &Router, r: Request<Body>) -> (StatusCode, axum::http::HeaderMap, String) {
    let resp = app.clone().oneshot(r).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).to_string(),
    )
}

fn hdr(h: &axum::http::HeaderMap, name: &str) -> Option<String> {
    h.get(name).map(|v| v.to_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layer_on_axum() {
    let s = Server::start(Kind::Module);
    let limiter = support::limiter(&s, slidingwindow_client::Backend::Auto).await;

    // Headers on every response, then 429 with Retry-After and a JSON body.
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(
            limiter.clone(),
            Policy::new("api", 3, 60).unwrap(),
        ));
    for i in 0..3u64 {
        let (st, h, body) = send(&app, request("/", "192.0.2.1:1000")).await;
        assert_eq!((st, body.as_str()), (StatusCode::OK, "ok"));
        assert_eq!(hdr(&h, "x-ratelimit-limit").as_deref(), Some("3"));
        assert_eq!(hdr(&h, "x-ratelimit-remaining"), Some((2 - i).to_string()));
        assert_eq!(
            hdr(&h, "ratelimit-policy").as_deref(),
            Some("\"api\";q=3;w=60")
        );
        assert!(hdr(&h, "ratelimit")
            .unwrap()
            .starts_with(&format!("\"api\";r={};t=", 2 - i)));
        assert!(hdr(&h, "retry-after").is_none());
    }
    let (st, h, body) = send(&app, request("/", "192.0.2.1:1000")).await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS);
    let retry = hdr(&h, "retry-after").expect("Retry-After");
    assert_eq!(
        hdr(&h, "ratelimit").unwrap(),
        format!("\"api\";r=0;t={retry}")
    );
    assert_eq!(hdr(&h, "content-type").as_deref(), Some("application/json"));
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["error"], "rate_limited");
    assert_eq!(json["retry_after"].to_string(), retry);
    // Another address has its own counter; IPv6 addresses of one /64 share one.
    assert_eq!(
        send(&app, request("/", "192.0.2.2:1000")).await.0,
        StatusCode::OK
    );
    for _ in 0..3 {
        assert_eq!(
            send(&app, request("/", "[2001:db8:0:1::1]:1")).await.0,
            StatusCode::OK
        );
    }
    assert_eq!(
        send(&app, request("/", "[2001:db8:0:1::2]:1")).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("rate:api:*")
        .query(&mut s.con())
        .unwrap();
    assert!(
        keys.contains(&"rate:api:ip:2001:db8:0:1::/64".to_string()),
        "{keys:?}"
    );

    // Identities: a valid API key, a user from an auth layer, X-Forwarded-For read from
    // the right behind a trusted proxy.
    let app = Router::new().route("/", get(|| async { "ok" })).layer(
        RateLimitLayer::new(limiter.clone(), Policy::new("who", 100, 60).unwrap()).key(
            Identity::new()
                .trusted_proxies(TrustedProxies::new(["10.0.0.0/8"]))
                .api_key("x-api-key", |k| k.starts_with("k_")),
        ),
    );
    let mut r = request("/", "10.0.0.5:1");
    r.headers_mut().insert("x-api-key", "k_1".parse().unwrap());
    send(&app, r).await;
    let mut r = request("/", "10.0.0.5:1");
    r.headers_mut()
        .insert("x-api-key", "bogus".parse().unwrap());
    r.headers_mut().insert(
        "x-forwarded-for",
        "6.6.6.6, 198.51.100.7, 10.1.1.1".parse().unwrap(),
    );
    send(&app, r).await;
    let mut r = request("/", "10.0.0.5:1");
    r.extensions_mut().insert(UserId("u1".into()));
    send(&app, r).await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("rate:who:*")
        .query(&mut s.con())
        .unwrap();
    keys.sort();
    assert_eq!(
        keys,
        [
            "rate:who:ip:198.51.100.7",
            "rate:who:key:k_1",
            "rate:who:user:u1"
        ]
    );

    // Count only failures: successful logins are given back.
    let app = Router::new()
        .route(
            "/login",
            post(|body: String| async move {
                if body == "good" {
                    (StatusCode::OK, "in")
                } else {
                    (StatusCode::UNAUTHORIZED, "no")
                }
            }),
        )
        .layer(RateLimitLayer::new(
            limiter.clone(),
            Policy::new("login", 2, 60).unwrap().count_only_failures(),
        ));
    let login = |body: &'static str| {
        let mut r = Request::builder()
            .method("POST")
            .uri("/login")
            .body(Body::from(body))
            .unwrap();
        r.extensions_mut()
            .insert("192.0.2.9:1".parse::<SocketAddr>().unwrap());
        r
    };
    for _ in 0..5 {
        assert_eq!(
            send(&app, login("good")).await.0,
            StatusCode::OK,
            "successes are free"
        );
    }
    assert_eq!(send(&app, login("bad")).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(send(&app, login("bad")).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        send(&app, login("good")).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );

    // Shadow mode: nothing refused, every would-be refusal reported, no Retry-After.
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let app = Router::new().route("/", get(|| async { "ok" })).layer(
        RateLimitLayer::new(limiter.clone(), Policy::new("shadow", 1, 60).unwrap())
            .shadow(true)
            .on_refusal(move |r| {
                assert!(r.shadow);
                counter.fetch_add(1, Ordering::SeqCst);
            }),
    );
    for _ in 0..4 {
        let (st, h, _) = send(&app, request("/", "192.0.2.3:1")).await;
        assert_eq!(st, StatusCode::OK);
        assert!(hdr(&h, "retry-after").is_none());
    }
    assert_eq!(seen.load(Ordering::SeqCst), 3);

    // gRPC: RESOURCE_EXHAUSTED in a trailers-only response, the delay in the metadata.
    let app = Router::new()
        .route("/pkg.Svc/Call", post(|| async { "ok" }))
        .layer(RateLimitLayer::new(
            limiter.clone(),
            Policy::new("grpc", 1, 60).unwrap(),
        ));
    let grpc = || {
        let mut r = Request::builder()
            .method("POST")
            .uri("/pkg.Svc/Call")
            .header("content-type", "application/grpc")
            .body(Body::empty())
            .unwrap();
        r.extensions_mut()
            .insert("192.0.2.4:1".parse::<SocketAddr>().unwrap());
        r
    };
    assert_eq!(send(&app, grpc()).await.0, StatusCode::OK);
    let (st, h, body) = send(&app, grpc()).await;
    assert_eq!(st, StatusCode::OK, "gRPC refusals are HTTP 200");
    assert_eq!(hdr(&h, "grpc-status").as_deref(), Some("8"));
    assert!(hdr(&h, "grpc-message")
        .unwrap()
        .starts_with("Too many requests"));
    let retry: u64 = hdr(&h, "retry-after").unwrap().parse().unwrap();
    assert_eq!(
        hdr(&h, "grpc-retry-pushback-ms"),
        Some((retry * 1000).to_string())
    );
    assert!(body.is_empty());
    // What a tonic client makes of it.
    let status = tonic::Status::from_header_map(&h).expect("a gRPC status");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(
        status
            .message()
            .starts_with("Too many requests: 1 per 60s ('grpc')."),
        "{}",
        status.message()
    );
    assert_eq!(
        status
            .metadata()
            .get("retry-after")
            .unwrap()
            .to_str()
            .unwrap(),
        retry.to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_cache_on_in_the_layer_off_in_the_limiter() {
    let s = Server::start(Kind::Module);
    let limiter = support::limiter(&s, slidingwindow_client::Backend::Auto).await;
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(
            limiter.clone(),
            Policy::new("dc", 1, 60).unwrap(),
        ));
    assert_eq!(
        send(&app, request("/", "192.0.2.1:1")).await.0,
        StatusCode::OK
    );
    let (st, first, _) = send(&app, request("/", "192.0.2.1:1")).await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS);
    let before = s.calls("slidingwindow.check");
    for _ in 0..50 {
        let (st, h, _) = send(&app, request("/", "192.0.2.1:1")).await;
        assert_eq!(st, StatusCode::TOO_MANY_REQUESTS);
        // The cached refusal counts down, never below Redis's own answer.
        let retry: u64 = hdr(&h, "retry-after").unwrap().parse().unwrap();
        assert!(retry <= hdr(&first, "retry-after").unwrap().parse().unwrap());
        assert!(retry >= 1);
    }
    assert_eq!(
        s.calls("slidingwindow.check"),
        before,
        "cached refusals reached Redis"
    );
    // The bare limiter has no cache: each refused call reaches Redis.
    for _ in 0..5 {
        assert!(!limiter
            .check("dc:ip:192.0.2.1", &Call::new(1, 60))
            .await
            .unwrap()
            .allowed());
    }
    assert_eq!(s.calls("slidingwindow.check"), before + 5);
    assert!(limiter.deny_cache().is_none());
    // An explicit `now` refusal is exact in units: cached until now0 + retry_after.
    let cached = Limiter::builder(support::manager(&s).await)
        .deny_cache(Some(Default::default()))
        .build();
    let c = Call::new(1, 60).now(1_780_000_000);
    assert!(cached.check("n", &c).await.unwrap().allowed());
    let d = cached.check("n", &c).await.unwrap();
    let r = d.retry_after() as u64;
    let before = s.calls("slidingwindow.check");
    let early = cached
        .check("n", &Call::new(1, 60).now(1_780_000_000 + r - 1))
        .await
        .unwrap();
    assert!(!early.allowed() && early.retry_after() == 1, "{early:?}");
    assert_eq!(s.calls("slidingwindow.check"), before);
    assert!(cached
        .check("n", &Call::new(1, 60).now(1_780_000_000 + r))
        .await
        .unwrap()
        .allowed());
    assert_eq!(s.calls("slidingwindow.check"), before + 1);
    assert_eq!(cached.deny_cache().unwrap().stats().hits, 1);

    // Single flight: once a refusal's entry has ended, a flood on that identity reaches
    // Redis one call at a time; the others wait and are answered from the new answer.
    let flood = Limiter::builder(support::manager(&s).await)
        .deny_cache(Some(Default::default()))
        .build();
    let c = Call::new(1, 1000).ms();
    assert!(flood.check("flood", &c).await.unwrap().allowed());
    let d = flood.check("flood", &c).await.unwrap();
    assert!(!d.allowed());
    tokio::time::sleep(std::time::Duration::from_millis(
        d.retry_after() as u64 + 50,
    ))
    .await;
    let before = s.calls("slidingwindow.check");
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let l = flood.clone();
            let c = c.clone();
            tokio::spawn(async move { l.check("flood", &c).await.unwrap() })
        })
        .collect();
    let mut allowed = 0;
    for t in tasks {
        allowed += t.await.unwrap().allowed() as u32;
    }
    assert_eq!(allowed, 1, "exactly the limit");
    let sent = s.calls("slidingwindow.check") - before;
    assert!(
        sent <= 3,
        "{sent} of 20 concurrent calls reached Redis (one allowed, one refused expected)"
    );
    assert!(flood.deny_cache().unwrap().stats().waits > 0);
}
