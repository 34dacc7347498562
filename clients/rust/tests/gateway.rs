//! The example gateway (examples/gateway/app.rs, the router its `main` serves), driven
//! over real HTTP: exactly the limit, then 429 with an exact Retry-After; with Redis
//! stopped it stays up, the first request waits at most about the timeout, and no later
//! request reaches Redis until a probe succeeds (counted by a counting SendCommand).

mod support;

#[path = "../examples/gateway/app.rs"]
mod app;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Cmd, RedisResult, Value};
use slidingwindow_client::{BoxFuture, Limiter, Policy, SendCommand, TrustedProxies};
use support::{Kind, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Counts every command the limiter hands to the client.
#[derive(Clone)]
struct Counting {
    inner: redis::aio::ConnectionManager,
    sends: Arc<AtomicU64>,
}

impl SendCommand for Counting {
    fn send(&self, cmd: Cmd) -> BoxFuture<RedisResult<Value>> {
        self.sends.fetch_add(1, Ordering::SeqCst);
        self.inner.send(cmd)
    }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request on a fresh connection.
async fn get(addr: SocketAddr, path: &str) -> Reply {
    get_as(addr, path, None).await
}

/// The same with an `x-api-key` (the example counts a `k_...` key as its own identity).
async fn get_as(addr: SocketAddr, path: &str, key: Option<&str>) -> Reply {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("the gateway is up");
    let extra = key
        .map(|k| format!("x-api-key: {k}\r\n"))
        .unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nHost: gateway\r\n{extra}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw);
    let head = text.split("\r\n\r\n").next().unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Reply { status, headers }
}

/// Sleeps until `fraction` of a second past the next whole second of the clock (the
/// server's clock too: same machine).
async fn align(fraction: f64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let target = now.floor() + 1.0 + fraction;
    tokio::time::sleep(Duration::from_secs_f64(target - now)).await;
}

fn unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_gateway_over_http() {
    let mut redis = Server::start(Kind::Module);
    let sends = Arc::new(AtomicU64::new(0));
    let client = Counting {
        inner: support::manager(&redis).await,
        sends: sends.clone(),
    };
    let limiter = Limiter::builder(client)
        .probe_interval(Duration::from_millis(300))
        .build();
    // 3 per 2 seconds (seconds: the server's clock floored to seconds).
    let policy = Policy::new("api", 3, 2).unwrap();
    let router = app::router(limiter.clone(), policy, TrustedProxies::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });

    // Exactly the limit, then 429, all within the first part of one second; a retry one
    // second early refused, one on time allowed. The server floors its clock to seconds,
    // so the timing is aligned to a second: an attempt whose timing a stalled machine
    // broke (the burst crossed a second, or the early retry woke too late) is made again
    // with a fresh identity; the assertions on what the gateway answered are never relaxed.
    let mut exact = false;
    for attempt in 0..3 {
        let key = format!("k_{attempt}");
        let key = Some(key.as_str());
        align(0.05).await;
        let second = unix().floor();
        for i in 0..3 {
            let r = get_as(addr, "/", key).await;
            assert_eq!(r.status, 200, "request {i}");
            assert_eq!(
                r.header("x-ratelimit-remaining"),
                Some((2 - i).to_string().as_str())
            );
        }
        let refused = get_as(addr, "/", key).await;
        if unix() - second >= 0.9 {
            eprintln!("attempt {attempt}: the burst crossed a second; again");
            continue;
        }
        assert_eq!(refused.status, 429);
        let retry: f64 = refused
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .unwrap();
        assert!(retry >= 1.0);
        let early = second + retry - 1.0 + 0.5;
        tokio::time::sleep(Duration::from_secs_f64((early - unix()).max(0.0))).await;
        let r = get_as(addr, "/", key).await;
        if unix() >= second + retry {
            eprintln!("attempt {attempt}: the early retry came too late; again");
            continue;
        }
        assert_eq!(r.status, 429, "a retry one second early");
        let on_time = second + retry + 0.05;
        tokio::time::sleep(Duration::from_secs_f64((on_time - unix()).max(0.0))).await;
        assert_eq!(
            get_as(addr, "/", key).await.status,
            200,
            "a retry at Retry-After"
        );
        exact = true;
        break;
    }
    assert!(exact, "three attempts broken by the machine's stalls");
    // The client address's own identity is untouched by the keys' traffic.
    assert_eq!(
        get(addr, "/").await.header("x-ratelimit-remaining"),
        Some("2")
    );

    // Redis stopped: the gateway stays up and fails open.
    redis.kill();
    let t = Instant::now();
    let r = get(addr, "/").await;
    assert_eq!(r.status, 200);
    assert!(
        t.elapsed() <= Duration::from_millis(500 + 700),
        "first request took {:?}",
        t.elapsed()
    );
    assert!(
        r.header("x-ratelimit-limit").is_none(),
        "no headers from a degraded decision"
    );
    let stats = limiter.stats();
    assert!(stats.down);
    let (sent_at_outage, sends_at_outage) = (stats.sent, sends.load(Ordering::SeqCst));
    for _ in 0..40 {
        assert_eq!(get(addr, "/").await.status, 200);
    }
    // Wait past a few probe intervals with more requests, so probes do happen.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(get(addr, "/").await.status, 200);
    }
    tokio::time::sleep(Duration::from_millis(600)).await; // let the last probe end
    let stats = limiter.stats();
    assert_eq!(
        stats.sent, sent_at_outage,
        "no request reached Redis during the outage"
    );
    let probe_sends = sends.load(Ordering::SeqCst) - sends_at_outage;
    assert!(stats.probes >= 1, "no probe in {} requests", 46);
    assert_eq!(
        probe_sends, stats.probes,
        "only probes reached the client, one command each"
    );

    // Back: a probe succeeds, then requests reach Redis again and carry its headers.
    redis.start_again(true);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = get(addr, "/").await;
        assert_eq!(r.status, 200);
        if r.header("x-ratelimit-limit").is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "never recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!limiter.stats().down);
    let before = limiter.stats().sent;
    get(addr, "/").await;
    assert_eq!(limiter.stats().sent, before + 1);
}
