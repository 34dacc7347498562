//! Memory safety: redis-server (Redis 7.0) with the module loaded, run under
//! `valgrind --tool=memcheck`, through a short workload that takes every path of the
//! module — every argument error, WRONGTYPE on each kind of foreign value, allowed and
//! denied CHECKs, DETAILS, PEEK, MS, time going backwards, a window change, a count
//! crossing a varint boundary (the value changes length), a new key, an expired key,
//! more than 12 arguments, MULTI/EXEC, EVAL, INFO, COMMAND INFO/DOCS — repeated so that
//! a leak per call would show as many blocks. Then SHUTDOWN and valgrind's log is read:
//!
//! * no memcheck error of any kind (invalid read/write/free, uninitialised values...);
//! * no definitely lost block allocated by the module, at load or while serving
//!   commands (the command docs built for RedisModule_SetCommandInfo, which copies
//!   them, are freed after the call).
//!
//! Debian's redis-server links the shared libjemalloc; `--soname-synonyms` makes
//! valgrind replace that malloc, so every allocation (the module allocates through
//! RedisModule_Alloc) is tracked. The test is skipped, with a message, only when
//! valgrind is not installed (Debian package: `valgrind`).

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::Kind;

/// The workload runs this many times.
const ROUNDS: usize = 12;

struct Valgrinded {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl Valgrinded {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("valgrind.log")).unwrap_or_default()
    }

    fn server_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for Valgrinded {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn start() -> Valgrinded {
    let dir = std::env::temp_dir().join(format!("slidingwindow-memcheck-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = support::free_port();
    let child = Command::new("valgrind")
        .args([
            "--tool=memcheck",
            "--leak-check=full",
            "--show-leak-kinds=definite",
        ])
        .args(["--errors-for-leak-kinds=definite", "--num-callers=40"])
        .arg("--soname-synonyms=somalloc=libjemalloc.so*")
        .arg(format!("--log-file={}", dir.join("valgrind.log").display()))
        .arg(Kind::Redis.binary())
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "no",
            "--notify-keyspace-events",
            "KEA",
        ])
        .arg("--dir")
        .arg(&dir)
        .arg("--logfile")
        .arg(dir.join("server.log"))
        .arg("--loadmodule")
        .arg(support::module_path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn valgrind");
    let mut v = Valgrinded {
        child: Some(child),
        port,
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(Some(status)) = v.child.as_mut().unwrap().try_wait() {
            panic!(
                "redis-server under valgrind exited with {status}\n{}\n{}",
                v.server_log(),
                v.log()
            );
        }
        let up = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
        if up.is_ok() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "redis-server under valgrind not up in 120 s\n{}",
            v.server_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

type Reply = Result<redis::Value, String>;

fn call(con: &mut redis::Connection, args: &[&[u8]]) -> Reply {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query::<redis::Value>(con)
        .map_err(|e| format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")))
}

fn ok(con: &mut redis::Connection, args: &[&str]) -> Vec<i64> {
    let b: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let v = call(con, &b).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    redis::from_redis_value(v).unwrap()
}

fn err(con: &mut redis::Connection, args: &[&[u8]], code: &str) {
    match call(con, args) {
        Err(e) => assert!(
            e.starts_with(code),
            "{:?}: {e}",
            String::from_utf8_lossy(&args.concat())
        ),
        Ok(v) => panic!(
            "{:?}: expected {code}, got {v:?}",
            String::from_utf8_lossy(&args.concat())
        ),
    }
}

/// One round of the workload, on keys suffixed with `r`.
fn workload(con: &mut redis::Connection, r: usize) {
    let k = |name: &str| format!("mc:{r}:{name}");
    let (c, p) = ("SLIDINGWINDOW.CHECK", "SLIDINGWINDOW.PEEK");
    let key = k("a");
    let kb = key.as_bytes();
    let cb = c.as_bytes();
    // Argument errors, each kind.
    let long_opt = vec![b'Z'; 100];
    let nonprint = [0u8, 1, 0xA1, 0xFF, b'x'];
    let bad: Vec<Vec<&[u8]>> = vec![
        vec![cb],
        vec![cb, kb],
        vec![cb, kb, b"10"],
        vec![cb, kb, b"x", b"60"],
        vec![cb, kb, b"-1", b"60"],
        vec![cb, kb, b"9007199254740992", b"60"],
        vec![cb, kb, b"99999999999999999999999", b"60"],
        vec![cb, kb, b"10", b"0"],
        vec![cb, kb, b"10", b"9007199254741"],
        vec![cb, kb, b"10", b"60", b"1.5"],
        vec![cb, kb, b"10", b"60", b"-5"],
        vec![cb, kb, b"10", b"60", b"100", b"COST"],
        vec![cb, kb, b"10", b"60", b"100", b"COST", b"0"],
        vec![cb, kb, b"10", b"60", b"COST", b"1", b"cost", b"2"],
        vec![cb, kb, b"10", b"60", b"MS", b"ms"],
        vec![cb, kb, b"10", b"60", b"DETAILS", b"details"],
        vec![cb, kb, b"10", b"60", b"FOO"],
        vec![cb, kb, b"10", b"60", &long_opt],
        vec![cb, kb, b"10", b"60", &nonprint],
        vec![
            cb, kb, b"10", b"60", b"1", b"MS", b"DETAILS", b"COST", b"1", b"X", b"Y", b"Z", b"W",
            b"V", b"U", b"T",
        ],
        vec![p.as_bytes(), kb, b"10", b"60", b"1", b"COST", b"x"],
    ];
    for args in &bad {
        err(con, args, "ERR");
    }
    // WRONGTYPE on foreign values.
    let _: () = redis::cmd("RPUSH")
        .arg(k("list"))
        .arg("x")
        .query(con)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(k("hash"))
        .arg("f")
        .arg("v")
        .query(con)
        .unwrap();
    for (name, value) in [
        ("str", b"hello".to_vec()),
        ("int", b"1234567".to_vec()),
        ("near", vec![0xA1, 0x00, 0x00, 0x00, 0x00, 0x00]),
        ("empty", vec![]),
        ("long", vec![0xA1; 100]),
    ] {
        let _: () = redis::cmd("SET")
            .arg(k(name))
            .arg(value)
            .query(con)
            .unwrap();
    }
    for name in ["list", "hash", "str", "int", "near", "empty", "long"] {
        let kk = k(name);
        err(con, &[cb, kk.as_bytes(), b"10", b"60", b"100"], "WRONGTYPE");
        err(
            con,
            &[p.as_bytes(), kk.as_bytes(), b"10", b"60", b"100"],
            "WRONGTYPE",
        );
    }
    // Allowed (new key, then same-length overwrites), DETAILS, denied, PEEK.
    assert_eq!(ok(con, &[c, &key, "3", "60", "100"]), vec![1, 1]);
    assert_eq!(
        ok(con, &[c, &key, "3", "60", "101", "DETAILS"])[..4],
        [1, 2, 3, 1]
    );
    assert_eq!(ok(con, &[c, &key, "3", "60", "102"]), vec![1, 3]);
    assert_eq!(
        ok(con, &[c, &key, "3", "60", "103", "details"])[..4],
        [0, 3, 3, 0]
    );
    assert_eq!(ok(con, &[p, &key, "3", "60", "104"]), vec![0, 3]);
    assert_eq!(
        ok(con, &[p, &k("missing"), "3", "60", "104", "DETAILS"])[..4],
        [1, 1, 3, 2]
    );
    // Time going backwards, next window, window change, unit change.
    assert_eq!(ok(con, &[c, &key, "3", "60", "10"]), vec![0, 3]);
    assert_eq!(ok(con, &[c, &key, "3", "60", "150"])[0], 1);
    assert_eq!(ok(con, &[c, &key, "3", "30", "150"]), vec![1, 1]);
    assert_eq!(
        ok(con, &[c, &key, "3", "30000", "150000", "MS", "COST", "2"]),
        vec![1, 2]
    );
    // A count crossing the 1-byte varint boundary (127 -> 128): the value grows.
    let v = k("varint");
    assert_eq!(
        ok(con, &[c, &v, "1000", "60", "100", "COST", "127"]),
        vec![1, 127]
    );
    assert_eq!(ok(con, &[c, &v, "1000", "60", "100"]), vec![1, 128]);
    assert_eq!(
        ok(
            con,
            &[
                c,
                &v,
                "9007199254740991",
                "60",
                "100",
                "COST",
                "9000000000000000"
            ]
        )[0],
        1
    );
    // Largest values.
    let big = "9007199254740991";
    assert_eq!(
        ok(con, &[c, &k("big"), big, "9007199254740", big, "COST", big])[0],
        1
    );
    assert_eq!(
        ok(con, &[c, &k("bigms"), big, big, big, "MS", "DETAILS"])[0],
        1
    );
    // Server time (no `now`) and an expired key: a 1 ms window expires in 2 ms.
    let e = k("expiring");
    assert_eq!(ok(con, &[c, &e, "5", "1", "MS"]), vec![1, 1]);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(ok(con, &[c, &e, "5", "1", "MS"]), vec![1, 1]);
    assert_eq!(ok(con, &[c, &k("clock"), "5", "60"]), vec![1, 1]);
    // MULTI/EXEC and a script.
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd(c)
        .arg(k("tx"))
        .arg(2)
        .arg(60)
        .arg(100)
        .cmd(c)
        .arg(k("tx"))
        .arg(2)
        .arg(60)
        .arg(100)
        .cmd(c)
        .arg(k("tx"))
        .arg(2)
        .arg(60)
        .arg(100)
        .cmd(p)
        .arg(k("tx"))
        .arg(2)
        .arg(60)
        .arg(100);
    let tx: Vec<Vec<i64>> = pipe.query(con).unwrap();
    assert_eq!(tx, vec![vec![1, 1], vec![1, 2], vec![0, 2], vec![0, 2]]);
    let script = "return redis.call('SLIDINGWINDOW.CHECK', KEYS[1], ARGV[1], ARGV[2], ARGV[3])";
    let r: Vec<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg(k("lua"))
        .arg(1)
        .arg(60)
        .arg(100)
        .query(con)
        .unwrap();
    assert_eq!(r, vec![1, 1]);
    let r: Vec<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg(k("lua"))
        .arg(1)
        .arg(60)
        .arg(100)
        .query(con)
        .unwrap();
    assert_eq!(r, vec![0, 1]);
    let r: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg(k("str"))
        .arg(1)
        .arg(60)
        .arg(100)
        .query(con);
    assert!(r.is_err());
    // Introspection.
    let _: String = redis::cmd("INFO").arg("slidingwindow").query(con).unwrap();
    let _: redis::Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(c)
        .arg(p)
        .query(con)
        .unwrap();
    let _: redis::Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .arg(c)
        .arg(p)
        .query(con)
        .unwrap();
    let _: redis::Value = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg(c)
        .arg(&key)
        .arg(1)
        .arg(1)
        .query(con)
        .unwrap();
    // Overwritten and deleted states.
    let _: () = redis::cmd("DEL").arg(&key).arg(k("tx")).query(con).unwrap();
}

/// valgrind log records: runs of lines between blank `==pid== ` lines.
fn records(log: &str) -> Vec<String> {
    let mut out = vec![];
    let mut cur = String::new();
    for line in log.lines() {
        let body = line.split_once("== ").map(|x| x.1).unwrap_or("");
        if body.trim().is_empty() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push_str(body);
            cur.push('\n');
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn leaked_bytes(record: &str) -> u64 {
    // "1,152 bytes in 2 blocks are definitely lost in loss record ..."
    record
        .split_whitespace()
        .next()
        .unwrap_or("0")
        .replace(',', "")
        .parse()
        .unwrap_or(0)
}

#[test]
fn memcheck_redis() {
    if Command::new("valgrind")
        .arg("--version")
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        eprintln!("SKIPPED memcheck_redis: valgrind is not installed (apt-get install valgrind)");
        return;
    }
    let t0 = Instant::now();
    let mut v = start();
    let started = t0.elapsed();
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{}/", v.port))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(10))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    for r in 0..ROUNDS {
        workload(&mut con, r);
    }
    let info: String = redis::cmd("INFO")
        .arg("slidingwindow")
        .query(&mut con)
        .unwrap();
    let calls: Vec<&str> = info
        .lines()
        .filter(|l| l.starts_with("slidingwindow_"))
        .collect();
    let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut con);
    let mut child = v.child.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("redis-server under valgrind did not exit within 120 s of SHUTDOWN");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = v.log();
    assert!(
        log.contains("ERROR SUMMARY"),
        "valgrind did not finish its report ({status}):\n{log}"
    );
    let recs = records(&log);
    let module = |r: &str| {
        r.contains("libredis_slidingwindow") || r.contains(".rs:") || r.contains("slidingwindow")
    };
    // Any memcheck error other than a leak report fails the test, wherever it is.
    let errors: Vec<&String> = recs
        .iter()
        .filter(|r| {
            let first = r.lines().next().unwrap_or("");
            first.starts_with("Invalid ")
                || first.starts_with("Mismatched free")
                || first.contains("uninitialised")
                || first.starts_with("Source and destination overlap")
                || first.contains("fishy")
                || first.starts_with("Process terminating")
        })
        .collect();
    assert!(
        errors.is_empty(),
        "memcheck errors:\n{}",
        errors
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let definite: Vec<&String> = recs
        .iter()
        .filter(|r| {
            r.lines()
                .next()
                .unwrap_or("")
                .contains("definitely lost in loss record")
        })
        .collect();
    let (load, serving): (Vec<&String>, Vec<&String>) = definite
        .iter()
        .filter(|r| module(r))
        .partition(|r| r.contains("RedisModule_OnLoad"));
    assert!(
        serving.is_empty(),
        "the module leaks while serving commands:\n{}",
        serving
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let load_bytes: u64 = load.iter().map(|r| leaked_bytes(r)).sum();
    let others: u64 = definite
        .iter()
        .filter(|r| !module(r))
        .map(|r| leaked_bytes(r))
        .sum();
    let summary: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("definitely lost:")
                || l.contains("ERROR SUMMARY")
                || l.contains("total heap usage")
        })
        .map(|l| l.split_once("== ").map(|x| x.1).unwrap_or(l))
        .collect();
    eprintln!(
        "memcheck: redis-server up under valgrind in {started:?}; {ROUNDS} workload rounds ({}); exit {status}; {:?}\n  {}\n  module load-time leak: {load_bytes} bytes in {} records; leaks outside the module: {others} bytes; no invalid access, no uninitialised use",
        calls.join(" "),
        t0.elapsed(),
        summary.join("\n  "),
        load.len()
    );
    assert!(
        load_bytes == 0,
        "the module leaks {load_bytes} bytes at load:\n{}",
        load.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}
