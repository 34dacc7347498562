//! The /json endpoint's mapping (the proto3 JSON of RateLimitRequest and
//! RateLimitResponse): both the lowerCamelCase and the original field names are read,
//! lowerCamelCase is written, fields at their default are left out, as protojson does.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::{json, Map, Value};

use crate::config::Unit;

fn field<'a>(o: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    o.get(camel)
        .or_else(|| o.get(snake))
        .filter(|v| !v.is_null())
}

fn string(v: Option<&Value>, what: &str) -> Result<String, String> {
    match v {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("{what}: a string, not {other}")),
    }
}

/// An unsigned integer, as a number or (64-bit in protojson) a string.
fn uint(v: Option<&Value>, what: &str, max: u64) -> Result<Option<u64>, String> {
    let n = match v {
        None => return Ok(None),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        Some(_) => None,
    };
    match n {
        Some(n) if n <= max => Ok(Some(n)),
        _ => Err(format!("{what}: an unsigned integer up to {max}")),
    }
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object().ok_or_else(|| format!("{what}: an object"))
}

fn list<'a>(v: Option<&'a Value>, what: &str) -> Result<&'a [Value], String> {
    match v {
        None => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(format!("{what}: a list")),
    }
}

/// A RateLimitRequest from its JSON; `Err` says what is wrong.
pub fn request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let o = object(&v, "the request")?;
    let mut req = RateLimitRequest {
        domain: string(field(o, "domain", "domain"), "domain")?,
        hits_addend: uint(
            field(o, "hitsAddend", "hits_addend"),
            "hitsAddend",
            u64::from(u32::MAX),
        )?
        .unwrap_or(0) as u32,
        ..Default::default()
    };
    for (i, d) in list(field(o, "descriptors", "descriptors"), "descriptors")?
        .iter()
        .enumerate()
    {
        let what = format!("descriptors[{i}]");
        let d = object(d, &what)?;
        let mut desc = RateLimitDescriptor::default();
        for (j, e) in list(field(d, "entries", "entries"), &what)?
            .iter()
            .enumerate()
        {
            let w = format!("{what}.entries[{j}]");
            let e = object(e, &w)?;
            desc.entries.push(Entry {
                key: string(field(e, "key", "key"), &w)?,
                value: string(field(e, "value", "value"), &w)?,
            });
        }
        if let Some(l) = field(d, "limit", "limit") {
            let l = object(l, &format!("{what}.limit"))?;
            let rpu = uint(
                field(l, "requestsPerUnit", "requests_per_unit"),
                "requestsPerUnit",
                u64::from(u32::MAX),
            )?
            .unwrap_or(0) as u32;
            let unit = match field(l, "unit", "unit") {
                None => 0,
                Some(Value::String(s)) => Unit::parse(s).map_or(0, Unit::proto),
                Some(Value::Number(n)) => {
                    n.as_i64().and_then(|n| i32::try_from(n).ok()).unwrap_or(0)
                }
                Some(_) => return Err(format!("{what}.limit.unit: a unit name")),
            };
            desc.limit = Some(RateLimitOverride {
                requests_per_unit: rpu,
                unit,
            });
        }
        if let Some(h) = uint(
            field(d, "hitsAddend", "hits_addend"),
            &format!("{what}.hitsAddend"),
            u64::MAX,
        )? {
            desc.hits_addend = Some(UInt64Value { value: h });
        }
        desc.is_negative_hits = match field(d, "isNegativeHits", "is_negative_hits") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(format!("{what}.isNegativeHits: a boolean")),
        };
        req.descriptors.push(desc);
    }
    Ok(req)
}

fn code_name(c: i32) -> &'static str {
    match c {
        1 => "OK",
        2 => "OVER_LIMIT",
        _ => "UNKNOWN",
    }
}

/// A RateLimitResponse as protojson writes it.
pub fn response(r: &RateLimitResponse) -> Value {
    let mut o = Map::new();
    if r.overall_code != 0 {
        o.insert("overallCode".into(), json!(code_name(r.overall_code)));
    }
    let statuses: Vec<Value> = r
        .statuses
        .iter()
        .map(|s| {
            let mut m = Map::new();
            if s.code != 0 {
                m.insert("code".into(), json!(code_name(s.code)));
            }
            if let Some(l) = &s.current_limit {
                let mut lm = Map::new();
                if !l.name.is_empty() {
                    lm.insert("name".into(), json!(l.name));
                }
                if l.requests_per_unit != 0 {
                    lm.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                }
                if let Some(u) = Unit::from_proto(l.unit) {
                    lm.insert("unit".into(), json!(u.name()));
                }
                m.insert("currentLimit".into(), Value::Object(lm));
            }
            if s.limit_remaining != 0 {
                m.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                let text = if d.nanos == 0 {
                    format!("{}s", d.seconds)
                } else {
                    format!("{}.{:03}s", d.seconds, d.nanos / 1_000_000)
                };
                m.insert("durationUntilReset".into(), json!(text));
            }
            Value::Object(m)
        })
        .collect();
    if !statuses.is_empty() {
        o.insert("statuses".into(), Value::Array(statuses));
    }
    if !r.response_headers_to_add.is_empty() {
        let h: Vec<Value> = r
            .response_headers_to_add
            .iter()
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        o.insert("responseHeadersToAdd".into(), Value::Array(h));
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_and_64_bit_strings() {
        let r = request(br#"{"domain":"d","hits_addend":3,"descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":"7","is_negative_hits":true,"limit":{"requests_per_unit":5,"unit":"MINUTE"}}]}"#).unwrap();
        assert_eq!(r.domain, "d");
        assert_eq!(r.hits_addend, 3);
        let d = &r.descriptors[0];
        assert_eq!(d.entries[0].value, "v");
        assert_eq!(d.hits_addend.as_ref().map(|h| h.value), Some(7));
        assert!(d.is_negative_hits);
        assert_eq!(
            d.limit.as_ref().map(|l| (l.requests_per_unit, l.unit)),
            Some((5, 2))
        );
    }

    #[test]
    fn malformed_requests_say_what() {
        assert!(request(b"{").unwrap_err().starts_with("not JSON"));
        assert!(request(br#"{"domain":1}"#).unwrap_err().contains("domain"));
        assert!(
            request(br#"{"domain":"d","descriptors":[{"entries":[{"key":2}]}]}"#)
                .unwrap_err()
                .contains("descriptors[0].entries[0]")
        );
        assert!(request(br#"{"domain":"d","hitsAddend":-1}"#)
            .unwrap_err()
            .contains("hitsAddend"));
    }
}
