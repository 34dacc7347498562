//! Each configuration key, setting and API feature once, through the real binary on a
//! Redis 7 with the module (a few on the library-only server), over gRPC unless named
//! /json. Every test starts its own server and service.

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::google::protobuf::UInt64Value;
use support::*;

const BASIC: &str = r#"
domain: shop
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: remote_address
    descriptors:
      - key: path
        value: /cart
        rate_limit:
          unit: hour
          requests_per_unit: 3
"#;

async fn codes(rls: &Rls, req: RateLimitRequest, n: usize) -> Vec<i32> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(rls.call(req.clone()).await.unwrap().overall_code);
    }
    out
}

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domain_key_value_and_the_most_specific_match() {
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("basic.yaml", BASIC)], &[]).await;
    // key_value wins over key alone.
    let r = rls.call(one("shop", "database", "users")).await.unwrap();
    let l = r.statuses[0].current_limit.clone().unwrap();
    assert_eq!((l.requests_per_unit, l.unit), (500, 1));
    assert_eq!(r.statuses[0].limit_remaining, 499);
    // key alone: 2 per minute, its own count per value.
    assert_eq!(
        codes(&rls, one("shop", "database", "orders"), 3).await,
        vec![OK, OK, OVER]
    );
    assert_eq!(
        rls.call(one("shop", "database", "items"))
            .await
            .unwrap()
            .overall_code,
        OK
    );
    // Unknown key or domain: OK with no limit, nothing sent to Redis.
    let before = b.calls();
    let r = rls.call(one("shop", "nothing", "x")).await.unwrap();
    assert_eq!(r.overall_code, OK);
    assert!(r.statuses[0].current_limit.is_none());
    assert_eq!(
        rls.call(one("other", "database", "users"))
            .await
            .unwrap()
            .overall_code,
        OK
    );
    assert_eq!(b.calls(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_descriptors_over_json() {
    let b = Backend::start(Kind::LibraryOnly);
    let rls = Rls::start(&b, &[("basic.yaml", BASIC)], &[]).await;
    let body = r#"{"domain":"shop","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"},{"key":"path","value":"/cart"}]}]}"#;
    let mut st = Vec::new();
    for _ in 0..4 {
        st.push(rls.json(body).await.0);
    }
    assert_eq!(st, vec![200, 200, 200, 429]);
    let (_, v) = rls.json(body).await;
    assert_eq!(v["statuses"][0]["currentLimit"]["unit"], "HOUR");
    assert_eq!(v["statuses"][0]["currentLimit"]["requestsPerUnit"], 3);
    // Only the parent: no limit at that depth.
    let (st, v) = rls
        .json(r#"{"domain":"shop","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}"#)
        .await;
    assert_eq!((st, v["overallCode"].clone()), (200, "OK".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_wildcard_each_value_counts_apart() {
    let y = "domain: w\ndescriptors:\n  - key: path\n    value: /api/*\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("w.yaml", y)], &[]).await;
    assert_eq!(
        codes(&rls, one("w", "path", "/api/a"), 2).await,
        vec![OK, OVER]
    );
    assert_eq!(
        rls.call(one("w", "path", "/api/b"))
            .await
            .unwrap()
            .overall_code,
        OK
    );
    let r = rls.call(one("w", "path", "/web")).await.unwrap();
    assert!(r.statuses[0].current_limit.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_threshold_one_count_for_every_match() {
    let y = "domain: w\ndescriptors:\n  - key: file\n    value: \"*.png\"\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("w.yaml", y)], &[]).await;
    assert_eq!(
        rls.call(one("w", "file", "a.png"))
            .await
            .unwrap()
            .overall_code,
        OK
    );
    assert_eq!(
        rls.call(one("w", "file", "b.png"))
            .await
            .unwrap()
            .overall_code,
        OK
    );
    assert_eq!(
        rls.call(one("w", "file", "c.png"))
            .await
            .unwrap()
            .overall_code,
        OVER
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_unit_is_a_sliding_window_in_ms() {
    let mut y = String::from("domain: u\ndescriptors:\n");
    for u in ["second", "minute", "hour", "day", "week", "month", "year"] {
        y += &format!("  - key: {u}\n    rate_limit: {{unit: {u}, requests_per_unit: 10}}\n");
    }
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("u.yaml", &y)], &[]).await;
    for (u, code, ms) in [
        ("second", 1, 1_000u64),
        ("minute", 2, 60_000),
        ("hour", 3, 3_600_000),
        ("day", 4, 86_400_000),
        ("week", 7, 604_800_000),
        ("month", 5, 2_592_000_000),
        ("year", 6, 31_536_000_000),
    ] {
        let r = rls.call(one("u", u, "x")).await.unwrap();
        assert_eq!(
            r.statuses[0].current_limit.as_ref().unwrap().unit,
            code,
            "{u}"
        );
        // The key's sliding window: the module holds it for two windows, in ms.
        let ttl: i64 = redis::cmd("PTTL")
            .arg(format!("u_{u}_x_"))
            .query(&mut b.nodes[0].con())
            .unwrap();
        assert!(ttl > ms as i64 && ttl <= 2 * ms as i64, "{u}: pttl {ttl}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlimited_answers_ok_without_redis() {
    let y = "domain: d\ndescriptors:\n  - key: internal\n    rate_limit:\n      unlimited: true\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("d.yaml", y)], &[]).await;
    for _ in 0..5 {
        let r = rls.call(one("d", "internal", "x")).await.unwrap();
        assert_eq!(
            (r.overall_code, r.statuses[0].limit_remaining),
            (OK, u32::MAX)
        );
    }
    assert_eq!(b.calls(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_and_replaces_drop_the_replaced_limit() {
    let y = r#"
domain: d
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}
  - key: plan
    value: vip
    rate_limit:
      unit: minute
      requests_per_unit: 3
      replaces:
        - name: per_user
"#;
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("d.yaml", y)], &[]).await;
    let both = request("d", vec![desc(&[("user", "u1")]), desc(&[("plan", "vip")])]);
    let r = rls.call(both.clone()).await.unwrap();
    assert!(
        r.statuses[0].current_limit.is_none(),
        "per_user is replaced"
    );
    assert_eq!(
        r.statuses[1]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        3
    );
    assert_eq!(codes(&rls, both, 3).await, vec![OK, OK, OVER]);
    // Alone, per_user applies (and is named in current_limit).
    let r = rls.call(one("d", "user", "u2")).await.unwrap();
    assert_eq!(
        r.statuses[0].current_limit.as_ref().unwrap().name,
        "per_user"
    );
    assert_eq!(codes(&rls, one("d", "user", "u2"), 1).await, vec![OVER]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_counts_but_answers_ok() {
    let y = "domain: d\ndescriptors:\n  - key: s\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("d.yaml", y)], &[]).await;
    assert_eq!(codes(&rls, one("d", "s", "x"), 4).await, vec![OK; 4]);
    let r = rls.call(one("d", "s", "x")).await.unwrap();
    assert_eq!((r.statuses[0].code, r.statuses[0].limit_remaining), (OK, 0));
    let m = rls.metrics().await;
    assert!(
        m.contains("ratelimit_service_rate_limit_shadow_mode{domain=\"d\",key1=\"s\"} 3\n"),
        "{m}"
    );
    assert!(
        m.contains("ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"s\"} 5\n"),
        "{m}"
    );
    assert!(
        m.contains("ratelimit_service_rate_limit_within_limit{domain=\"d\",key1=\"s\"} 2\n"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_shadow_mode_setting() {
    let y = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("d.yaml", y)], &[("SHADOW_MODE", "true")]).await;
    rls.call(one("d", "k", "x")).await.unwrap();
    let r = rls.call(one("d", "k", "x")).await.unwrap();
    // The descriptor says OVER_LIMIT, the answer is OK.
    assert_eq!((r.overall_code, r.statuses[0].code), (OK, OVER));
    assert!(rls
        .metrics()
        .await
        .contains("ratelimit_service_global_shadow_mode 1\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_mode_fails_only_when_every_quota_fails() {
    let y = "domain: d\ndescriptors:\n  - key: q\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("d.yaml", y)], &[]).await;
    rls.call(one("d", "q", "a")).await.unwrap();
    // Alone and over: every quota descriptor failed -> OVER_LIMIT.
    assert_eq!(
        rls.call(one("d", "q", "a")).await.unwrap().overall_code,
        OVER
    );
    // With another quota that passes: OK, the failed one still says OVER_LIMIT.
    let r = rls
        .call(request("d", vec![desc(&[("q", "a")]), desc(&[("q", "b")])]))
        .await
        .unwrap();
    assert_eq!(r.overall_code, OK);
    assert_eq!((r.statuses[0].code, r.statuses[1].code), (OVER, OK));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_quota_mode_setting() {
    let y = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("d.yaml", y)], &[("QUOTA_MODE", "true")]).await;
    rls.call(one("d", "k", "a")).await.unwrap();
    assert_eq!(
        rls.call(one("d", "k", "a")).await.unwrap().overall_code,
        OVER
    );
    // With a descriptor that matches nothing (a quota descriptor that passes): OK.
    let r = rls
        .call(request(
            "d",
            vec![desc(&[("k", "a")]), desc(&[("none", "x")])],
        ))
        .await
        .unwrap();
    assert_eq!((r.overall_code, r.statuses[0].code), (OK, OVER));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detailed_metric_and_value_to_metric_name_the_counters() {
    let y = include_str!("fixtures/metric_names.yaml");
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("m.yaml", y)], &[]).await;
    rls.call(one("m", "client", "c42")).await.unwrap();
    rls.call(request(
        "m",
        vec![desc(&[("route", "/a"), ("method", "GET")])],
    ))
    .await
    .unwrap();
    let m = rls.metrics().await;
    assert!(
        m.contains("ratelimit_service_rate_limit_total_hits{domain=\"m\",key1=\"client_c42\"} 1\n"),
        "{m}"
    );
    assert!(m.contains("ratelimit_service_rate_limit_total_hits{domain=\"m\",key1=\"route_/a\",key2=\"method\"} 1\n"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_addend_request_and_descriptor() {
    let y = "domain: h\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("h.yaml", y)], &[]).await;
    let rem = |r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        r.statuses[0].limit_remaining
    };
    // The request's hits_addend unset (0): 1.
    assert_eq!(rem(&rls.call(one("h", "k", "a")).await.unwrap()), 9);
    // The request's hits_addend 3.
    let mut req = one("h", "k", "a");
    req.hits_addend = 3;
    assert_eq!(rem(&rls.call(req).await.unwrap()), 6);
    // The descriptor's own 0: check only, counts nothing (and overrides the request's).
    let mut req = one("h", "k", "a");
    req.hits_addend = 5;
    req.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    let r = rls.call(req).await.unwrap();
    assert_eq!((r.overall_code, rem(&r)), (OK, 6));
    // The descriptor's own 4 (over the request's 1).
    let mut req = one("h", "k", "a");
    req.hits_addend = 1;
    req.descriptors[0].hits_addend = Some(UInt64Value { value: 4 });
    assert_eq!(rem(&rls.call(req.clone()).await.unwrap()), 2);
    // 4 more do not fit in 2: refused, nothing counted.
    let r = rls.call(req).await.unwrap();
    assert_eq!((r.overall_code, rem(&r)), (OVER, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn is_negative_hits_gives_back_exactly_what_was_counted() {
    let y = "domain: n\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("n.yaml", y)], &[]).await;
    let mut req = one("n", "k", "a");
    req.descriptors[0].hits_addend = Some(UInt64Value { value: 7 });
    assert_eq!(
        rls.call(req.clone()).await.unwrap().statuses[0].limit_remaining,
        3
    );
    req.descriptors[0].hits_addend = Some(UInt64Value { value: 3 });
    req.descriptors[0].is_negative_hits = true;
    let r = rls.call(req.clone()).await.unwrap();
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 6));
    req.descriptors[0].hits_addend = Some(UInt64Value { value: 4 });
    assert_eq!(
        rls.call(req.clone()).await.unwrap().statuses[0].limit_remaining,
        10
    );
    // Never below zero.
    assert_eq!(rls.call(req).await.unwrap().statuses[0].limit_remaining, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_descriptor_limit_override() {
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("basic.yaml", BASIC)], &[]).await;
    let mut req = one("shop", "database", "users");
    req.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 2,
    });
    let r = rls.call(req.clone()).await.unwrap();
    let l = r.statuses[0].current_limit.clone().unwrap();
    assert_eq!((r.overall_code, l.requests_per_unit, l.unit), (OK, 1, 2));
    assert_eq!(rls.call(req.clone()).await.unwrap().overall_code, OVER);
    // An override with no unit is a bad request.
    req.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 0,
    });
    let e = rls.call(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_headers_renamed_and_retry_after() {
    let y = "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: wide\n    rate_limit: {unit: minute, requests_per_unit: 100}\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(
        &b,
        &[("r.yaml", y)],
        &[
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_REMAINING_HEADER", "X-Left"),
        ],
    )
    .await;
    let both = request("r", vec![desc(&[("wide", "w")]), desc(&[("k", "a")])]);
    let r = rls.call(both.clone()).await.unwrap();
    let h: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(
        h[0],
        ("RateLimit-Limit".into(), "2".into()),
        "the least remaining governs: {h:?}"
    );
    assert_eq!(h[1], ("X-Left".into(), "1".into()));
    assert_eq!(h[2].0, "RateLimit-Reset");
    let reset: u64 = h[2].1.parse().unwrap();
    assert!((1..=60).contains(&reset), "{h:?}");
    assert_eq!(h.len(), 3);
    rls.call(both.clone()).await.unwrap();
    let r = rls.call(both).await.unwrap();
    assert_eq!(r.overall_code, OVER);
    let retry = r
        .response_headers_to_add
        .iter()
        .find(|h| h.key == "Retry-After")
        .expect("Retry-After");
    let s: u64 = retry.value.parse().unwrap();
    assert!((1..=60).contains(&s), "{s}");
    let exact = r.statuses[1].duration_until_reset.unwrap();
    assert_eq!(
        s,
        (exact.seconds as u64) + u64::from(exact.nanos > 0),
        "Retry-After is the exact wait rounded up"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_headers_unless_enabled() {
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("basic.yaml", BASIC)], &[]).await;
    let r = rls.call(one("shop", "database", "users")).await.unwrap();
    assert!(r.response_headers_to_add.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests() {
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("basic.yaml", BASIC)], &[]).await;
    let e = rls.call(one("", "database", "users")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("domain must not be empty"), "{e:?}");
    let e = rls.call(request("shop", vec![])).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("descriptor list must not be empty"),
        "{e:?}"
    );
    let e = rls
        .call(request("shop", vec![desc(&[])]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    // /json: malformed, wrong types, empty domain.
    for body in [
        "{",
        r#"{"domain":5}"#,
        r#"{"domain":"","descriptors":[{"entries":[{"key":"a"}]}]}"#,
        r#"{"domain":"shop"}"#,
    ] {
        let (st, _) = rls.json(body).await;
        assert_eq!(st, 400, "{body}");
    }
    // Still serving.
    assert_eq!(
        rls.call(one("shop", "database", "users"))
            .await
            .unwrap()
            .overall_code,
        OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_grpc_and_http() {
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("basic.yaml", BASIC)], &[]).await;
    let (st, body) = rls.http("GET", "/healthcheck", "").await.unwrap();
    assert_eq!((st, body.as_str()), (200, "OK"));
    let ch = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{}", rls.grpc_port))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = tonic_health::pb::health_client::HealthClient::new(ch);
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let r = h
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, 1, "{service:?} SERVING");
    }
    let (st, dump) = http(rls.debug_port, "GET", "/rlconfig", "").await.unwrap();
    assert_eq!(st, 200);
    assert!(
        dump.contains("shop.database_users: unit=SECOND requests_per_unit=500"),
        "{dump}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_and_a_bad_file_keeps_the_old_config() {
    let b = Backend::start(Kind::Module);
    let v1 = "domain: hr\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let rls = Rls::start(&b, &[("hr.yaml", v1)], &[]).await;
    let limit = |r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit)
    };
    assert_eq!(
        limit(&rls.call(one("hr", "k", "a")).await.unwrap()),
        Some(1)
    );
    let file = rls.config_dir().join("hr.yaml");
    std::fs::write(
        &file,
        v1.replace("requests_per_unit: 1", "requests_per_unit: 5"),
    )
    .unwrap();
    rls.wait_log("reloaded the configuration").await;
    let r = rls.call(one("hr", "k", "a")).await.unwrap();
    // The count carries over: 1 already counted, 5 allowed now.
    assert_eq!(
        (limit(&r), r.overall_code, r.statuses[0].limit_remaining),
        (Some(5), OK, 3)
    );
    // A bad file: refused with its file, line and reason; 5 still serves.
    std::fs::write(&file, "domain: hr\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 9}\n").unwrap();
    rls.wait_log("invalid rate limit unit 'fortnight' at line 4")
        .await;
    let log = rls.log();
    assert!(
        log.contains(&format!("{}: descriptors[0].rate_limit", file.display())),
        "{log}"
    );
    assert!(
        log.contains("the configuration in force keeps serving"),
        "{log}"
    );
    assert_eq!(
        limit(&rls.call(one("hr", "k", "b")).await.unwrap()),
        Some(5)
    );
    let m = rls.metrics().await;
    assert!(m.contains("ratelimit_service_config_load_error 1\n"), "{m}");
    // A second file with a new domain.
    std::fs::write(&file, v1).unwrap();
    std::fs::write(rls.config_dir().join("more.yaml"), "domain: more\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while rls.call(one("more", "k", "a")).await.unwrap().statuses[0]
        .current_limit
        .is_none()
    {
        assert!(std::time::Instant::now() < deadline, "{}", rls.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_root_symlink_swap_and_watch_root_off() {
    // RUNTIME_ROOT is a symlink ("current") swapped to a new folder, as their runtime
    // layout does it.
    let b = Backend::start(Kind::Module);
    let base = temp_dir("runtime");
    for (v, n) in [("v1", 1), ("v2", 2)] {
        let d = base.join(v).join("app").join("rl");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("c.yaml"), format!("domain: sym\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: {n}}}\n")).unwrap();
    }
    std::os::unix::fs::symlink(base.join("v1"), base.join("current")).unwrap();
    let root = temp_dir("rls");
    let env = [
        ("RUNTIME_ROOT", base.join("current").display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "app".to_string()),
        ("RUNTIME_APPDIRECTORY", "rl".to_string()),
        ("RUNTIME_WATCH_ROOT", "false".to_string()),
        ("TRACING_ENABLED", "true".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let rls = Rls::start_in(root, &b, &env).await;
    let rpu = |r: envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit)
    };
    assert_eq!(rpu(rls.call(one("sym", "k", "a")).await.unwrap()), Some(1));
    std::os::unix::fs::symlink(base.join("v2"), base.join("next")).unwrap();
    std::fs::rename(base.join("next"), base.join("current")).unwrap();
    rls.wait_log("reloaded the configuration").await;
    assert_eq!(rpu(rls.call(one("sym", "k", "a")).await.unwrap()), Some(2));
    // A setting of theirs that is set and not supported is reported at start.
    assert!(
        rls.log()
            .contains("unsupported setting: TRACING_ENABLED=true is ignored"),
        "{}",
        rls.log()
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_file_at_start_stops_the_start_with_file_and_line() {
    let b = Backend::start(Kind::Module);
    let root = temp_dir("rls");
    let app = root.join(SUBDIR).join("config");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(app.join("bad.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: k\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_slidingwindow-ratelimit"))
        .env_clear()
        .envs(b.env())
        .env("RUNTIME_ROOT", &root)
        .env("RUNTIME_SUBDIRECTORY", SUBDIR)
        .env("GRPC_PORT", free_port().to_string())
        .env("PORT", free_port().to_string())
        .env("DEBUG_PORT", free_port().to_string())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("bad.yaml: descriptors: duplicate descriptor composite key 'k' at line 3"),
        "{err}"
    );
    // And a refused setting stops it too.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_slidingwindow-ratelimit"))
        .env_clear()
        .env("REDIS_TLS", "true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("REDIS_TLS=true is not supported"));
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_cache_answers_refusals_without_redis() {
    let y = "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(
        &b,
        &[("c.yaml", y)],
        &[("LOCAL_CACHE_SIZE_IN_BYTES", "1048576")],
    )
    .await;
    assert_eq!(codes(&rls, one("c", "k", "a"), 1).await, vec![OK]);
    assert_eq!(codes(&rls, one("c", "k", "a"), 1).await, vec![OVER]);
    let sent = b.calls();
    assert_eq!(codes(&rls, one("c", "k", "a"), 10).await, vec![OVER; 10]);
    assert_eq!(b.calls(), sent, "the cached refusals reach no Redis");
    let m = rls.metrics().await;
    assert!(
        m.contains("slidingwindow_deny_cache_hits_total 10\n"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_limit_and_over_limit_counters() {
    let y = "domain: nl\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("nl.yaml", y)], &[("NEAR_LIMIT_RATIO", "0.5")]).await;
    codes(&rls, one("nl", "k", "a"), 12).await;
    let m = rls.metrics().await;
    // Hits 6..10 are past 5 (0.5 x 10): near; 11 and 12 over.
    assert!(
        m.contains("ratelimit_service_rate_limit_near_limit{domain=\"nl\",key1=\"k\"} 5\n"),
        "{m}"
    );
    assert!(
        m.contains("ratelimit_service_rate_limit_over_limit{domain=\"nl\",key1=\"k\"} 2\n"),
        "{m}"
    );
    assert!(
        m.contains("ratelimit_service_rate_limit_within_limit{domain=\"nl\",key1=\"k\"} 10\n"),
        "{m}"
    );
    assert!(
        m.contains("slidingwindow_redis_call_seconds_count 12\n"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_key_prefix_names_the_redis_key() {
    let y = "domain: p\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("p.yaml", y)], &[("CACHE_KEY_PREFIX", "rl:")]).await;
    rls.call(request("p", vec![desc(&[("k", "v1")])]))
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut b.nodes[0].con())
        .unwrap();
    assert_eq!(keys, vec!["rl:p_k_v1_".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_limits_and_hits_over_the_limit_never_pass() {
    let y = "domain: z\ndescriptors:\n  - key: zero\n    rate_limit: {unit: minute, requests_per_unit: 0}\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";
    let b = Backend::start(Kind::Module);
    let rls = Rls::start(&b, &[("z.yaml", y)], &[]).await;
    assert_eq!(
        rls.call(one("z", "zero", "a")).await.unwrap().overall_code,
        OVER
    );
    let mut req = one("z", "k", "a");
    req.descriptors[0].hits_addend = Some(UInt64Value { value: u64::MAX });
    let r = rls.call(req.clone()).await.unwrap();
    assert_eq!(r.overall_code, OVER);
    assert_eq!(b.calls(), 0, "answered without Redis");
    // A huge give-back is clamped, not an error.
    req.descriptors[0].is_negative_hits = true;
    let r = rls.call(req).await.unwrap();
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 5));
    let mut req = one("z", "k", "a");
    req.hits_addend = u32::MAX;
    assert_eq!(rls.call(req).await.unwrap().overall_code, OVER);
    assert_eq!(
        rls.call(one("z", "k", "a")).await.unwrap().statuses[0].limit_remaining,
        4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_and_redis_auth() {
    // Their default REDIS_SOCKET_TYPE is unix; REDIS_AUTH is the password.
    let sock = temp_dir("sock").join("redis.sock");
    let b = Backend {
        kind: Kind::Module,
        nodes: vec![redis(true, &["--unixsocket", sock.to_str().unwrap()])],
    };
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("s3cret:x")
        .query(&mut b.nodes[0].con())
        .unwrap();
    let y = "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let sock_s = sock.display().to_string();
    let env = [
        ("REDIS_SOCKET_TYPE", "unix"),
        ("REDIS_URL", sock_s.as_str()),
        ("REDIS_TYPE", "single"),
        ("REDIS_AUTH", "default:s3cret:x"),
    ];
    let rls = Rls::start(&b, &[("x.yaml", y)], &env).await;
    assert_eq!(codes(&rls, one("x", "k", "a"), 2).await, vec![OK, OVER]);
    drop(rls);
    drop(b);
    let _ = std::fs::remove_dir_all(sock.parent().unwrap());
}
