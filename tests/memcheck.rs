//! Memory safety: the server with the module loaded, run under `valgrind --tool=memcheck`,
//! through a short workload that takes every path of the module — every argument error,
//! WRONGTYPE on each kind of foreign value, allowed and denied CHECKs, DETAILS, PEEK, MS,
//! time going backwards, a window change, a count crossing a varint boundary (the value
//! changes length), a new key, an expired key, more than 12 arguments, MULTI/EXEC, EVAL,
//! INFO, COMMAND INFO/DOCS — repeated so that a leak per call would show as many blocks.
//! Then SHUTDOWN and valgrind's log is read:
//!
//! * no memcheck error of any kind (invalid read/write/free, uninitialised values...);
//! * no block definitely lost, anywhere in the process. One exception, named: a server
//!   that unloads its modules at shutdown (Valkey 9.1 does, and says so in its log)
//!   makes the allocations the module keeps for the life of the process, made while it
//!   loads, unreachable; those are listed, and must come from the module's load.
//!
//! On Redis 7.0, Valkey 8.1 and Valkey 9.1. Not on Redis 8.2: its binary links jemalloc
//! statically (`je_malloc`), which valgrind cannot replace, so it would see almost no
//! heap; the test checks that valgrind tracked the heap (at least 10,000 allocations).
//! Debian's redis-server links the shared libjemalloc; `--soname-synonyms` makes
//! valgrind replace that malloc, so every allocation (the module allocates through
//! RedisModule_Alloc) is tracked. The Valkey wheels use the C library's malloc.
//!
//! valgrind is required (`make test` installs it). Setting SLIDINGWINDOW_SKIP_MEMCHECK
//! to a non-empty value skips this test, and says so on the terminal and at the end of
//! `make test`.

mod support;

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};
use support::{sw, Kind, Server, CHECK, PEEK, REFUND};

const MAX: u64 = (1 << 53) - 1;

/// The workload runs this many times.
const ROUNDS: usize = 12;

#[test]
fn redis7() {
    memcheck(Kind::Redis7);
}

#[test]
fn valkey8() {
    memcheck(Kind::Valkey8);
}

#[test]
fn valkey9() {
    memcheck(Kind::Valkey9);
}

/// The server under `valgrind --tool=memcheck`, its report in `valgrind.log` in the
/// server's directory.
fn start(kind: Kind) -> Server {
    Server::start_under(
        kind,
        &[
            "--appendonly",
            "yes",
            "--appendfsync",
            "no",
            "--notify-keyspace-events",
            "KEA",
        ],
        |dir| {
            [
                "valgrind",
                "--tool=memcheck",
                "--leak-check=full",
                "--show-leak-kinds=definite",
                "--errors-for-leak-kinds=definite",
                "--num-callers=40",
                // Stacks through the module stay readable after the server unloads it.
                "--keep-debuginfo=yes",
                "--soname-synonyms=somalloc=libjemalloc.so*",
            ]
            .map(String::from)
            .into_iter()
            .chain([format!("--log-file={}", dir.join("valgrind.log").display())])
            .collect()
        },
    )
}

fn valgrind_log(s: &Server) -> String {
    std::fs::read_to_string(s.dir.join("valgrind.log")).unwrap_or_default()
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
    let (c, p) = (CHECK, PEEK);
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
    let a = |now| sw(&key).limit(3).window(60).now(now);
    assert_eq!(a(100).check(con), [1, 1]);
    // Allowed, count 2, limit 3, remaining 1.
    assert_eq!(a(101).details().check(con)[..4], [1, 2, 3, 1]);
    assert_eq!(a(102).check(con), [1, 3]);
    assert_eq!(a(103).details().check(con)[..4], [0, 3, 3, 0]);
    assert_eq!(a(104).peek(con), [0, 3]);
    let missing = sw(k("missing")).limit(3).window(60).now(104);
    assert_eq!(missing.details().peek(con)[..4], [1, 1, 3, 2]);
    // Time going backwards, next window, window change, unit change.
    assert_eq!(a(10).check(con), [0, 3]);
    assert_eq!(a(150).check(con)[0], 1);
    assert_eq!(sw(&key).limit(3).window(30).now(150).check(con), [1, 1]);
    let in_ms = sw(&key).limit(3).window(30_000).now(150_000).ms().cost(2);
    assert_eq!(in_ms.check(con), [1, 2]);
    // A count crossing the 1-byte varint boundary (127 -> 128): the value grows.
    let v = |limit| sw(k("varint")).limit(limit).window(60).now(100);
    assert_eq!(v(1000).cost(127).check(con), [1, 127]);
    assert_eq!(v(1000).check(con), [1, 128]);
    // REFUND: the value shrinks back over the boundary (128 -> 127), same-length
    // refunds, a key without expiry (replicated as a plain SET), several windows, a
    // refund with nothing to give back, errors and WRONGTYPE.
    let refund = |con: &mut redis::Connection, call: support::Sw| {
        call.cmd(REFUND).query::<redis::Value>(con).unwrap()
    };
    let ints = |v: &[i64]| redis::Value::Array(v.iter().map(|&i| redis::Value::Int(i)).collect());
    assert_eq!(refund(con, v(1000)), ints(&[1, 128]));
    assert_eq!(refund(con, v(1000).cost(2)), ints(&[1, 127]));
    let _: () = redis::cmd("PERSIST").arg(k("varint")).query(con).unwrap();
    assert_eq!(refund(con, v(1000)), ints(&[1, 125]));
    let two = || {
        sw(k("two"))
            .limit(10)
            .window(60)
            .now(100)
            .and_limit(50, 3600)
    };
    assert_eq!(two().cost(3).check(con), [1, 3]);
    match refund(con, two().details()) {
        redis::Value::Array(items) => assert_eq!(items.len(), 7),
        other => panic!("{other:?}"),
    }
    let none = sw(k("none")).limit(3).window(60).now(100);
    assert_eq!(refund(con, none), ints(&[1, 1]));
    err(con, &[REFUND.as_bytes(), kb, b"10"], "ERR");
    err(
        con,
        &[REFUND.as_bytes(), kb, b"10", b"60", b"COST", b"0"],
        "ERR",
    );
    err(
        con,
        &[REFUND.as_bytes(), k("str").as_bytes(), b"10", b"60"],
        "WRONGTYPE",
    );
    assert_eq!(v(MAX).cost(9_000_000_000_000_000).check(con)[0], 1);
    // Largest values.
    let big = sw(k("big"))
        .limit(MAX)
        .window(MAX / 1000)
        .now(MAX)
        .cost(MAX);
    assert_eq!(big.check(con)[0], 1);
    let big_ms = sw(k("bigms"))
        .limit(MAX)
        .window(MAX)
        .now(MAX)
        .ms()
        .details();
    assert_eq!(big_ms.check(con)[0], 1);
    // Server time (no `now`) and an expired key: a 1 ms window expires in 2 ms.
    let e = sw(k("expiring")).limit(5).window(1).ms();
    assert_eq!(e.check(con), [1, 1]);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(e.check(con), [1, 1]);
    assert_eq!(sw(k("clock")).limit(5).window(60).check(con), [1, 1]);
    // MULTI/EXEC and a script.
    let tx = sw(k("tx")).limit(2).window(60).now(100);
    let mut pipe = redis::pipe();
    pipe.atomic()
        .add_command(tx.cmd(CHECK))
        .add_command(tx.cmd(CHECK))
        .add_command(tx.cmd(CHECK))
        .add_command(tx.cmd(PEEK));
    let replies: Vec<Vec<i64>> = pipe.query(con).unwrap();
    assert_eq!(
        replies,
        vec![vec![1, 1], vec![1, 2], vec![0, 2], vec![0, 2]]
    );
    let script = "return redis.call('SLIDINGWINDOW.CHECK', KEYS[1], ARGV[1], ARGV[2], ARGV[3])";
    // KEYS[1] and ARGV: the arguments from the key on.
    let eval = |con: &mut redis::Connection, call: support::Sw| {
        redis::cmd("EVAL")
            .arg(script)
            .arg(1)
            .arg(call.args())
            .query::<Vec<i64>>(con)
    };
    let lua = sw(k("lua")).limit(1).window(60).now(100);
    assert_eq!(eval(con, lua.clone()).unwrap(), [1, 1]);
    assert_eq!(eval(con, lua).unwrap(), [0, 1]);
    assert!(eval(con, sw(k("str")).limit(1).window(60).now(100)).is_err());
    // Introspection.
    let _: String = redis::cmd("INFO").arg("slidingwindow").query(con).unwrap();
    for sub in ["INFO", "DOCS"] {
        let _: redis::Value = redis::cmd("COMMAND")
            .arg(sub)
            .arg(CHECK)
            .arg(PEEK)
            .arg(REFUND)
            .query(con)
            .unwrap();
    }
    let _: redis::Value = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg(CHECK)
        .arg(a(1).args())
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

/// What valgrind says about the run, from its log.
struct Report {
    /// Memcheck errors other than leaks (invalid access, uninitialised values...).
    errors: Vec<String>,
    /// Definitely lost records allocated inside the module's RedisModule_OnLoad, and
    /// all the others.
    lost_at_load: Vec<String>,
    lost_otherwise: Vec<String>,
    heap_allocs: u64,
}

fn read_report(log: &str) -> Report {
    let recs = records(log);
    let errors = recs
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
        .cloned()
        .collect();
    let (lost_at_load, lost_otherwise) = recs
        .iter()
        .filter(|r| {
            r.lines()
                .next()
                .unwrap_or("")
                .contains("definitely lost in loss record")
        })
        .cloned()
        .partition(|r| r.contains("RedisModule_OnLoad"));
    // "total heap usage: 44,210 allocs, 28,271 frees, ..."
    let heap_allocs = log
        .lines()
        .find_map(|l| l.split_once("total heap usage: "))
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map(|n| n.replace(',', "").parse().unwrap_or(0))
        .unwrap_or(0);
    Report {
        errors,
        lost_at_load,
        lost_otherwise,
        heap_allocs,
    }
}

/// Whether valgrind is installed; if not, whether its absence was allowed (printed).
fn valgrind_available() -> bool {
    let installed = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if installed {
        return true;
    }
    let skip = std::env::var("SLIDINGWINDOW_SKIP_MEMCHECK").unwrap_or_default();
    assert!(
        !skip.is_empty(),
        "valgrind is not installed: `make deps-valgrind` (apt-get install valgrind) installs \
         it; set SLIDINGWINDOW_SKIP_MEMCHECK=1 to skip this test knowingly"
    );
    // Straight to the terminal, past the test harness's capture.
    let _ = writeln!(
        std::io::stderr(),
        "memcheck SKIPPED: valgrind is not installed and SLIDINGWINDOW_SKIP_MEMCHECK={skip}"
    );
    false
}

fn memcheck(kind: Kind) {
    if !valgrind_available() {
        return;
    }
    let t0 = Instant::now();
    let mut v = start(kind);
    let started = t0.elapsed();
    let mut con = v.connection();
    con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    for r in 0..ROUNDS {
        workload(&mut con, r);
    }
    let calls: Vec<String> = support::info(&mut con, "slidingwindow")
        .lines()
        .filter(|l| l.starts_with("slidingwindow_"))
        .map(str::to_string)
        .collect();
    let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut con);
    let status = v
        .wait_exit(Duration::from_secs(120))
        .expect("the server under valgrind exits within 120 s of SHUTDOWN");
    let log = valgrind_log(&v);
    assert!(
        log.contains("ERROR SUMMARY"),
        "valgrind did not finish its report ({status}):\n{log}"
    );
    let report = read_report(&log);
    assert!(
        report.heap_allocs >= 10_000,
        "valgrind saw only {} heap allocations: it does not track this server's malloc",
        report.heap_allocs
    );
    assert!(
        report.errors.is_empty(),
        "memcheck errors:\n{}",
        report.errors.join("\n")
    );
    assert!(
        report.lost_otherwise.is_empty(),
        "definitely lost while serving or at exit:\n{}",
        report.lost_otherwise.join("\n")
    );
    let unloaded = v.log().contains("Module slidingwindow unloaded");
    let load_bytes: u64 = report.lost_at_load.iter().map(|r| leaked_bytes(r)).sum();
    if !unloaded {
        assert!(
            report.lost_at_load.is_empty(),
            "the module leaks {load_bytes} bytes at load:\n{}",
            report.lost_at_load.join("\n")
        );
    }
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
        "{kind} memcheck: up under valgrind in {started:?}; {ROUNDS} workload rounds ({}); exit {status}; {:?}\n  {}\n  no invalid access, no uninitialised use, nothing lost while serving; {}",
        calls.join(" "),
        t0.elapsed(),
        summary.join("\n  "),
        if unloaded {
            format!(
                "the server unloaded the module at exit: {} records, {load_bytes} bytes with what they point to, that the module allocated at load and keeps, reported lost",
                report.lost_at_load.len()
            )
        } else {
            "nothing lost at load".to_string()
        }
    );
}
