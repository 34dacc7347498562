//! The cases that depend on the server, on all three: a Redis 7 with the module, the same
//! server as a managed one (no module, `--enable-module-command no`: the client loads the
//! Functions library), and a 3-master cluster. Each drives the real binary.

mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::*;

const CONFIG: &str = r#"
domain: edge
descriptors:
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: burst
    rate_limit:
      unit: second
      requests_per_unit: 5
"#;

/// 50 concurrent callers on one descriptor of 20 per minute: exactly 20 OK, over gRPC.
async fn fifty_callers_get_exactly_the_limit(kind: Kind) {
    let b = Backend::start(kind);
    let rls = Rls::start(&b, &[("edge.yaml", CONFIG)], &[]).await;
    let client = rls.client().await;
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let mut c = client.clone();
            tokio::spawn(async move {
                c.should_rate_limit(one("edge", "tenant", "t1"))
                    .await
                    .map(|r| r.into_inner().overall_code)
            })
        })
        .collect();
    let mut ok = 0;
    let mut over = 0;
    for t in tasks {
        match t.await.unwrap().unwrap() {
            OK => ok += 1,
            OVER => over += 1,
            other => panic!("code {other}"),
        }
    }
    assert_eq!((ok, over), (20, 30), "{kind:?}");
    // Another tenant has its own count.
    let r = rls.call(one("edge", "tenant", "t2")).await.unwrap();
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses[0].limit_remaining, 19);
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Sleeps until the wall clock is `at` ms into a second.
async fn until_ms_of_second(at: u64) {
    let n = now_ms() % 1000;
    let wait = if n < at { at - n } else { 1000 - n + at };
    tokio::time::sleep(Duration::from_millis(wait)).await;
}

/// 5 per second: 5 requests late in one second and 5 just after the next second starts.
/// A fixed window (envoyproxy/ratelimit's, keyed by the second) allows all 10; a sliding
/// window still sees the first burst and allows at most 1 more. Over /json.
async fn a_burst_across_the_window_boundary_is_refused(kind: Kind) {
    let b = Backend::start(kind);
    let rls = Rls::start(&b, &[("edge.yaml", CONFIG)], &[]).await;
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"burst","value":"b1"}]}]}"#;
    // Warm the connection and the backend (the library's first load) on another value.
    rls.json(r#"{"domain":"edge","descriptors":[{"entries":[{"key":"burst","value":"warm"}]}]}"#)
        .await;
    until_ms_of_second(850).await;
    let mut first = 0;
    for _ in 0..5 {
        if rls.json(body).await.0 == 200 {
            first += 1;
        }
    }
    until_ms_of_second(50).await;
    let mut second = 0;
    let mut last = serde_json::Value::Null;
    for _ in 0..5 {
        let (st, v) = rls.json(body).await;
        if st == 200 {
            second += 1;
        } else {
            assert_eq!(st, 429);
            last = v;
        }
    }
    assert_eq!(first, 5, "{kind:?}: the first burst is within the limit");
    assert!(
        second <= 1,
        "{kind:?}: {second} of the second burst allowed: a fixed window would allow 5"
    );
    assert_eq!(last["overallCode"], "OVER_LIMIT");
    assert_eq!(last["statuses"][0]["currentLimit"]["unit"], "SECOND");
    assert_eq!(last["statuses"][0]["currentLimit"]["requestsPerUnit"], 5);
    // duration_until_reset on OVER_LIMIT is the exact wait, under a second.
    let d = last["statuses"][0]["durationUntilReset"]
        .as_str()
        .unwrap()
        .to_string();
    let secs: f64 = d.trim_end_matches('s').parse().unwrap();
    assert!(secs > 0.0 && secs <= 1.0, "{d}");
}

/// Redis stops answering: the first call is answered within REDIS_TIMEOUT (300 ms) with
/// UNAVAILABLE, the next ones at once; when Redis is back the service answers again.
async fn an_outage_is_answered_fast_then_recovered(kind: Kind) {
    let mut b = Backend::start(kind);
    let rls = Rls::start(&b, &[("edge.yaml", CONFIG)], &[]).await;
    let mut client = rls.client().await;
    let r = client
        .should_rate_limit(one("edge", "tenant", "o1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, OK);
    let cluster = kind == Kind::Cluster;
    for n in &mut b.nodes {
        if cluster {
            n.freeze();
        } else {
            n.kill();
        }
    }
    let t = Instant::now();
    let e = client
        .should_rate_limit(one("edge", "tenant", "o1"))
        .await
        .unwrap_err();
    let first = t.elapsed();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert!(
        first < Duration::from_millis(1500),
        "{kind:?}: first answer after {first:?}"
    );
    let t = Instant::now();
    for _ in 0..5 {
        let e = client
            .should_rate_limit(one("edge", "tenant", "o1"))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable);
    }
    let next = t.elapsed() / 5;
    eprintln!("{kind:?}: outage: first answer after {first:?}, then {next:?} per call");
    assert!(
        next < Duration::from_millis(100),
        "{kind:?}: then {next:?} per call"
    );
    let m = rls.metrics().await;
    assert!(m.contains("slidingwindow_redis_outage 1\n"), "{m}");
    // /json says 503.
    let (st, _) = rls
        .json(r#"{"domain":"edge","descriptors":[{"entries":[{"key":"tenant","value":"o1"}]}]}"#)
        .await;
    assert_eq!(st, 503);
    if cluster {
        b.nodes.iter().for_each(|n| n.thaw());
    } else {
        b.start_again();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.should_rate_limit(one("edge", "tenant", "o1")).await {
            Ok(r) if r.get_ref().overall_code == OK => break,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "{kind:?}: no recovery: {}",
            rls.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    rls.wait_log("reachable again").await;
}

/// OUTAGE_ANSWER=ok: an outage is answered OK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_answer_ok() {
    let mut b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("edge.yaml", CONFIG)], &[("OUTAGE_ANSWER", "ok")]).await;
    b.nodes[0].kill();
    let t = Instant::now();
    let r = rls.call(one("edge", "tenant", "x")).await.unwrap();
    assert!(t.elapsed() < Duration::from_millis(1500));
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses[0].code, OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_module() {
    fifty_callers_get_exactly_the_limit(Kind::Module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_library() {
    fifty_callers_get_exactly_the_limit(Kind::LibraryOnly).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_cluster() {
    fifty_callers_get_exactly_the_limit(Kind::Cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_module() {
    a_burst_across_the_window_boundary_is_refused(Kind::Module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_library() {
    a_burst_across_the_window_boundary_is_refused(Kind::LibraryOnly).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_cluster() {
    a_burst_across_the_window_boundary_is_refused(Kind::Cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_module() {
    an_outage_is_answered_fast_then_recovered(Kind::Module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_library() {
    an_outage_is_answered_fast_then_recovered(Kind::LibraryOnly).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_cluster() {
    an_outage_is_answered_fast_then_recovered(Kind::Cluster).await;
}
