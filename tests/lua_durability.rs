//! The Lua library on servers without the module, on every server: a replica holds the
//! same bytes and absolute expiry and answers FCALL_RO; an AOF replay after SIGKILL
//! gives back every key; under `maxmemory` with `noeviction`, CHECK (no `allow-oom`) is
//! refused with OOM while PEEK (`no-writes`) answers, also by FCALL_RO.

#[macro_use]
mod support;

use redis::Value;
use support::lua::{fcall, load_library, wait_library, Op};
use support::{error_text, get_raw, info_u64, pexpiretime, replicate_from, Kind, Server};

on_every_server!(
    a_replica_holds_the_library_s_bytes,
    an_aof_replay_keeps_the_library_s_keys,
    under_noeviction_check_is_refused_and_peek_answers,
);

fn args(a: &[String]) -> Vec<Vec<u8>> {
    a.iter().map(|s| s.as_bytes().to_vec()).collect()
}

/// Identity i's call at `now` seconds: even ones a minute in seconds, odd ones 25
/// minutes in ms with cost 2 and a second limit (long windows: nothing expires).
fn call(i: usize, now: u64) -> Vec<Vec<u8>> {
    let a: Vec<String> = if i.is_multiple_of(2) {
        vec!["3".into(), "60".into(), now.to_string()]
    } else {
        [
            "7",
            "1500000",
            &(now * 1000).to_string(),
            "MS",
            "COST",
            "2",
            "LIMIT",
            "9",
            "3000000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    args(&a)
}

fn key(i: usize) -> String {
    format!("lib:{i}")
}

fn run(con: &mut redis::Connection, op: Op, i: usize, now: u64, ro: bool) -> Value {
    let mut c = fcall(op, &key(i), &call(i, now));
    if ro {
        let mut r = redis::cmd("FCALL_RO");
        r.arg(op.function()).arg(1).arg(key(i)).arg(call(i, now));
        c = r;
    }
    c.query(con)
        .unwrap_or_else(|e| panic!("{op:?} {}: {e}", key(i)))
}

/// Bytes, absolute expiry and a later DETAILS PEEK of every identity.
fn snapshot(con: &mut redis::Connection, n: usize) -> Vec<(Option<Vec<u8>>, i64, Value)> {
    (0..n)
        .map(|i| {
            let mut peek = call(i, 6075);
            peek.push(b"DETAILS".to_vec());
            let p: Value = fcall(Op::Peek, &key(i), &peek).query(con).unwrap();
            (get_raw(con, &key(i)), pexpiretime(con, &key(i)), p)
        })
        .collect()
}

fn a_replica_holds_the_library_s_bytes(kind: Kind) {
    let master = Server::start_without_module(kind, &["--repl-diskless-sync-delay", "0"]);
    let replica = Server::start_without_module(kind, &[]);
    let mut m = master.connection();
    let mut r = replica.connection();
    load_library(&mut m);
    for i in 0..20 {
        run(&mut m, Op::Check, i, 6000, false);
    }
    replicate_from(&mut r, &master);
    // The library comes with the full sync.
    wait_library(&mut r);
    for i in 0..40 {
        for now in [6001, 6002, 6030, 6070] {
            run(&mut m, Op::Check, i, now, false);
        }
    }
    support::wait_replicas(&mut m, 1);
    let on_master = snapshot(&mut m, 40);
    assert!(on_master.iter().all(|(b, e, _)| b.is_some() && *e > 0));
    assert_eq!(snapshot(&mut r, 40), on_master, "replica");
    // PEEK and COUNTS (no-writes) run on the replica; CHECK does not.
    assert_eq!(
        run(&mut r, Op::Peek, 3, 6071, true),
        run(&mut m, Op::Peek, 3, 6071, true)
    );
    let e = fcall(Op::Check, &key(1), &call(1, 6071))
        .query::<Value>(&mut r)
        .unwrap_err();
    assert!(error_text(&e).starts_with("READONLY"), "{e}");
    // Denied checks and PEEKs replicate nothing.
    let offset = |c: &mut redis::Connection| info_u64(c, "replication", "master_repl_offset");
    let before = offset(&mut m);
    for _ in 0..50 {
        let Value::Array(d) = run(&mut m, Op::Check, 0, 6075, false) else {
            panic!()
        };
        assert_eq!(d[0], Value::Int(0));
        run(&mut m, Op::Peek, 0, 6075, true);
    }
    assert_eq!(offset(&mut m), before);
}

fn aof_text(dir: &std::path::Path) -> Vec<u8> {
    let files = std::fs::read_dir(dir.join("appendonlydir")).expect("appendonlydir");
    files
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect::<Vec<_>>()
        .concat()
}

fn an_aof_replay_keeps_the_library_s_keys(kind: Kind) {
    let mut s =
        Server::start_without_module(kind, &["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = s.connection();
    load_library(&mut c);
    for i in 0..30 {
        for now in [6000, 6001 + i as u64, 6050] {
            run(&mut c, Op::Check, i, now, false);
        }
    }
    let before = snapshot(&mut c, 30);
    s.restart(); // SIGKILL, then the AOF replayed, the library with it
    let mut c = s.connection();
    assert_eq!(snapshot(&mut c, 30), before);
    // Effects in the AOF: SET ... PXAT, never an FCALL frame.
    let aof = aof_text(&s.dir);
    let has = |needle: &[u8]| aof.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"$4\r\nPXAT\r\n"), "no SET PXAT in the AOF");
    assert!(!has(b"$5\r\nFCALL\r\n"), "FCALL logged verbatim");
}

fn config_set(con: &mut redis::Connection, name: &str, value: impl redis::ToRedisArgs) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(con)
        .unwrap();
}

fn under_noeviction_check_is_refused_and_peek_answers(kind: Kind) {
    let s = Server::start_without_module(kind, &[]);
    let mut c = s.connection();
    load_library(&mut c);
    config_set(&mut c, "maxmemory-policy", "noeviction");
    for i in 0..50 {
        for now in [6000, 6001, 6002] {
            run(&mut c, Op::Check, i, now, false);
        }
    }
    let expected: Vec<Value> = (0..50)
        .map(|i| run(&mut c, Op::Peek, i, 6003, true))
        .collect();
    let used = info_u64(&mut c, "memory", "used_memory");
    config_set(&mut c, "maxmemory", used + 1024 * 1024);
    let junk = vec![b'x'; 64 * 1024];
    let mut oom = false;
    for n in 0..1000 {
        let r: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("junk:{n}"))
            .arg(&junk)
            .query(&mut c);
        if let Err(e) = r {
            assert_eq!(e.code(), Some("OOM"), "{e}");
            oom = true;
            break;
        }
    }
    assert!(oom, "never out of memory");
    // Below what is used: every write-flagged call is refused, deterministically.
    let used = info_u64(&mut c, "memory", "used_memory");
    config_set(&mut c, "maxmemory", used - 256 * 1024);
    let bytes = get_raw(&mut c, &key(0));
    for k in [0, 77] {
        let e = fcall(Op::Check, &key(k), &call(k, 6003))
            .query::<Value>(&mut c)
            .unwrap_err();
        assert_eq!(e.code(), Some("OOM"), "{e}");
        let e = fcall(Op::Refund, &key(k), &call(k, 6003))
            .query::<Value>(&mut c)
            .unwrap_err();
        assert_eq!(e.code(), Some("OOM"), "refund: {e}");
    }
    assert_eq!(get_raw(&mut c, &key(0)), bytes);
    assert_eq!(get_raw(&mut c, &key(77)), None);
    for (i, want) in expected.iter().enumerate() {
        assert_eq!(&run(&mut c, Op::Peek, i, 6003, true), want, "FCALL_RO");
        assert_eq!(&run(&mut c, Op::Peek, i, 6003, false), want, "FCALL");
    }
}
