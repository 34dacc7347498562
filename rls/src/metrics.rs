//! Prometheus text: envoyproxy/ratelimit's per-descriptor counters under the names its
//! default statsd mapping gives them (`ratelimit_service_rate_limit_total_hits{domain,
//! key1, key2}`, ...), plus Redis call latency, deny-cache hits and the outage state.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// One descriptor key's counters.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Counters {
    pub total_hits: u64,
    pub over_limit: u64,
    pub near_limit: u64,
    pub within_limit: u64,
    pub shadow_mode: u64,
}

/// Latency buckets, in seconds.
const BUCKETS: [f64; 10] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

#[derive(Default)]
pub struct Metrics {
    per_key: Mutex<BTreeMap<String, Counters>>,
    latency: Mutex<([u64; BUCKETS.len()], u64, f64)>,
    pub config_load_success: AtomicU64,
    pub config_load_error: AtomicU64,
    pub global_shadow_mode: AtomicU64,
    pub outage_answers: AtomicU64,
}

impl Metrics {
    /// Adds to the counters of `metric_key` (`domain.key_value.key`).
    pub fn add(&self, metric_key: &str, c: Counters) {
        let mut m = match self.per_key.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let e = m.entry(metric_key.to_string()).or_default();
        e.total_hits = e.total_hits.saturating_add(c.total_hits);
        e.over_limit = e.over_limit.saturating_add(c.over_limit);
        e.near_limit = e.near_limit.saturating_add(c.near_limit);
        e.within_limit = e.within_limit.saturating_add(c.within_limit);
        e.shadow_mode = e.shadow_mode.saturating_add(c.shadow_mode);
    }

    /// The counters of one key (tests).
    pub fn get(&self, metric_key: &str) -> Counters {
        let m = match self.per_key.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        m.get(metric_key).copied().unwrap_or_default()
    }

    /// One Redis round trip (one ShouldRateLimit's pipelined calls).
    pub fn redis_call(&self, took: Duration) {
        let s = took.as_secs_f64();
        let mut l = match self.latency.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        for (i, b) in BUCKETS.iter().enumerate() {
            if s <= *b {
                l.0[i] += 1;
            }
        }
        l.1 += 1;
        l.2 += s;
    }

    pub fn config_load(&self, ok: bool) {
        if ok {
            self.config_load_success.fetch_add(1, Ordering::Relaxed);
        } else {
            self.config_load_error.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The Prometheus text exposition; `deny_cache_hits` and `outage` from the limiter.
    pub fn render(
        &self,
        deny_cache_hits: Option<u64>,
        outage: bool,
        redis_calls_sent: u64,
    ) -> String {
        let mut out = String::new();
        let per_key = match self.per_key.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let names = [
            ("total_hits", "hits counted against a descriptor's limit"),
            ("over_limit", "hits over the limit"),
            ("near_limit", "hits within the limit past NEAR_LIMIT_RATIO"),
            ("within_limit", "hits within the limit"),
            (
                "shadow_mode",
                "hits over the limit answered OK by shadow_mode",
            ),
        ];
        for (i, (name, help)) in names.iter().enumerate() {
            let _ = writeln!(out, "# HELP ratelimit_service_rate_limit_{name} {help}");
            let _ = writeln!(out, "# TYPE ratelimit_service_rate_limit_{name} counter");
            for (key, c) in &per_key {
                let v = [
                    c.total_hits,
                    c.over_limit,
                    c.near_limit,
                    c.within_limit,
                    c.shadow_mode,
                ][i];
                let _ = writeln!(
                    out,
                    "ratelimit_service_rate_limit_{name}{{{}}} {v}",
                    labels(key)
                );
            }
        }
        let (buckets, count, sum) = match self.latency.lock() {
            Ok(g) => *g,
            Err(p) => *p.into_inner(),
        };
        out.push_str(
            "# HELP slidingwindow_redis_call_seconds one request's pipelined Redis calls\n",
        );
        out.push_str("# TYPE slidingwindow_redis_call_seconds histogram\n");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "slidingwindow_redis_call_seconds_bucket{{le=\"{b}\"}} {}",
                buckets[i]
            );
        }
        let _ = writeln!(
            out,
            "slidingwindow_redis_call_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(out, "slidingwindow_redis_call_seconds_sum {sum}");
        let _ = writeln!(out, "slidingwindow_redis_call_seconds_count {count}");
        let gauge = |out: &mut String, name: &str, kind: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        };
        gauge(
            &mut out,
            "slidingwindow_redis_commands_sent_total",
            "counter",
            "commands sent to Redis",
            redis_calls_sent,
        );
        if let Some(h) = deny_cache_hits {
            gauge(
                &mut out,
                "slidingwindow_deny_cache_hits_total",
                "counter",
                "refusals answered by the local deny cache",
                h,
            );
        }
        gauge(
            &mut out,
            "slidingwindow_redis_outage",
            "gauge",
            "1 while Redis is unreachable",
            u64::from(outage),
        );
        gauge(
            &mut out,
            "slidingwindow_outage_answers_total",
            "counter",
            "requests answered without Redis",
            self.outage_answers.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "ratelimit_service_config_load_success",
            "counter",
            "configurations loaded",
            self.config_load_success.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "ratelimit_service_config_load_error",
            "counter",
            "configurations refused",
            self.config_load_error.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "ratelimit_service_global_shadow_mode",
            "counter",
            "requests answered OK by SHADOW_MODE",
            self.global_shadow_mode.load(Ordering::Relaxed),
        );
        out
    }
}

/// `domain.k1.k2.k3` -> `domain="domain",key1="k1",key2="k2"` (their mapping's labels).
fn labels(key: &str) -> String {
    let mut parts = key.splitn(4, '.');
    let mut out = format!("domain=\"{}\"", escape(parts.next().unwrap_or("")));
    for (i, p) in parts.take(2).enumerate() {
        let _ = write!(out, ",key{}=\"{}\"", i + 1, escape(p));
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_under_their_names() {
        let m = Metrics::default();
        m.add(
            "d.k_v.inner",
            Counters {
                total_hits: 3,
                over_limit: 1,
                within_limit: 2,
                ..Default::default()
            },
        );
        m.add(
            "d.k_v.inner",
            Counters {
                total_hits: 1,
                within_limit: 1,
                ..Default::default()
            },
        );
        assert_eq!(m.get("d.k_v.inner").total_hits, 4);
        m.redis_call(Duration::from_micros(700));
        let text = m.render(Some(5), true, 9);
        assert!(text.contains("ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"k_v\",key2=\"inner\"} 4\n"), "{text}");
        assert!(text.contains("ratelimit_service_rate_limit_within_limit{domain=\"d\",key1=\"k_v\",key2=\"inner\"} 3\n"));
        assert!(text.contains("slidingwindow_redis_call_seconds_bucket{le=\"0.001\"} 1\n"));
        assert!(text.contains("slidingwindow_redis_call_seconds_bucket{le=\"0.0005\"} 0\n"));
        assert!(text.contains("slidingwindow_deny_cache_hits_total 5\n"));
        assert!(text.contains("slidingwindow_redis_outage 1\n"));
    }
}
