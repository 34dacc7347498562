//! Replays every vector of the repository's `conformance/` (commands, replies, headers,
//! identity, deny_cache) through this crate's real code: the limiter on a scripted
//! connection, the header and identity helpers, the real DenyCache with its clock
//! injected, the rate-string parser. With the self-check: one leaf of each expected part
//! changed must mismatch.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use redis::{Cmd, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};
use serde_json::{json, Value as J};

use crate::deny_cache::{DenyCache, Spec, FAKE_NOW};

/// The commands a scripted connection recorded.
type Sent = Arc<Mutex<Vec<Vec<String>>>>;
use crate::{
    library, Call, Counts, Decision, Identity, Limit, LimitResult, Limiter, SendCommand,
    TrustedProxies, UserId,
};

fn dir() -> PathBuf {
    match std::env::var_os("SLIDINGWINDOW_REPO") {
        Some(r) => PathBuf::from(r).join("conformance"),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../conformance"),
    }
}

fn cases(file: &str) -> Vec<J> {
    let path = dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: J = serde_json::from_str(&text).unwrap();
    v["cases"].as_array().unwrap().clone()
}

/// `value` with one leaf changed (the first found), as the README's self-check asks.
fn mutated(value: &J) -> J {
    fn go(v: &mut J) -> bool {
        match v {
            J::Bool(b) => {
                *b = !*b;
                true
            }
            J::Number(n) => {
                *v = json!(n.as_f64().unwrap() + 1.0);
                true
            }
            J::String(s) => {
                s.push('x');
                true
            }
            J::Null => {
                *v = json!("x");
                true
            }
            J::Array(a) => {
                if a.is_empty() {
                    a.push(json!(1));
                    true
                } else {
                    a.iter_mut().any(go)
                }
            }
            J::Object(o) => {
                if o.is_empty() {
                    o.insert("x".into(), json!(1));
                    true
                } else {
                    o.values_mut().any(go)
                }
            }
        }
    }
    let mut m = value.clone();
    assert!(go(&mut m));
    m
}

/// Compares, and checks that the comparison would catch a change.
fn compare(file: &str, case: &J, got: &J, want: &J) {
    let id = case["id"].as_str().unwrap();
    assert_eq!(got, want, "{file} {id}");
    assert_ne!(
        got,
        &mutated(want),
        "{file} {id}: the self-check's mutation was not caught"
    );
}

fn json_value(j: &J) -> Value {
    match j {
        J::Number(n) => Value::Int(n.as_i64().unwrap()),
        J::String(s) => Value::BulkString(s.clone().into_bytes()),
        J::Array(a) => Value::Array(a.iter().map(json_value).collect()),
        J::Bool(b) => Value::Int(*b as i64),
        J::Null => Value::Nil,
        J::Object(_) => panic!("no objects in replies"),
    }
}

fn one(r: &LimitResult) -> J {
    json!({
        "allowed": r.allowed, "count": r.count, "limit": r.limit, "remaining": r.remaining,
        "retry_after": r.retry_after, "reset_after": r.reset_after, "window": r.window,
        "ms": r.ms, "degraded": r.degraded, "retry_after_seconds": r.retry_after_seconds(),
        "reset_after_seconds": r.reset_after_seconds(), "window_seconds": r.window_seconds(),
    })
}

fn multi(d: &Decision) -> J {
    json!({"summary": one(&d.summary), "limits": d.limits.iter().map(one).collect::<Vec<_>>(), "governing": d.governing})
}

fn decision_json(call: &str, d: &Decision) -> J {
    if call.ends_with("_limits") {
        multi(d)
    } else {
        one(&d.summary)
    }
}

fn limit_result(j: &J) -> LimitResult {
    LimitResult {
        allowed: j["allowed"].as_bool().unwrap(),
        count: j["count"].as_u64().unwrap(),
        limit: j["limit"].as_u64().unwrap(),
        remaining: j["remaining"].as_u64().unwrap(),
        retry_after: j["retry_after"].as_i64().unwrap(),
        reset_after: j["reset_after"].as_u64().unwrap(),
        window: j["window"].as_u64().unwrap(),
        ms: j["ms"].as_bool().unwrap(),
        degraded: j["degraded"].as_bool().unwrap(),
    }
}

fn call_of(case: &J) -> Call {
    let limits: Vec<Limit> = case["limits"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| Limit::new(p[0].as_u64().unwrap(), p[1].as_u64().unwrap()))
                .collect()
        })
        .unwrap_or_default();
    let o = &case["options"];
    let mut c = Call::limits(limits);
    if o["ms"].as_bool() == Some(true) {
        c = c.ms();
    }
    if let Some(cost) = o["cost"].as_u64() {
        c = c.cost(cost);
    }
    if let Some(now) = o["now"].as_u64() {
        c = c.now(now);
    }
    c
}

fn server_error(detail: &str) -> RedisError {
    RedisError::from((
        ErrorKind::Server(ServerErrorKind::ResponseError),
        "An error was signalled by the server",
        detail.to_string(),
    ))
}

#[derive(Clone, Copy, PartialEq)]
enum Server {
    Module,
    Library,
    Redis62,
}

/// A scripted connection: answers detection as `server` would, records the commands,
/// answers the limiter's call with `reply` (`None`: a refused connection).
#[derive(Clone)]
struct Scripted {
    server: Server,
    reply: Option<Value>,
    sent: Sent,
}

fn words(cmd: &Cmd) -> Vec<String> {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => String::from_utf8_lossy(b).to_string(),
            _ => "0".into(),
        })
        .collect()
}

impl SendCommand for Scripted {
    fn send(&self, cmd: Cmd) -> crate::BoxFuture<RedisResult<Value>> {
        let w = words(&cmd);
        let me = self.clone();
        Box::pin(async move {
            let name = w[0].to_ascii_uppercase();
            let unknown = |n: &str| {
                Err(server_error(&format!(
                    "unknown command '{n}', with args beginning with:"
                )))
            };
            match (me.server, name.as_str()) {
                (Server::Library, "FCALL_RO") if w[1] == "slidingwindow_version" => {
                    return Ok(Value::BulkString(library::version().as_bytes().to_vec()))
                }
                (Server::Library, "FUNCTION") => return Ok(Value::Okay),
                (Server::Library, n) if n.starts_with("SLIDINGWINDOW.") => return unknown(n),
                (Server::Redis62, n) if n.starts_with("FCALL") || n == "FUNCTION" => {
                    return unknown(n)
                }
                (Server::Redis62, n) if n.starts_with("SLIDINGWINDOW.") => return unknown(n),
                _ => {}
            }
            me.sent.lock().unwrap().push(w);
            match &me.reply {
                Some(v) => Ok(v.clone()),
                None => Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "refused",
                ))),
            }
        })
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn drive(l: &Limiter<Scripted>, case: &J) -> J {
    let call = case["call"].as_str().unwrap();
    let id = case["client_id"].as_str().unwrap();
    let c = call_of(case);
    let o = &case["options"];
    match call {
        "check" | "check_limits" => decision_json(call, &l.check(id, &c).await.unwrap()),
        "peek" | "peek_limits" => decision_json(call, &l.peek(id, &c).await.unwrap()),
        "refund" | "refund_limits" => decision_json(call, &l.refund(id, &c).await.unwrap()),
        "is_allowed" => {
            let lim = &case["limits"][0];
            let (a, n) = l
                .is_allowed_at(
                    id,
                    lim[0].as_u64().unwrap(),
                    lim[1].as_u64().unwrap(),
                    o["now"].as_u64(),
                )
                .await
                .unwrap();
            json!({"allowed": a, "count": n})
        }
        "counts" => {
            let Counts {
                previous,
                current,
                elapsed,
                degraded,
            } = l
                .counts(
                    id,
                    case["window"].as_u64().unwrap(),
                    o["ms"].as_bool() == Some(true),
                    o["now"].as_u64(),
                )
                .await
                .unwrap();
            json!({"previous": previous, "current": current, "elapsed": elapsed, "degraded": degraded})
        }
        other => panic!("unknown call {other}"),
    }
}

fn limiter(server: Server, reply: Option<Value>, case: &J) -> (Limiter<Scripted>, Sent) {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let s = Scripted {
        server,
        reply,
        sent: sent.clone(),
    };
    let mut b = Limiter::builder(s).fail_open(case["fail_open"].as_bool().unwrap_or(true));
    if let Some(p) = case["prefix"].as_str() {
        b = b.prefix(p);
    }
    (b.build(), sent)
}

#[test]
fn commands_json() {
    let rt = rt();
    for case in cases("commands.json") {
        for (server, field) in [
            (Server::Module, "module"),
            (Server::Library, "fcall"),
            (Server::Redis62, "evalsha"),
        ] {
            // A reply that reads for any call: [allowed, count] is enough for is_allowed,
            // the others may fail to parse; only what was sent is compared.
            let (l, sent) = limiter(
                server,
                Some(Value::Array(vec![Value::Int(1), Value::Int(1)])),
                &case,
            );
            rt.block_on(async {
                let _ = std::panic::AssertUnwindSafe(drive_lenient(&l, &case)).await;
            });
            let last = sent.lock().unwrap().last().cloned().unwrap_or_default();
            let got: Vec<J> = last
                .into_iter()
                .map(|w| {
                    J::String(if w == library::sha() {
                        "$SHA".into()
                    } else {
                        w
                    })
                })
                .collect();
            compare("commands.json", &case, &J::Array(got), &case[field]);
        }
    }
}

/// `drive` without the unwraps: the scripted reply does not fit every call.
async fn drive_lenient(l: &Limiter<Scripted>, case: &J) {
    let id = case["client_id"].as_str().unwrap();
    let c = call_of(case);
    let o = &case["options"];
    match case["call"].as_str().unwrap() {
        "check" | "check_limits" => drop(l.check(id, &c).await),
        "peek" | "peek_limits" => drop(l.peek(id, &c).await),
        "refund" | "refund_limits" => drop(l.refund(id, &c).await),
        "is_allowed" => {
            let lim = &case["limits"][0];
            drop(
                l.is_allowed_at(
                    id,
                    lim[0].as_u64().unwrap(),
                    lim[1].as_u64().unwrap(),
                    o["now"].as_u64(),
                )
                .await,
            )
        }
        "counts" => drop(
            l.counts(
                id,
                case["window"].as_u64().unwrap(),
                o["ms"].as_bool() == Some(true),
                o["now"].as_u64(),
            )
            .await,
        ),
        other => panic!("unknown call {other}"),
    }
}

#[test]
fn replies_json() {
    let rt = rt();
    for case in cases("replies.json") {
        let reply = (!case["reply"].is_null()).then(|| json_value(&case["reply"]));
        let (l, _) = limiter(Server::Module, reply, &case);
        let got = rt.block_on(drive(&l, &case));
        compare("replies.json", &case, &got, &case["result"]);
    }
}

#[test]
fn headers_json() {
    for case in cases("headers.json") {
        let r = &case["result"];
        let policy = case["policy"].as_str().unwrap_or("default");
        let headers = if r.get("summary").is_some() {
            let d = Decision {
                summary: limit_result(&r["summary"]),
                limits: r["limits"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(limit_result)
                    .collect(),
                governing: r["governing"].as_u64().unwrap() as usize,
            };
            crate::limits_headers(&d, policy)
        } else {
            crate::rate_limit_headers(&limit_result(r), policy)
        };
        let got: serde_json::Map<String, J> = headers
            .into_iter()
            .map(|(k, v)| (k.to_string(), J::String(v)))
            .collect();
        compare("headers.json", &case, &J::Object(got), &case["headers"]);
    }
}

#[test]
fn identity_json() {
    for case in cases("identity.json") {
        let mut headers = http::HeaderMap::new();
        if let Some(h) = case["headers"].as_object() {
            for (name, lines) in h {
                let n = http::HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()).unwrap();
                for line in lines.as_array().unwrap() {
                    headers.append(n.clone(), line.as_str().unwrap().parse().unwrap());
                }
            }
        }
        let trusted = TrustedProxies::new(
            case["trusted_proxies"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|n| n.as_str().unwrap().to_string())
                        .collect::<Vec<String>>()
                })
                .unwrap_or_default(),
        );
        let o = &case["options"];
        let mut id = if o["by_ip"].as_bool() == Some(true) {
            Identity::by_ip(trusted.clone())
        } else {
            Identity::new().trusted_proxies(trusted.clone())
        };
        if let Some(p) = o["ipv6_prefix"].as_u64() {
            id = id.ipv6_prefix(p as u8);
        }
        if let Some(h) = o["api_key_header"].as_str() {
            let keys: Vec<String> = o["api_keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap().to_string())
                .collect();
            id = id.api_key(h, move |k| keys.iter().any(|x| x == k));
        }
        let mut ext = http::Extensions::new();
        if let Some(u) = o["user"].as_str() {
            ext.insert(UserId(u.into()));
        }
        let peer = case["peer"].as_str();
        let xff: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        let ip = crate::client_ip(&xff, peer, &trusted).map(|a| a.to_string());
        let got = json!({"client_ip": ip, "identity": id.identify(&headers, &ext, peer)});
        let want = json!({"client_ip": case["client_ip"], "identity": case["identity"]});
        compare("identity.json", &case, &got, &want);
    }
}

/// Answers the cache's TIME with the case's server clock (local clock + offset).
#[derive(Clone)]
struct Clocked {
    offset_ms: Option<f64>,
}

impl SendCommand for Clocked {
    fn send(&self, _cmd: Cmd) -> crate::BoxFuture<RedisResult<Value>> {
        let now = FAKE_NOW.with(|c| c.get()).unwrap();
        let reply = match self.offset_ms {
            Some(off) => {
                let us = ((now * 1000.0 + off) * 1000.0).round() as u64;
                Ok(Value::Array(vec![
                    Value::Int((us / 1_000_000) as i64),
                    Value::Int((us % 1_000_000) as i64),
                ]))
            }
            None => Err(server_error("no TIME in this case")),
        };
        Box::pin(async move { reply })
    }
}

#[test]
fn deny_cache_json() {
    let rt = rt();
    for case in cases("deny_cache.json") {
        let cfg = &case["cache"];
        let cache = DenyCache::new(
            cfg["max_entries"].as_u64().unwrap_or(10_000) as usize,
            std::time::Duration::from_millis(cfg["clock_refresh_ms"].as_u64().unwrap_or(0)),
        );
        let prefix = case["prefix"].as_str().unwrap_or("rate:").to_string();
        let fail_open = case["fail_open"].as_bool().unwrap_or(true);
        let sender = Clocked {
            offset_ms: case["server_offset_ms"].as_f64(),
        };
        let mut got_steps = Vec::new();
        let mut want_steps = Vec::new();
        for step in case["steps"].as_array().unwrap() {
            FAKE_NOW.with(|c| c.set(Some(step["at_ms"].as_f64().unwrap() / 1000.0)));
            let call_name = step["call"].as_str().unwrap();
            let call = call_of(step);
            let windows = call.windows();
            let sent = std::cell::Cell::new(false);
            let latency = step["latency_ms"].as_f64().unwrap_or(0.0) / 1000.0;
            let scripted = || async {
                sent.set(true);
                FAKE_NOW.with(|c| c.set(Some(c.get().unwrap() + latency)));
                match &step["redis"] {
                    J::String(s) if s == "unavailable" => {
                        Ok(Decision::unavailable(fail_open, &call.limits, call.ms))
                    }
                    J::Null => Err(crate::Error::UnexpectedReply(
                        "sent without a scripted reply".into(),
                    )),
                    r => Decision::from_reply(&json_value(r), &windows, call.cost, call.ms),
                }
            };
            let spec = Spec {
                key: format!("{prefix}{}", step["client_id"].as_str().unwrap()),
                limits: call.limits.iter().map(|l| (l.limit, l.window)).collect(),
                ms: call.ms,
                now: call.now,
                cost: call.cost,
            };
            let answer = rt.block_on(async {
                if call_name.starts_with("peek") {
                    scripted().await // a peek never meets the cache
                } else {
                    cache
                        .run(&spec, &sender, call_name.starts_with("refund"), scripted)
                        .await
                }
            });
            let result = match answer {
                Ok(d) => decision_json(call_name, &d),
                Err(e) => json!({"error": e.to_string()}),
            };
            got_steps.push(json!({"sent": sent.get(), "result": result}));
            want_steps.push(step["expect"].clone());
        }
        FAKE_NOW.with(|c| c.set(None));
        compare(
            "deny_cache.json",
            &case,
            &J::Array(got_steps),
            &J::Array(want_steps),
        );
    }
}

#[test]
fn rates_json() {
    for case in cases("rates.json") {
        let text = case["text"].as_str().unwrap();
        let id = case["id"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{text:?}"));
        let parsed = if case["ms"].as_bool() == Some(true) {
            Call::rates(text).and_then(|c| {
                let c = c.ms();
                c.validate().map(|()| c.limit_list().to_vec())
            })
        } else {
            crate::parse_limits(text).map_err(crate::Error::from)
        };
        match (&case["limits"], parsed) {
            (J::Array(want), Ok(got)) => {
                let got = J::Array(got.iter().map(|l| json!([l.limit, l.window])).collect());
                let want = J::Array(want.clone());
                assert_eq!(got, want, "rates.json {id}");
                assert_ne!(got, mutated(&want), "rates.json {id}: self-check");
            }
            (J::Null, Err(e)) => {
                let fragment = case["message"].as_str().unwrap();
                assert!(
                    e.to_string().contains(fragment),
                    "rates.json {id}: {e:?} lacks {fragment:?}"
                );
                assert!(
                    !e.to_string().contains(&format!("{fragment}x")),
                    "rates.json {id}: self-check"
                );
            }
            (want, got) => panic!("rates.json {id}: expected {want}, got {got:?}"),
        }
    }
}

#[test]
fn every_file_has_a_driver() {
    let mut files: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "commands.json",
            "deny_cache.json",
            "headers.json",
            "identity.json",
            "rates.json",
            "replies.json"
        ]
    );
}
