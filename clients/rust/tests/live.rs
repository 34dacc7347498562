//! Every call, live, on the module server, a library-only server, Redis 6.2 (EVALSHA)
//! and a 3-master cluster (identities on every master), and 50 concurrent tasks on one
//! identity getting exactly the limit on each.

mod support;

use std::time::Duration;

use slidingwindow_client::{Backend, Call, Error, Limiter, Mode, SendCommand};
use support::{Cluster, Kind, Server};

/// Every call on one limiter; `tag` keeps the keys of two runs on one server apart.
async fn every_call<S: SendCommand>(l: &Limiter<S>, tag: &str) {
    let id = format!("{tag}:a");
    // 3 per 60 s at a fixed time (seconds): three allowed, the fourth denied.
    let t0: u64 = 1_780_000_020;
    let call = Call::new(3, 60).now(t0);
    for i in 1..=3u64 {
        let d = l.check(&id, &call).await.unwrap();
        assert!(d.allowed() && !d.degraded(), "{tag}: call {i}: {d:?}");
        assert_eq!(
            (d.summary.count, d.summary.limit, d.summary.remaining),
            (i, 3, 3 - i),
            "{tag}"
        );
        assert_eq!(d.summary.retry_after, -1);
        assert!(d.summary.reset_after > 0);
        assert_eq!(d.limits.len(), 1);
    }
    let denied = l.check(&id, &call).await.unwrap();
    assert!(!denied.allowed() && !denied.degraded(), "{tag}: {denied:?}");
    assert_eq!((denied.summary.count, denied.summary.remaining), (3, 0));
    let r = denied.retry_after();
    assert!(r > 0, "{tag}: retry_after {r}");
    // retry_after is exact: one unit early still denied, on time allowed (PEEK: no write).
    let early = l
        .peek(&id, &Call::new(3, 60).now(t0 + r as u64 - 1))
        .await
        .unwrap();
    let on_time = l
        .peek(&id, &Call::new(3, 60).now(t0 + r as u64))
        .await
        .unwrap();
    assert!(
        !early.allowed() && on_time.allowed(),
        "{tag}: early {early:?} on time {on_time:?}"
    );
    // COUNTS: nothing moved by the PEEKs or the refusal.
    let c = l.counts(&id, 60, false, Some(t0)).await.unwrap();
    assert_eq!((c.previous, c.current, c.elapsed), (0, 3, t0 % 60), "{tag}");
    // REFUND gives one back and answers PEEK's view after it (estimate 2, plus this request).
    let back = l.refund(&id, &call).await.unwrap();
    assert!(back.allowed() && back.summary.count == 3, "{tag}: {back:?}");
    // COST: 2 more do not fit (2 + 2 > 3), 1 does.
    assert!(!l.check(&id, &call.clone().cost(2)).await.unwrap().allowed());
    assert!(l.check(&id, &call).await.unwrap().allowed());

    // Several limits: 10 per second and 2 per minute; the minute governs and denies.
    let multi = Call::new(10, 1).and_limit(2, 60).now(t0);
    let id2 = format!("{tag}:multi");
    for _ in 0..2 {
        assert!(l.check(&id2, &multi).await.unwrap().allowed());
    }
    let d = l.check(&id2, &multi).await.unwrap();
    assert!(!d.allowed());
    assert_eq!(d.limits.len(), 2);
    assert_eq!(d.governing, 1, "{tag}: {d:?}");
    assert_eq!(d.summary.window, 60);
    assert!(d.limits[0].allowed && !d.limits[1].allowed, "{tag}: {d:?}");
    assert_eq!((d.limits[0].window, d.limits[1].window), (1, 60));
    assert_eq!(d.retry_after(), d.limits[1].retry_after);

    // Milliseconds with an explicit now.
    let id3 = format!("{tag}:ms");
    let ms = Call::new(2, 1000).ms().now(t0 * 1000 + 500);
    assert!(l.check(&id3, &ms).await.unwrap().allowed());
    assert!(l.check(&id3, &ms).await.unwrap().allowed());
    let d = l.check(&id3, &ms).await.unwrap();
    assert!(!d.allowed() && d.summary.ms);
    let r = d.retry_after() as u64;
    assert!(!l
        .peek(&id3, &Call::new(2, 1000).ms().now(t0 * 1000 + 500 + r - 1))
        .await
        .unwrap()
        .allowed());
    assert!(l
        .peek(&id3, &Call::new(2, 1000).ms().now(t0 * 1000 + 500 + r))
        .await
        .unwrap()
        .allowed());

    // A rate string on the server's clock: windows in ms, sent with MS.
    let id4 = format!("{tag}:rates");
    assert!(l
        .check_limits(&id4, "2/second;5/minute")
        .await
        .unwrap()
        .allowed());
    assert!(l
        .check_limits(&id4, "2/second;5/minute")
        .await
        .unwrap()
        .allowed());
    let d = l.check_limits(&id4, "2/second;5/minute").await.unwrap();
    assert!(!d.allowed() && d.summary.ms, "{tag}: {d:?}");
    assert!(
        d.retry_after() > 0 && d.retry_after() <= 1000,
        "{tag}: {d:?}"
    );
    assert_eq!(d.limits[0].window, 1000);
    assert_eq!(d.summary.retry_after_seconds(), Some(1));
    let p = l.peek_limits(&id4, "2/second;5/minute").await.unwrap();
    assert!(!p.allowed());
    let back = l.refund_limits(&id4, "2/second;5/minute").await.unwrap();
    assert!(back.allowed(), "{tag}: {back:?}");
    // A rate string and ms together: refused before any I/O.
    let e = l
        .check(&id4, &Call::rates("1/second").unwrap().ms())
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("carries its own unit")),
        "{e}"
    );

    // is_allowed (the seed's call) on the server clock, and reset.
    let id5 = format!("{tag}:seed");
    assert_eq!(l.is_allowed(&id5, 1, 60).await.unwrap(), (true, 1));
    assert_eq!(l.is_allowed(&id5, 1, 60).await.unwrap(), (false, 1));
    l.reset(&id5).await.unwrap();
    assert_eq!(l.is_allowed(&id5, 1, 60).await.unwrap(), (true, 1));

    // wait: sleeps the exact retry_after, then is allowed.
    let id6 = format!("{tag}:wait");
    let w = Call::new(1, 300).ms();
    assert!(l.check(&id6, &w).await.unwrap().allowed());
    let started = std::time::Instant::now();
    let d = l.wait(&id6, &w, Duration::from_secs(5)).await.unwrap();
    assert!(d.allowed(), "{tag}: {d:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(1),
        "{tag}: did not wait"
    );
    // Never possible (cost > limit): at once, retry_after -1.
    let d = l
        .wait(&id6, &w.clone().cost(2), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(!d.allowed() && d.retry_after() == -1);

    // The server's argument errors come back as errors, not as outages.
    let e = l.check(&id, &Call::new(1, 0)).await.unwrap_err();
    assert!(
        matches!(e, Error::Redis(_)) && e.to_string().contains("window must be"),
        "{tag}: {e}"
    );
    assert!(!l.stats().down);
}

/// 50 concurrent tasks on one identity: exactly the limit allowed.
async fn fifty_tasks<S: SendCommand>(l: &Limiter<S>, id: &str) {
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let l = l.clone();
        let id = id.to_string();
        tasks.push(tokio::spawn(async move {
            l.check(&id, &Call::new(20, 3600)).await.unwrap()
        }));
    }
    let mut allowed = 0;
    for t in tasks {
        let d = t.await.unwrap();
        assert!(!d.degraded(), "{d:?}");
        allowed += d.allowed() as u32;
    }
    assert_eq!(allowed, 20, "{id}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_server() {
    let s = Server::start(Kind::Module);
    let l = support::limiter(&s, Backend::Auto).await;
    every_call(&l, "auto").await;
    assert_eq!(l.stats().mode, Some(Mode::Module));
    assert_eq!(
        l.stats().detections,
        0,
        "the module server needs no detection"
    );
    fifty_tasks(&l, "fifty").await;
    // The library on the same server, forced: same answers, loaded once.
    let lib = support::limiter(&s, Backend::Library).await;
    every_call(&lib, "forced").await;
    assert_eq!(
        (lib.stats().mode, lib.stats().loads),
        (Some(Mode::Function), 1)
    );
    // MultiplexedConnection works too.
    let mux = redis::Client::open(s.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    every_call(&Limiter::new(mux), "mux").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_only_server() {
    let s = Server::start(Kind::LibraryOnly);
    let l = support::limiter(&s, Backend::Auto).await;
    fifty_tasks(&l, "fifty").await;
    let st = l.stats();
    assert_eq!(
        (st.mode, st.loads, st.detections),
        (Some(Mode::Function), 1, 1),
        "one detection for 50 tasks"
    );
    every_call(&l, "auto").await;
    // The module only: an error naming the command, not an outage.
    let m = support::limiter(&s, Backend::Module).await;
    let e = m.check("x", &Call::new(1, 60)).await.unwrap_err();
    assert!(
        e.to_string().to_lowercase().contains("unknown command"),
        "{e}"
    );
    assert!(!m.stats().down);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis62_eval() {
    let s = Server::start(Kind::Redis62);
    let l = support::limiter(&s, Backend::Auto).await;
    every_call(&l, "auto").await;
    assert_eq!(l.stats().mode, Some(Mode::Eval));
    fifty_tasks(&l, "fifty").await;
    assert!(s.calls("evalsha") > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_identities_on_every_master() {
    let c = Cluster::start(3);
    for backend in [Backend::Auto, Backend::Library] {
        let l = Limiter::builder(support::cluster_connection(&c).await)
            .backend(backend)
            .prefix(format!("{backend:?}:"))
            .build();
        // Thirty identities: crc16 spreads them over the three masters.
        for i in 0..30 {
            every_call(&l, &format!("id{i}")).await;
        }
        fifty_tasks(&l, "fifty").await;
        let want = if backend == Backend::Auto {
            Mode::Module
        } else {
            Mode::Function
        };
        assert_eq!(l.stats().mode, Some(want));
        for n in &c.nodes {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{backend:?}:*"))
                .query(&mut n.con())
                .unwrap();
            assert!(
                !keys.is_empty(),
                "{backend:?}: no identity on master {}",
                n.port
            );
            if backend == Backend::Library {
                let v: String = redis::cmd("FCALL_RO")
                    .arg("slidingwindow_version")
                    .arg(0)
                    .query(&mut n.con())
                    .unwrap();
                assert_eq!(
                    v,
                    slidingwindow_client::library::version(),
                    "library on {}",
                    n.port
                );
            }
        }
    }
}
