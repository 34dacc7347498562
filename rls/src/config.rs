//! envoyproxy/ratelimit's YAML configuration, read unchanged, and the lookup of a
//! request's descriptor in it (the most specific match wins, as there).
//!
//! Every problem in a file is an error naming the file, and the line where serde_yaml
//! places it; the caller keeps the last good configuration.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

/// A window unit of envoyproxy/ratelimit (`second` ... `year`, case-insensitive there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    /// The unit's length in milliseconds (a month is 30 days and a year 365, as there).
    pub fn millis(self) -> u64 {
        let s: u64 = match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        };
        s * 1000
    }

    /// The proto enum value (`envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`,
    /// the same numbers as `envoy.type.v3.RateLimitUnit`).
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit of a proto enum value; `None` for UNKNOWN and anything else.
    pub fn from_proto(v: i32) -> Option<Unit> {
        Some(match v {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }

    /// The unit's name as the proto's JSON spells it.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// A unit from its name, case-insensitive.
    pub fn parse(s: &str) -> Option<Unit> {
        Some(match s.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }
}

/// A string from any YAML scalar: `value: 1` is the string "1", as Go's yaml.v2 reads it.
fn scalar<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(V)
        }
    }
    d.deserialize_any(V)
}

/// A descriptor's `key`: present and not empty.
fn key<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match scalar(d)? {
        Some(k) if !k.is_empty() => Ok(k),
        _ => Err(de::Error::custom("descriptor has empty key")),
    }
}

fn unit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Unit>, D::Error> {
    match scalar(d)? {
        None => Ok(None),
        Some(s) => Unit::parse(&s)
            .map(Some)
            .ok_or_else(|| de::Error::custom(format!("invalid rate limit unit '{s}'"))),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlReplaces {
    #[serde(default, deserialize_with = "scalar")]
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRateLimitRaw {
    #[serde(default)]
    requests_per_unit: u32,
    #[serde(default, deserialize_with = "unit")]
    unit: Option<Unit>,
    #[serde(default)]
    unlimited: bool,
    #[serde(default, deserialize_with = "scalar")]
    name: Option<String>,
    #[serde(default)]
    replaces: Vec<YamlReplaces>,
}

/// `rate_limit:` checked as a whole (serde_yaml places these errors at its end).
#[derive(Deserialize)]
#[serde(try_from = "YamlRateLimitRaw")]
struct YamlRateLimit {
    requests_per_unit: u32,
    unit: Option<Unit>,
    unlimited: bool,
    name: Option<String>,
    replaces: Vec<String>,
}

impl TryFrom<YamlRateLimitRaw> for YamlRateLimit {
    type Error = String;
    fn try_from(r: YamlRateLimitRaw) -> Result<Self, String> {
        if r.unlimited && r.unit.is_some() {
            return Err("should not specify rate limit unit when unlimited".into());
        }
        if !r.unlimited && r.unit.is_none() {
            return Err("invalid rate limit unit ''".into());
        }
        let name = r.name.filter(|n| !n.is_empty());
        let mut replaces = Vec::new();
        for e in r.replaces {
            match e.name {
                Some(n) if !n.is_empty() => {
                    if name.as_deref() == Some(n.as_str()) {
                        return Err("replaces should not contain name of same descriptor".into());
                    }
                    replaces.push(n);
                }
                _ => return Err("should not have an empty replaces entry".into()),
            }
        }
        Ok(YamlRateLimit {
            requests_per_unit: r.requests_per_unit,
            unit: r.unit,
            unlimited: r.unlimited,
            name,
            replaces,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlDescriptor {
    #[serde(deserialize_with = "key")]
    key: String,
    #[serde(default, deserialize_with = "scalar")]
    value: Option<String>,
    #[serde(default)]
    rate_limit: Option<YamlRateLimit>,
    #[serde(default)]
    descriptors: Descriptors,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    quota_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    value_to_metric: bool,
    #[serde(default)]
    share_threshold: bool,
    /// Accepted and kept out of the decision: envoyproxy/ratelimit returns it only in
    /// dynamic metadata (RESPONSE_DYNAMIC_METADATA), which this service does not send.
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<serde_yaml::Value>,
}

impl YamlDescriptor {
    fn composite(&self) -> String {
        match self.value.as_deref() {
            Some(v) if !v.is_empty() => format!("{}_{}", self.key, v),
            _ => self.key.clone(),
        }
    }
}

/// A list of descriptors whose composite keys (`key` or `key_value`) are distinct; a
/// duplicate is refused where it stands.
#[derive(Default)]
struct Descriptors(Vec<YamlDescriptor>);

impl<'de> Deserialize<'de> for Descriptors {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Descriptors;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of descriptors")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Descriptors, E> {
                Ok(Descriptors::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Descriptors, A::Error> {
                let mut out: Vec<YamlDescriptor> = Vec::new();
                while let Some(d) = seq.next_element::<YamlDescriptor>()? {
                    let k = d.composite();
                    if out.iter().any(|o| o.composite() == k) {
                        return Err(de::Error::custom(format!(
                            "duplicate descriptor composite key '{k}'"
                        )));
                    }
                    if d.share_threshold && !k.contains('*') {
                        return Err(de::Error::custom(format!(
                            "share_threshold can only be used with wildcard values (containing '*'), but found key '{k}'"
                        )));
                    }
                    out.push(d);
                }
                Ok(Descriptors(out))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRoot {
    #[serde(default, deserialize_with = "scalar")]
    domain: Option<String>,
    #[serde(default)]
    descriptors: Descriptors,
}

/// One configured limit, as a lookup returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// The configuration path (`domain.key_value.key`): the metric key.
    pub full_key: String,
    pub requests_per_unit: u32,
    /// `None` only when unlimited.
    pub unit: Option<Unit>,
    pub unlimited: bool,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub name: Option<String>,
    pub replaces: Vec<String>,
    pub detailed_metric: bool,
}

#[derive(Default, Debug)]
struct Node {
    children: HashMap<String, Node>,
    /// This level's wildcard composite keys, in file order, split on `*`.
    wildcards: Vec<(String, Vec<String>)>,
    limit: Option<Arc<RateLimit>>,
    value_to_metric: bool,
    share_threshold: bool,
}

/// A loaded configuration: every domain of every file.
#[derive(Default, Debug)]
pub struct Config {
    domains: HashMap<String, Node>,
    /// The files it was loaded from, for the log and /rlconfig.
    pub files: Vec<String>,
}

/// A configuration error: `file: reason at line L column C`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Whether `value` matches `parts` (a pattern split on `*`, each `*` any run of
/// characters, possibly empty).
fn wildcard_match(parts: &[String], value: &str) -> bool {
    if parts.len() == 1 {
        return parts[0] == value;
    }
    let first = &parts[0];
    let last = &parts[parts.len() - 1];
    if value.len() < first.len() + last.len()
        || !value.starts_with(first.as_str())
        || !value.ends_with(last.as_str())
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p.as_str()) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    true
}

impl Node {
    fn load(&mut self, parent: &str, descriptors: Descriptors) -> Result<(), String> {
        for d in descriptors.0 {
            let composite = d.composite();
            let path = format!("{parent}{composite}");
            if self.children.contains_key(&composite) {
                return Err(format!("duplicate descriptor composite key '{path}'"));
            }
            let limit = d.rate_limit.map(|r| {
                Arc::new(RateLimit {
                    full_key: path.clone(),
                    requests_per_unit: r.requests_per_unit,
                    unit: r.unit,
                    unlimited: r.unlimited,
                    shadow_mode: d.shadow_mode,
                    quota_mode: d.quota_mode,
                    name: r.name,
                    replaces: r.replaces,
                    detailed_metric: d.detailed_metric,
                })
            });
            if composite.contains('*') {
                self.wildcards.push((
                    composite.clone(),
                    composite.split('*').map(str::to_string).collect(),
                ));
            }
            let mut node = Node {
                limit,
                value_to_metric: d.value_to_metric,
                share_threshold: d.share_threshold,
                ..Node::default()
            };
            node.load(&format!("{path}."), d.descriptors)?;
            self.children.insert(composite, node);
        }
        Ok(())
    }
}

/// One entry of a request's descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: String,
}

impl Entry {
    pub fn new(key: &str, value: &str) -> Entry {
        Entry {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// What a descriptor matched: its limit, its metric key and its Redis key (without the
/// prefix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matched {
    pub limit: Arc<RateLimit>,
    /// The key the counters are reported under (detailed_metric, value_to_metric and
    /// share_threshold applied as there).
    pub metric_key: String,
    /// `domain_key_value_key_value_`; a share_threshold entry contributes its pattern, so
    /// every value it matches shares one count.
    pub redis_key: String,
}

/// The Redis key of a descriptor: `domain_k1_v1_k2_v2_` (envoyproxy/ratelimit's, without
/// the window's start: one key holds the sliding window).
pub fn redis_key(domain: &str, entries: &[Entry], share: &[Option<String>]) -> String {
    let mut k = String::with_capacity(domain.len() + 16 * entries.len());
    k.push_str(domain);
    k.push('_');
    for (i, e) in entries.iter().enumerate() {
        k.push_str(&e.key);
        k.push('_');
        match share.get(i).and_then(|s| s.as_deref()) {
            Some(p) => k.push_str(p),
            None => k.push_str(&e.value),
        }
        k.push('_');
    }
    k
}

/// `domain.k1_v1.k2` (an empty value leaves only the key): the metric key of an override.
pub fn descriptor_path(domain: &str, entries: &[Entry]) -> String {
    let mut k = domain.to_string();
    for e in entries {
        k.push('.');
        k.push_str(&e.key);
        if !e.value.is_empty() {
            k.push('_');
            k.push_str(&e.value);
        }
    }
    k
}

impl Config {
    /// Loads `files` (name, contents) in order. `merge`: MERGE_DOMAIN_CONFIG (a domain in
    /// several files is merged instead of refused).
    pub fn load(files: &[(String, String)], merge: bool) -> Result<Config, ConfigError> {
        let mut cfg = Config::default();
        for (name, text) in files {
            let root: YamlRoot = match serde_yaml::from_str(text) {
                Ok(r) => r,
                // An empty file is an empty document: refused as there (no domain).
                Err(e) if text.trim().is_empty() => {
                    let _ = e;
                    return Err(ConfigError(format!(
                        "{name}: config file cannot have empty domain"
                    )));
                }
                Err(e) => return Err(ConfigError(format!("{name}: {e}"))),
            };
            let domain = match root.domain {
                Some(d) if !d.is_empty() => d,
                _ => {
                    return Err(ConfigError(format!(
                        "{name}: config file cannot have empty domain"
                    )))
                }
            };
            if cfg.domains.contains_key(&domain) && !merge {
                return Err(ConfigError(format!(
                    "{name}: duplicate domain '{domain}' in config file"
                )));
            }
            let node = cfg.domains.entry(domain.clone()).or_default();
            node.load(&format!("{domain}."), root.descriptors)
                .map_err(|e| ConfigError(format!("{name}: {e}")))?;
            cfg.files.push(name.clone());
        }
        Ok(cfg)
    }

    /// Whether no domain is configured.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// The configured domains, sorted.
    pub fn domains(&self) -> Vec<&str> {
        let mut d: Vec<&str> = self.domains.keys().map(String::as_str).collect();
        d.sort_unstable();
        d
    }

    /// The limit a descriptor matches, looked up as envoyproxy/ratelimit does: at each
    /// level `key_value` exactly, else the level's first wildcard that matches, else
    /// `key` alone; the limit is the one at the level of the descriptor's last entry.
    pub fn lookup(&self, domain: &str, entries: &[Entry]) -> Option<Matched> {
        let mut level = self.domains.get(domain)?;
        let mut found: Option<Arc<RateLimit>> = None;
        let mut share: Vec<Option<String>> = vec![None; entries.len()];
        let mut detailed = domain.to_string();
        let mut v2m = domain.to_string();
        for (i, e) in entries.iter().enumerate() {
            let kv = format!("{}_{}", e.key, e.value);
            detailed.push('.');
            detailed.push_str(&kv);
            let mut next = level.children.get(&kv);
            let mut via_value = next.is_some();
            let mut via_wildcard: Option<&str> = None;
            if next.is_none() {
                if let Some((k, _)) = level.wildcards.iter().find(|(_, p)| wildcard_match(p, &kv)) {
                    next = level.children.get(k);
                    via_wildcard = Some(k.as_str());
                    via_value = next.is_some();
                }
            }
            if next.is_none() {
                next = level.children.get(&e.key);
                via_value = false;
            }
            v2m.push('.');
            v2m.push_str(&e.key);
            let Some(node) = next else {
                break;
            };
            let pattern = via_wildcard.map(|w| {
                w.strip_prefix(&format!("{}_", e.key))
                    .unwrap_or(w)
                    .to_string()
            });
            if node.share_threshold {
                share[i] = pattern.clone();
            }
            let shown = match (&pattern, via_value) {
                (Some(p), _) if node.share_threshold => Some(p.clone()),
                (Some(_), _) if node.value_to_metric => Some(e.value.clone()),
                (Some(p), _) => Some(p.clone()),
                (None, true) => Some(e.value.clone()),
                (None, false) if node.value_to_metric => Some(e.value.clone()),
                (None, false) => None,
            };
            if let Some(s) = shown.filter(|s| !s.is_empty()) {
                v2m.push('_');
                v2m.push_str(&s);
            }
            if i == entries.len() - 1 {
                found = node.limit.clone();
            }
            if node.children.is_empty() {
                break;
            }
            level = node;
        }
        let limit = found?;
        let metric_key = if limit.detailed_metric {
            if share.iter().any(Option::is_some) {
                let mut k = domain.to_string();
                for (i, e) in entries.iter().enumerate() {
                    k.push('.');
                    k.push_str(&e.key);
                    let v = share[i].as_deref().unwrap_or(&e.value);
                    if !v.is_empty() {
                        k.push('_');
                        k.push_str(v);
                    }
                }
                k
            } else {
                detailed
            }
        } else {
            v2m
        };
        Some(Matched {
            redis_key: redis_key(domain, entries, &share),
            metric_key,
            limit,
        })
    }

    /// A readable dump: one line per limit (GET /rlconfig).
    pub fn dump(&self) -> String {
        fn walk(n: &Node, out: &mut Vec<String>) {
            if let Some(l) = &n.limit {
                out.push(match l.unit {
                    Some(u) => format!(
                        "{}: unit={} requests_per_unit={}, shadow_mode: {}, quota_mode: {}",
                        l.full_key,
                        u.name(),
                        l.requests_per_unit,
                        l.shadow_mode,
                        l.quota_mode
                    ),
                    None => format!("{}: unlimited", l.full_key),
                });
            }
            for c in n.children.values() {
                walk(c, out);
            }
        }
        let mut out = Vec::new();
        for n in self.domains.values() {
            walk(n, &mut out);
        }
        out.sort();
        out.join("\n") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<Config, ConfigError> {
        Config::load(&[("config.test".into(), yaml.into())], false)
    }

    fn e(k: &str, v: &str) -> Entry {
        Entry::new(k, v)
    }

    const BASIC: &str = r#"
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    rate_limit:
      unit: Minute
      requests_per_unit: 100
  - key: remote_address
    descriptors:
      - key: path
        value: /foo
        rate_limit:
          unit: hour
          requests_per_unit: 7
"#;

    #[test]
    fn key_value_wins_over_key_alone() {
        let c = load(BASIC).unwrap();
        let m = c.lookup("mongo_cps", &[e("database", "users")]).unwrap();
        assert_eq!(m.limit.requests_per_unit, 500);
        assert_eq!(m.limit.unit, Some(Unit::Second));
        let m = c.lookup("mongo_cps", &[e("database", "other")]).unwrap();
        assert_eq!(m.limit.requests_per_unit, 100);
        assert_eq!(m.limit.unit, Some(Unit::Minute));
        assert_eq!(m.metric_key, "mongo_cps.database");
        assert_eq!(m.redis_key, "mongo_cps_database_other_");
        assert!(c
            .lookup("other_domain", &[e("database", "users")])
            .is_none());
        assert!(c.lookup("mongo_cps", &[e("nothing", "x")]).is_none());
    }

    #[test]
    fn nested_descriptors_need_the_full_depth() {
        let c = load(BASIC).unwrap();
        let m = c
            .lookup(
                "mongo_cps",
                &[e("remote_address", "10.0.0.1"), e("path", "/foo")],
            )
            .unwrap();
        assert_eq!(m.limit.requests_per_unit, 7);
        assert_eq!(m.limit.unit, Some(Unit::Hour));
        assert_eq!(m.redis_key, "mongo_cps_remote_address_10.0.0.1_path_/foo_");
        // The parent alone has no limit; a deeper request than the config has none.
        assert!(c
            .lookup("mongo_cps", &[e("remote_address", "10.0.0.1")])
            .is_none());
        assert!(c
            .lookup("mongo_cps", &[e("database", "users"), e("path", "/foo")])
            .is_none());
    }

    #[test]
    fn every_unit_their_service_accepts() {
        for (name, ms) in [
            ("second", 1_000),
            ("MINUTE", 60_000),
            ("hour", 3_600_000),
            ("day", 86_400_000),
            ("week", 604_800_000),
            ("month", 2_592_000_000),
            ("year", 31_536_000_000u64),
        ] {
            let y = format!(
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: {name}\n      requests_per_unit: 3\n"
            );
            let c = load(&y).unwrap();
            let m = c.lookup("d", &[e("k", "v")]).unwrap();
            assert_eq!(m.limit.unit.map(Unit::millis), Some(ms), "{name}");
        }
        let err = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 3\n").unwrap_err();
        assert!(err.0.starts_with("config.test: "), "{err}");
        assert!(
            err.0
                .contains("invalid rate limit unit 'fortnight' at line 5"),
            "{err}"
        );
        assert!(err.0.contains("line 5"), "{err}");
    }

    #[test]
    fn prefix_wildcard_and_share_threshold() {
        let y = r#"
domain: d
descriptors:
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: file
    value: "*.png"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 4}
"#;
        let c = load(y).unwrap();
        let a = c.lookup("d", &[e("path", "/api/users")]).unwrap();
        let b = c.lookup("d", &[e("path", "/api/orders")]).unwrap();
        assert_eq!(a.limit.requests_per_unit, 10);
        // Without share_threshold each value has its own count.
        assert_ne!(a.redis_key, b.redis_key);
        assert_eq!(a.metric_key, "d.path_/api/*");
        assert!(c.lookup("d", &[e("path", "/other")]).is_none());
        let p = c.lookup("d", &[e("file", "a.png")]).unwrap();
        let q = c.lookup("d", &[e("file", "b.png")]).unwrap();
        assert_eq!(p.redis_key, q.redis_key);
        assert_eq!(p.redis_key, "d_file_*.png_");
        assert!(c.lookup("d", &[e("file", "a.jpg")]).is_none());
        let err = load("domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n").unwrap_err();
        assert!(
            err.0
                .contains("share_threshold can only be used with wildcard"),
            "{err}"
        );
    }

    #[test]
    fn unlimited_and_its_unit_rule() {
        let c =
            load("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n")
                .unwrap();
        let m = c.lookup("d", &[e("k", "x")]).unwrap();
        assert!(m.limit.unlimited);
        let err = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n").unwrap_err();
        assert!(
            err.0
                .contains("should not specify rate limit unit when unlimited"),
            "{err}"
        );
    }

    #[test]
    fn name_and_replaces() {
        let y = r#"
domain: d
descriptors:
  - key: user
    rate_limit:
      name: per_user
      unit: minute
      requests_per_unit: 5
  - key: vip
    rate_limit:
      unit: minute
      requests_per_unit: 50
      replaces:
        - name: per_user
"#;
        let c = load(y).unwrap();
        assert_eq!(
            c.lookup("d", &[e("user", "a")])
                .unwrap()
                .limit
                .name
                .as_deref(),
            Some("per_user")
        );
        assert_eq!(
            c.lookup("d", &[e("vip", "a")]).unwrap().limit.replaces,
            vec!["per_user".to_string()]
        );
        let err = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: a\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: a\n").unwrap_err();
        assert!(
            err.0
                .contains("replaces should not contain name of same descriptor"),
            "{err}"
        );
        let err = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: ''\n").unwrap_err();
        assert!(err.0.contains("empty replaces entry"), "{err}");
    }

    #[test]
    fn shadow_and_quota_mode_are_read() {
        let y = "domain: d\ndescriptors:\n  - key: s\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: q\n    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
        let c = load(y).unwrap();
        let s = c.lookup("d", &[e("s", "")]).unwrap();
        assert!(s.limit.shadow_mode && !s.limit.quota_mode);
        let q = c.lookup("d", &[e("q", "")]).unwrap();
        assert!(q.limit.quota_mode && !q.limit.shadow_mode);
    }

    #[test]
    fn detailed_metric_and_value_to_metric_name_the_counters() {
        let y = include_str!("../tests/fixtures/metric_names.yaml");
        let c = load(y).unwrap();
        assert_eq!(
            c.lookup("m", &[e("client", "c42")]).unwrap().metric_key,
            "m.client_c42"
        );
        assert_eq!(
            c.lookup("m", &[e("route", "/a"), e("method", "GET")])
                .unwrap()
                .metric_key,
            "m.route_/a.method"
        );
        assert_eq!(
            c.lookup("m", &[e("plain", "/a"), e("method", "GET")])
                .unwrap()
                .metric_key,
            "m.plain.method"
        );
    }

    #[test]
    fn bad_files_name_the_file_the_line_and_the_reason() {
        let err = load("domain: d\ndescriptors:\n  - key: k\n    rate_limt:\n      unit: second\n")
            .unwrap_err();
        assert!(err.0.starts_with("config.test: "), "{err}");
        assert!(err.0.contains("unknown field `rate_limt`"), "{err}");
        assert!(err.0.contains("line 4"), "{err}");
        let err = load("domain: d\ndescriptors:\n  - key: k\n  - key: k\n").unwrap_err();
        assert!(
            err.0.contains("duplicate descriptor composite key 'k'"),
            "{err}"
        );
        let err = load("descriptors:\n  - key: k\n").unwrap_err();
        assert!(err.0.contains("empty domain"), "{err}");
        let err = load("domain: d\ndescriptors:\n  - value: v\n").unwrap_err();
        assert!(err.0.contains("key"), "{err}");
        let err = load("domain: d\ndescriptors: [\n").unwrap_err();
        assert!(err.0.contains("line"), "{err}");
        let two = [
            ("a".to_string(), "domain: d\n".to_string()),
            ("b".to_string(), "domain: d\n".to_string()),
        ];
        assert!(Config::load(&two, false)
            .unwrap_err()
            .0
            .contains("duplicate domain 'd'"));
        assert!(Config::load(&two, true).is_ok());
    }

    #[test]
    fn integer_values_are_strings_and_metadata_is_accepted() {
        let y = "domain: d\ndescriptors:\n  - key: code\n    value: 429\n    metadata: {team: x, n: [1, 2]}\n    rate_limit: {unit: second, requests_per_unit: 2}\n";
        let c = load(y).unwrap();
        assert!(c.lookup("d", &[e("code", "429")]).is_some());
    }

    #[test]
    fn the_example_config_loads() {
        let text = include_str!("../examples/config/edge.yaml");
        let c = load(text).unwrap();
        let m = c
            .lookup("edge", &[e("remote_address", "10.0.0.1")])
            .unwrap();
        assert_eq!(m.limit.requests_per_unit, 100);
        let m = c
            .lookup(
                "edge",
                &[e("remote_address", "10.0.0.1"), e("path", "/login")],
            )
            .unwrap();
        assert_eq!(m.limit.requests_per_unit, 5);
    }

    #[test]
    fn wildcards_in_the_middle() {
        let parts = |s: &str| s.split('*').map(str::to_string).collect::<Vec<_>>();
        assert!(wildcard_match(&parts("a*c"), "abc"));
        assert!(wildcard_match(&parts("a*c"), "ac"));
        assert!(!wildcard_match(&parts("a*c"), "ab"));
        assert!(wildcard_match(&parts("a*b*c"), "a1b2c"));
        assert!(!wildcard_match(&parts("ab*ba"), "aba"));
    }
}
