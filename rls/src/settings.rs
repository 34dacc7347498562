//! The environment, under envoyproxy/ratelimit's names. A setting of theirs that is set
//! and that this service does not support is listed by [`Settings::unsupported`] (logged
//! at start); one whose absence would change the answers (TLS, Sentinel, memcache, xDS)
//! makes the start fail.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// How Redis is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisType {
    Single,
    Cluster,
}

/// What the service answers while Redis is unreachable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutageAnswer {
    /// A gRPC UNAVAILABLE error (HTTP 503 on /json): Envoy's `failure_mode_deny` decides.
    Error,
    /// OK for every descriptor.
    Ok,
}

#[derive(Clone, Debug)]
pub struct Settings {
    pub host: String,
    pub port: u16,
    pub grpc_host: String,
    pub grpc_port: u16,
    pub debug_host: String,
    pub debug_port: u16,
    pub log_level: log::LevelFilter,
    pub log_json: bool,
    pub runtime_root: PathBuf,
    pub runtime_subdirectory: String,
    pub runtime_appdirectory: String,
    pub runtime_ignore_dotfiles: bool,
    pub runtime_watch_root: bool,
    pub reload_interval: Duration,
    pub merge_domain_config: bool,
    pub redis_socket_type: String,
    pub redis_url: String,
    pub redis_type: RedisType,
    pub redis_auth: String,
    pub redis_pool_size: usize,
    pub redis_timeout: Duration,
    pub cache_key_prefix: String,
    pub local_cache_size_in_bytes: u64,
    pub near_limit_ratio: f32,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub headers_enabled: bool,
    pub header_limit: String,
    pub header_remaining: String,
    pub header_reset: String,
    pub use_prometheus: bool,
    pub prometheus_addr: String,
    pub prometheus_path: String,
    pub outage_answer: OutageAnswer,
    /// Their settings that are set and ignored here, each with the reason.
    pub unsupported: Vec<String>,
}

/// A Go duration (`10s`, `500ms`, `1m30s`, `1.5h`; a bare number is seconds).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Ok(n) = s.parse::<f64>() {
        return (n >= 0.0 && n.is_finite()).then(|| Duration::from_secs_f64(n));
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += n * scale;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_secs_f64(total))
}

fn truthy(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "yes" | "on" => Some(true),
        "0" | "f" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// envoyproxy/ratelimit settings this service ignores when set, with the reason.
const IGNORED: &[(&str, &str)] = &[
    ("GRPC_MAX_CONNECTION_AGE", "connections are not aged out"),
    (
        "GRPC_MAX_CONNECTION_AGE_GRACE",
        "connections are not aged out",
    ),
    ("GRPC_CLIENT_TLS_CACERT", "no gRPC TLS"),
    ("GRPC_CLIENT_TLS_SAN", "no gRPC TLS"),
    (
        "USE_DOG_STATSD",
        "no statsd: Prometheus only (USE_PROMETHEUS)",
    ),
    ("USE_DOG_STATSD_MOGRIFIERS", "no statsd"),
    ("STATSD_HOST", "no statsd: Prometheus only (USE_PROMETHEUS)"),
    ("STATSD_PORT", "no statsd: Prometheus only (USE_PROMETHEUS)"),
    ("EXTRA_TAGS", "no statsd tags"),
    (
        "STATS_FLUSH_INTERVAL",
        "Prometheus is scraped, nothing is flushed",
    ),
    (
        "DISABLE_STATS",
        "counters are always kept (served only with USE_PROMETHEUS)",
    ),
    (
        "PROMETHEUS_MAPPER_YAML",
        "the metric names are fixed (README)",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "latency is in seconds",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "a sliding window's key expires when its window ends; no jitter",
    ),
    (
        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
        "always on: a refused request is never counted",
    ),
    (
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
        "healthy once started",
    ),
    (
        "REDIS_PIPELINE_WINDOW",
        "calls are pipelined on the multiplexed connection as they come",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "calls are pipelined on the multiplexed connection as they come",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "one multiplexed connection per node",
    ),
    (
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        "the client's circuit probes Redis during an outage",
    ),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "multiplexed connections never run empty",
    ),
    (
        "REDIS_STARTUP_INITIAL_INTERVAL",
        "the first connection is retried every second",
    ),
    (
        "REDIS_STARTUP_MAX_INTERVAL",
        "the first connection is retried every second",
    ),
    (
        "REDIS_STARTUP_MAX_ELAPSED_TIME",
        "the first connection is retried every second",
    ),
    ("RESPONSE_DYNAMIC_METADATA", "no dynamic metadata is sent"),
    ("TRACING_ENABLED", "no tracing"),
    ("TRACING_SERVICE_NAME", "no tracing"),
    ("TRACING_SERVICE_NAMESPACE", "no tracing"),
    ("TRACING_SERVICE_INSTANCE_ID", "no tracing"),
    ("TRACING_EXPORTER_PROTOCOL", "no tracing"),
    ("TRACING_SAMPLING_RATE", "no tracing"),
    ("REDIS_TIMEOUT_PERSECOND", "no per-second Redis"),
    ("REDIS_PERSECOND_TIMEOUT", "no per-second Redis"),
    ("REDIS_PERSECOND_SOCKET_TYPE", "no per-second Redis"),
    ("REDIS_PERSECOND_TYPE", "no per-second Redis"),
    ("REDIS_PERSECOND_URL", "no per-second Redis"),
    ("REDIS_PERSECOND_POOL_SIZE", "no per-second Redis"),
    ("REDIS_PERSECOND_AUTH", "no per-second Redis"),
    ("REDIS_PERSECOND_TLS", "no per-second Redis"),
    ("REDIS_PERSECOND_SENTINEL_AUTH", "no per-second Redis"),
    ("REDIS_PERSECOND_PIPELINE_WINDOW", "no per-second Redis"),
    ("REDIS_PERSECOND_PIPELINE_LIMIT", "no per-second Redis"),
    (
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        "no per-second Redis",
    ),
    (
        "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
        "no per-second Redis",
    ),
    ("MEMCACHE_MAX_IDLE_CONNS", "no memcache backend"),
    ("MEMCACHE_SRV_REFRESH", "no memcache backend"),
];

/// Settings of theirs that would change what is limited or how Redis is reached: set,
/// they stop the start (value, why).
const REFUSED: &[(&str, &str)] = &[
    ("GRPC_UDS", "no gRPC on a Unix socket"),
    (
        "GRPC_SERVER_USE_TLS",
        "no gRPC TLS: terminate TLS in front (a sidecar)",
    ),
    ("GRPC_SERVER_TLS_CERT", "no gRPC TLS"),
    ("GRPC_SERVER_TLS_KEY", "no gRPC TLS"),
    (
        "REDIS_TLS",
        "no TLS to Redis in this build (redis-rs without its TLS feature)",
    ),
    ("REDIS_TLS_CLIENT_CERT", "no TLS to Redis"),
    ("REDIS_TLS_CLIENT_KEY", "no TLS to Redis"),
    ("REDIS_TLS_CACERT", "no TLS to Redis"),
    ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "no TLS to Redis"),
    ("REDIS_PERSECOND", "one Redis for every window"),
    ("REDIS_SENTINEL_AUTH", "no Sentinel"),
    ("MEMCACHE_HOST_PORT", "Redis only"),
    ("MEMCACHE_SRV", "Redis only"),
    ("MEMCACHE_TLS", "Redis only"),
    (
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
        "needs an xDS config source",
    ),
];

impl Settings {
    /// The process's environment.
    pub fn from_env() -> Result<Settings, String> {
        Settings::from_map(&std::env::vars().collect())
    }

    /// The settings of `env`; `Err` lists every refused or malformed setting.
    pub fn from_map(env: &HashMap<String, String>) -> Result<Settings, String> {
        let mut errors = Vec::new();
        let mut unsupported = Vec::new();
        let get = |k: &str| env.get(k).map(String::as_str);
        let s = |k: &str, d: &str| get(k).unwrap_or(d).to_string();
        let flag = |k: &str, d: bool, errors: &mut Vec<String>| match get(k) {
            None => d,
            Some(v) => truthy(v).unwrap_or_else(|| {
                errors.push(format!("{k}={v}: not a boolean"));
                d
            }),
        };
        let num = |k: &str, d: u64, errors: &mut Vec<String>| match get(k) {
            None => d,
            Some(v) => v.trim().parse().unwrap_or_else(|_| {
                errors.push(format!("{k}={v}: not a number"));
                d
            }),
        };
        let port = |k: &str, d: u16, errors: &mut Vec<String>| match get(k) {
            None => d,
            Some(v) => v.trim().parse().unwrap_or_else(|_| {
                errors.push(format!("{k}={v}: not a port"));
                d
            }),
        };
        for (k, why) in IGNORED {
            if let Some(v) = get(k) {
                unsupported.push(format!("{k}={v} is ignored: {why}"));
            }
        }
        for (k, why) in REFUSED {
            if let Some(v) = get(k) {
                let off = truthy(v) == Some(false) || v.is_empty();
                if !off {
                    errors.push(format!("{k}={v} is not supported: {why}"));
                }
            }
        }
        if get("USE_STATSD").and_then(truthy) == Some(true) {
            unsupported.push(
                "USE_STATSD=true is ignored: no statsd, Prometheus only (USE_PROMETHEUS)".into(),
            );
        }
        match get("CONFIG_TYPE").map(str::to_ascii_uppercase) {
            None => {}
            Some(t) if t == "FILE" => {}
            Some(t) => errors.push(format!("CONFIG_TYPE={t} is not supported: FILE only")),
        }
        for (k, _) in env
            .iter()
            .filter(|(k, _)| k.starts_with("CONFIG_GRPC_XDS_") || k.starts_with("XDS_CLIENT_"))
        {
            unsupported.push(format!(
                "{k} is ignored: no xDS config source (CONFIG_TYPE=FILE)"
            ));
        }
        match get("BACKEND_TYPE").map(str::to_ascii_lowercase) {
            None => {}
            Some(t) if t == "redis" => {}
            Some(t) => errors.push(format!("BACKEND_TYPE={t} is not supported: redis only")),
        }
        let redis_type = match get("REDIS_TYPE").map(str::to_ascii_uppercase).as_deref() {
            None | Some("SINGLE") => RedisType::Single,
            Some("CLUSTER") => RedisType::Cluster,
            Some(t) => {
                errors.push(format!(
                    "REDIS_TYPE={t} is not supported: SINGLE or CLUSTER"
                ));
                RedisType::Single
            }
        };
        let redis_socket_type = s("REDIS_SOCKET_TYPE", "unix").to_ascii_lowercase();
        if redis_socket_type != "unix" && redis_socket_type != "tcp" {
            errors.push(format!(
                "REDIS_SOCKET_TYPE={redis_socket_type}: unix or tcp"
            ));
        }
        let redis_timeout = match get("REDIS_TIMEOUT") {
            None => Duration::from_millis(500),
            Some(v) => parse_duration(v)
                .filter(|d| !d.is_zero())
                .unwrap_or_else(|| {
                    errors.push(format!("REDIS_TIMEOUT={v}: not a duration"));
                    Duration::from_millis(500)
                }),
        };
        let reload_interval = match get("RUNTIME_RELOAD_INTERVAL") {
            None => Duration::from_secs(1),
            Some(v) => parse_duration(v)
                .filter(|d| !d.is_zero())
                .unwrap_or_else(|| {
                    errors.push(format!("RUNTIME_RELOAD_INTERVAL={v}: not a duration"));
                    Duration::from_secs(1)
                }),
        };
        let log_level = match s("LOG_LEVEL", "WARN").to_ascii_uppercase().as_str() {
            "TRACE" => log::LevelFilter::Trace,
            "DEBUG" => log::LevelFilter::Debug,
            "INFO" => log::LevelFilter::Info,
            "WARN" | "WARNING" => log::LevelFilter::Warn,
            "ERROR" | "FATAL" | "PANIC" => log::LevelFilter::Error,
            other => {
                errors.push(format!("LOG_LEVEL={other}: debug, info, warn or error"));
                log::LevelFilter::Warn
            }
        };
        let log_json = match s("LOG_FORMAT", "text").to_ascii_lowercase().as_str() {
            "json" => true,
            "text" => false,
            other => {
                errors.push(format!("LOG_FORMAT={other}: text or json"));
                false
            }
        };
        let outage_answer = match s("OUTAGE_ANSWER", "error").to_ascii_lowercase().as_str() {
            "ok" => OutageAnswer::Ok,
            "error" => OutageAnswer::Error,
            other => {
                errors.push(format!("OUTAGE_ANSWER={other}: error or ok"));
                OutageAnswer::Error
            }
        };
        let near_limit_ratio = match get("NEAR_LIMIT_RATIO") {
            None => 0.8,
            Some(v) => v.trim().parse::<f32>().unwrap_or_else(|_| {
                errors.push(format!("NEAR_LIMIT_RATIO={v}: not a number"));
                0.8
            }),
        };
        let settings = Settings {
            host: s("HOST", "0.0.0.0"),
            port: port("PORT", 8080, &mut errors),
            grpc_host: s("GRPC_HOST", "0.0.0.0"),
            grpc_port: port("GRPC_PORT", 8081, &mut errors),
            debug_host: s("DEBUG_HOST", "0.0.0.0"),
            debug_port: port("DEBUG_PORT", 6070, &mut errors),
            log_level,
            log_json,
            runtime_root: PathBuf::from(s("RUNTIME_ROOT", "/srv/runtime_data/current")),
            runtime_subdirectory: s("RUNTIME_SUBDIRECTORY", ""),
            runtime_appdirectory: s("RUNTIME_APPDIRECTORY", "config"),
            runtime_ignore_dotfiles: flag("RUNTIME_IGNOREDOTFILES", false, &mut errors),
            runtime_watch_root: flag("RUNTIME_WATCH_ROOT", true, &mut errors),
            reload_interval,
            merge_domain_config: flag("MERGE_DOMAIN_CONFIG", false, &mut errors),
            redis_socket_type,
            redis_url: s("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"),
            redis_type,
            redis_auth: s("REDIS_AUTH", ""),
            redis_pool_size: num("REDIS_POOL_SIZE", 10, &mut errors).clamp(1, 256) as usize,
            redis_timeout,
            cache_key_prefix: s("CACHE_KEY_PREFIX", ""),
            local_cache_size_in_bytes: num("LOCAL_CACHE_SIZE_IN_BYTES", 0, &mut errors),
            near_limit_ratio,
            shadow_mode: flag("SHADOW_MODE", false, &mut errors),
            quota_mode: flag("QUOTA_MODE", false, &mut errors),
            headers_enabled: flag("LIMIT_RESPONSE_HEADERS_ENABLED", false, &mut errors),
            header_limit: s("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
            header_remaining: s("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
            header_reset: s("LIMIT_RESET_HEADER", "RateLimit-Reset"),
            use_prometheus: flag("USE_PROMETHEUS", false, &mut errors),
            prometheus_addr: s("PROMETHEUS_ADDR", ":9090"),
            prometheus_path: s("PROMETHEUS_PATH", "/metrics"),
            outage_answer,
            unsupported,
        };
        if errors.is_empty() {
            Ok(settings)
        } else {
            Err(errors.join("; "))
        }
    }

    /// The directory the configuration files are read from:
    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`.
    pub fn config_dir(&self) -> PathBuf {
        self.runtime_root
            .join(&self.runtime_subdirectory)
            .join(&self.runtime_appdirectory)
    }

    /// The Redis URLs (one, or a cluster's seeds), with REDIS_AUTH in them.
    pub fn redis_urls(&self) -> Vec<String> {
        let auth = if self.redis_auth.is_empty() {
            String::new()
        } else {
            match self.redis_auth.split_once(':') {
                Some((u, p)) => format!("{}:{}@", encode(u), encode(p)),
                None => format!(":{}@", encode(&self.redis_auth)),
            }
        };
        self.redis_url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(|u| {
                if u.contains("://") {
                    u.to_string()
                } else if self.redis_socket_type == "unix" {
                    let q = match self.redis_auth.split_once(':') {
                        _ if self.redis_auth.is_empty() => String::new(),
                        Some((u, p)) => format!("?user={}&pass={}", encode(u), encode(p)),
                        None => format!("?pass={}", encode(&self.redis_auth)),
                    };
                    format!("unix://{u}{q}")
                } else {
                    format!("redis://{auth}{u}/")
                }
            })
            .collect()
    }

    /// A Prometheus listen address (`:9090` is every interface).
    pub fn prometheus_bind(&self) -> String {
        if self.prometheus_addr.starts_with(':') {
            format!("0.0.0.0{}", self.prometheus_addr)
        } else {
            self.prometheus_addr.clone()
        }
    }
}

/// Percent-encodes everything but unreserved characters (a password in a URL).
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn their_defaults() {
        let s = Settings::from_map(&env(&[])).unwrap();
        assert_eq!((s.port, s.grpc_port, s.debug_port), (8080, 8081, 6070));
        assert_eq!(
            s.config_dir(),
            PathBuf::from("/srv/runtime_data/current/config")
        );
        assert_eq!(s.prometheus_bind(), "0.0.0.0:9090");
        assert_eq!(s.prometheus_path, "/metrics");
        assert_eq!(s.header_limit, "RateLimit-Limit");
        assert_eq!(s.outage_answer, OutageAnswer::Error);
        assert!(s.unsupported.is_empty());
    }

    #[test]
    fn runtime_layout_and_redis() {
        let s = Settings::from_map(&env(&[
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_APPDIRECTORY", "app"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "localhost:6379"),
            ("REDIS_AUTH", "user:p@ss"),
            ("REDIS_TIMEOUT", "250ms"),
        ]))
        .unwrap();
        assert_eq!(s.config_dir(), PathBuf::from("/data/ratelimit/app"));
        assert_eq!(s.redis_urls(), vec!["redis://user:p%40ss@localhost:6379/"]);
        let u = Settings::from_map(&env(&[("REDIS_URL", "/run/r.sock"), ("REDIS_AUTH", "pw")]))
            .unwrap();
        assert_eq!(u.redis_urls(), vec!["unix:///run/r.sock?pass=pw"]);
        assert_eq!(s.redis_timeout, Duration::from_millis(250));
        let c = Settings::from_map(&env(&[
            ("REDIS_TYPE", "cluster"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "a:1,b:2"),
        ]))
        .unwrap();
        assert_eq!(c.redis_type, RedisType::Cluster);
        assert_eq!(c.redis_urls(), vec!["redis://a:1/", "redis://b:2/"]);
    }

    #[test]
    fn unsupported_settings_are_reported_or_refused() {
        let s = Settings::from_map(&env(&[("TRACING_ENABLED", "true"), ("USE_STATSD", "true")]))
            .unwrap();
        assert_eq!(s.unsupported.len(), 2, "{:?}", s.unsupported);
        assert!(s.unsupported[0].starts_with("TRACING_ENABLED=true is ignored"));
        let e = Settings::from_map(&env(&[("REDIS_TLS", "true"), ("REDIS_TYPE", "sentinel")]))
            .unwrap_err();
        assert!(e.contains("REDIS_TLS=true is not supported"), "{e}");
        assert!(e.contains("REDIS_TYPE=SENTINEL is not supported"), "{e}");
        assert!(Settings::from_map(&env(&[("REDIS_TLS", "false")])).is_ok());
        assert!(Settings::from_map(&env(&[("PORT", "http")]))
            .unwrap_err()
            .contains("PORT=http"));
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(parse_duration("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("2 parsecs"), None);
        assert_eq!(parse_duration("s"), None);
    }
}
