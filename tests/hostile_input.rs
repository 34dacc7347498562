//! Hostile input, on every server: 100,000 random argument vectors per server (random
//! arity, random bytes, huge and negative numbers, floats, signs and spaces, NULs,
//! non-ASCII digits, long arguments, options repeated, in any order and any case)
//! against CHECK, PEEK and REFUND, pipelined, on a server that also holds valid limiter keys and
//! foreign keys (strings, an int-encoded and a shared-integer string, near-miss 0xA1
//! strings, an empty string, list, hash, set, zset, a key with a TTL).
//!
//! Each vector is sent as `PEXPIRETIME k, DUMP k, <command>, DUMP k, PEXPIRETIME k`, so
//! every reply is checked against the key's bytes and expiry just before and after it:
//!
//! * the server stays up (PING after every batch, process alive at the end);
//! * every reply is an array of 2 or 6 integers, an `ERR` naming a known problem, or
//!   `WRONGTYPE` (on a foreign key only) — never an internal error;
//! * an error reply, a PEEK and a denied CHECK leave the key exactly as it was (bytes
//!   and expiry); an allowed CHECK leaves a valid state with an expiry; a REFUND leaves
//!   the key as it was or a valid state with the same expiry;
//! * a well-formed vector on a limiter or missing key always succeeds;
//! * the foreign keys end the run exactly as they started (type, encoding, bytes, TTL).
//!
//! Random windows can be 1 ms long, so a key can expire by the server's clock between
//! the DUMP before a call and the DUMP after it. Each batch is framed by TIME, and a key
//! found gone is accepted only when its expiry (known before the call, or two windows
//! after an allowed CHECK) fell within the batch.

#[macro_use]
mod support;

use redis::Value;
use std::time::Instant;
use support::{server_ms, sw, Kind, Rng, Server};

const VECTORS: usize = 100_000;
const BATCH: usize = 1_000;

on_every_server!(hostile_input);

fn hostile_input(kind: Kind) {
    hostile(kind, 0xBAD_0001 + kind as u64);
}

const LIMITER_KEYS: [&str; 4] = ["lim:s", "lim:ms", "lim:big", "lim:full"];
const FOREIGN_KEYS: [&str; 12] = [
    "f:str",
    "f:int",
    "f:shared",
    "f:a1-flags",
    "f:a1-window0",
    "f:a1-overlong",
    "f:a1-long",
    "f:empty",
    "f:list",
    "f:hash",
    "f:set",
    "f:zset",
];
const FOREIGN_TTL: &str = "f:ttl";

fn setup(con: &mut redis::Connection) {
    const MAX: u64 = (1 << 53) - 1;
    const MAX_WINDOW_SECONDS: u64 = MAX / 1000;
    for call in [
        sw("lim:s").limit(10).window(3600).now(1000),
        sw("lim:ms").limit(10).window(3_600_000).now(1_000_000).ms(),
        sw("lim:big")
            .limit(MAX)
            .window(MAX_WINDOW_SECONDS)
            .now(MAX_WINDOW_SECONDS)
            .cost(MAX),
        sw("lim:full").limit(1).window(3600).now(500),
    ] {
        assert_eq!(call.check(con)[0], 1, "{call:?}");
    }
    let set = |con: &mut redis::Connection, k: &str, v: &[u8]| {
        let _: () = redis::cmd("SET").arg(k).arg(v).query(con).unwrap();
    };
    set(con, "f:str", b"hello");
    set(con, "f:int", b"123456");
    set(con, "f:shared", b"7");
    set(con, "f:a1-flags", &[0xA1, 0x02, 0x01, 0x00, 0x00, 0x00]);
    set(con, "f:a1-window0", &[0xA1, 0x00, 0x00, 0x00, 0x00, 0x00]);
    set(
        con,
        "f:a1-overlong",
        &[0xA1, 0x00, 0x81, 0x00, 0x00, 0x00, 0x00],
    );
    set(con, "f:a1-long", &[0xA1; 40]);
    set(con, "f:empty", b"");
    set(con, FOREIGN_TTL, b"expiring");
    let _: () = redis::cmd("PEXPIRE")
        .arg(FOREIGN_TTL)
        .arg(86_400_000)
        .query(con)
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("f:list")
        .arg("a")
        .arg("b")
        .query(con)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("f:hash")
        .arg("a")
        .arg("1")
        .query(con)
        .unwrap();
    let _: () = redis::cmd("SADD").arg("f:set").arg("a").query(con).unwrap();
    let _: () = redis::cmd("ZADD")
        .arg("f:zset")
        .arg(1)
        .arg("a")
        .query(con)
        .unwrap();
}

/// Type, encoding, bytes (DUMP) and absolute expiry of every foreign key.
fn foreign_snapshot(con: &mut redis::Connection) -> Vec<(String, String, Vec<u8>, i64)> {
    FOREIGN_KEYS
        .iter()
        .chain([FOREIGN_TTL].iter())
        .map(|k| {
            let t: String = redis::cmd("TYPE").arg(*k).query(con).unwrap();
            let enc: String = redis::cmd("OBJECT")
                .arg("ENCODING")
                .arg(*k)
                .query(con)
                .unwrap();
            let dump: Vec<u8> = redis::cmd("DUMP").arg(*k).query(con).unwrap();
            let at: i64 = redis::cmd("PEXPIRETIME").arg(*k).query(con).unwrap();
            (format!("{k} {t}"), enc, dump, at)
        })
        .collect()
}

fn case(rng: &mut Rng, word: &str) -> Vec<u8> {
    word.bytes()
        .map(|b| {
            if rng.range(0, 1) == 0 {
                b.to_ascii_lowercase()
            } else {
                b.to_ascii_uppercase()
            }
        })
        .collect()
}

/// One hostile argument.
fn token(rng: &mut Rng) -> Vec<u8> {
    const SPECIAL: [&str; 41] = [
        "0",
        "1",
        "-1",
        "-0",
        "+1",
        " 1",
        "1 ",
        "01",
        "0x10",
        "1e3",
        "1.5",
        "1.",
        ".5",
        "inf",
        "-inf",
        "nan",
        "9007199254740991",
        "9007199254740992",
        "9007199254740",
        "9007199254741",
        "18446744073709551615",
        "18446744073709551616",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "99999999999999999999999999999999999999",
        "1_000",
        "1,5",
        "\u{0661}\u{0662}",
        "\u{FF11}",
        "٣",
        "1\u{0}",
        "\u{0}",
        "COST",
        "MS",
        "DETAILS",
        "NX",
        "EX",
        "PXAT",
        "*",
        "LIMIT",
    ];
    match rng.range(0, 15) {
        0..=2 => rng.range(0, 100).to_string().into_bytes(),
        3 => rng.range(0, (1 << 53) - 1).to_string().into_bytes(),
        4 => rng.next_u64().to_string().into_bytes(),
        5 => format!("-{}", rng.range(0, 1 << 40)).into_bytes(),
        6 => format!("{}.{}", rng.range(0, 1000), rng.range(0, 99)).into_bytes(),
        7..=8 => SPECIAL[rng.range(0, SPECIAL.len() as u64 - 1) as usize]
            .as_bytes()
            .to_vec(),
        9 => case(rng, "COST"),
        10 => case(rng, "MS"),
        11 => {
            let word = ["DETAILS", "LIMIT"][rng.range(0, 1) as usize];
            case(rng, word)
        }
        12 => (0..rng.range(0, 24))
            .map(|_| rng.next_u64() as u8)
            .collect(),
        13 => (0..rng.range(0, 60))
            .map(|_| b'0' + rng.range(0, 9) as u8)
            .collect(),
        _ => {
            let len = if rng.range(0, 200) == 0 {
                rng.range(10_000, 300_000)
            } else {
                rng.range(33, 300)
            };
            (0..len).map(|_| b'A' + rng.range(0, 25) as u8).collect()
        }
    }
}

/// A well-formed argument list (after the key): must succeed on a non-foreign key.
/// A value in `lo..=` one of three upper bounds (picked at random).
fn pick(rng: &mut Rng, lo: u64, highs: [u64; 3]) -> u64 {
    let hi = highs[rng.range(0, 2) as usize];
    rng.range(lo, hi)
}

fn well_formed(rng: &mut Rng) -> Vec<Vec<u8>> {
    let millis = rng.range(0, 3) == 0;
    let max_window: u64 = if millis {
        (1 << 53) - 1
    } else {
        ((1 << 53) - 1) / 1000
    };
    let mut args = vec![
        pick(rng, 0, [10, 1000, (1 << 53) - 1])
            .to_string()
            .into_bytes(),
        pick(rng, 1, [100, 100_000, max_window])
            .to_string()
            .into_bytes(),
    ];
    if rng.range(0, 2) != 0 {
        args.push(
            pick(rng, 0, [2_000, 10_000_000, (1 << 53) - 1])
                .to_string()
                .into_bytes(),
        );
    }
    let mut options: Vec<Vec<Vec<u8>>> = vec![];
    if rng.range(0, 1) == 0 {
        let cost = pick(rng, 1, [3, 1000, (1 << 53) - 1]);
        options.push(vec![case(rng, "COST"), cost.to_string().into_bytes()]);
    }
    if millis {
        options.push(vec![case(rng, "MS")]);
    }
    if rng.range(0, 1) == 0 {
        options.push(vec![case(rng, "DETAILS")]);
    }
    // Up to two more limits, each with a window of its own.
    let mut windows = vec![args[1].clone()];
    for _ in 0..rng.range(0, 2) {
        let window = pick(rng, 1, [100, 100_000, max_window])
            .to_string()
            .into_bytes();
        if !windows.contains(&window) {
            let limit = pick(rng, 0, [10, 1000, (1 << 53) - 1])
                .to_string()
                .into_bytes();
            options.push(vec![case(rng, "LIMIT"), limit, window.clone()]);
            windows.push(window);
        }
    }
    while !options.is_empty() {
        let o = options.remove(rng.range(0, options.len() as u64 - 1) as usize);
        args.extend(o);
    }
    args
}

struct Vector {
    command: Vec<u8>,
    key: Option<Vec<u8>>,
    args: Vec<Vec<u8>>,
    /// Built well-formed: must succeed unless the key is foreign.
    well_formed: bool,
}

fn vector(rng: &mut Rng) -> Vector {
    let name = match rng.range(0, 5) {
        0..=1 => "SlidingWindow.Peek",
        2 => "SlidingWindow.Refund",
        _ => "SlidingWindow.Check",
    };
    let command = case(rng, name);
    let key: Vec<u8> = match rng.range(0, 9) {
        0..=2 => LIMITER_KEYS[rng.range(0, 3) as usize].as_bytes().to_vec(),
        3..=5 => FOREIGN_KEYS[rng.range(0, FOREIGN_KEYS.len() as u64 - 1) as usize]
            .as_bytes()
            .to_vec(),
        6 => FOREIGN_TTL.as_bytes().to_vec(),
        7..=8 => format!("new:{}", rng.range(0, 50)).into_bytes(),
        _ => (0..rng.range(0, 12))
            .map(|_| rng.next_u64() as u8)
            .collect(),
    };
    match rng.range(0, 9) {
        0..=2 => Vector {
            command,
            key: Some(key),
            args: well_formed(rng),
            well_formed: true,
        },
        3..=4 => {
            // Well-formed, then one argument replaced, inserted or dropped.
            let mut args = well_formed(rng);
            let at = rng.range(0, args.len() as u64) as usize;
            match rng.range(0, 2) {
                0 if at < args.len() => args[at] = token(rng),
                1 => args.insert(at, token(rng)),
                _ if at < args.len() => {
                    args.remove(at);
                }
                _ => args.push(token(rng)),
            }
            Vector {
                command,
                key: Some(key),
                args,
                well_formed: false,
            }
        }
        5 => {
            // Too few arguments, down to none at all.
            let n = rng.range(0, 2) as usize;
            let args: Vec<Vec<u8>> = (0..n.saturating_sub(1)).map(|_| token(rng)).collect();
            Vector {
                command,
                key: (n > 0).then_some(key),
                args,
                well_formed: false,
            }
        }
        _ => {
            let n = rng.range(0, 14) as usize;
            Vector {
                command,
                key: Some(key),
                args: (0..n).map(|_| token(rng)).collect(),
                well_formed: false,
            }
        }
    }
}

const KNOWN_ERRORS: [&str; 10] = [
    "wrong number of arguments",
    " must be an integer from ",
    "LIMIT needs a limit and a window",
    "two limits have the same window",
    "limits per call (the positional one and each LIMIT)",
    "COST needs a value",
    "COST given more than once",
    "MS given more than once",
    "DETAILS given more than once",
    "unknown option '",
];

fn is_foreign(key: &[u8]) -> bool {
    FOREIGN_KEYS
        .iter()
        .chain([FOREIGN_TTL].iter())
        .any(|k| k.as_bytes() == key)
}

/// Whether a key the after-DUMP found gone may have expired by the server's clock
/// during a batch that ran from `start` to `end` (ms), given its expiry before the call
/// (`PEXPIRETIME`) or, after an allowed CHECK, the window the call set it by.
fn expired_in_batch(
    before_expiry: &Value,
    allowed_window_ms: Option<u64>,
    start: u64,
    end: u64,
) -> bool {
    match allowed_window_ms {
        // Set to the call's time (>= start) + two windows, gone by `end`.
        Some(w) => start + 2 * w <= end,
        None => matches!(*before_expiry, Value::Int(t) if t > 0 && t as u64 <= end),
    }
}

fn ints(items: &[Value]) -> bool {
    items.iter().all(|i| matches!(i, Value::Int(_)))
}

/// The shape of a CHECK or PEEK reply.
fn well_shaped(items: &[Value]) -> bool {
    match items.len() {
        2 | 6 => ints(items),
        7 => {
            ints(&items[..6])
                && matches!(&items[6], Value::Array(limits) if limits.len() >= 2
                    && limits.iter().all(|l| matches!(l, Value::Array(o) if o.len() == 6 && ints(o))))
        }
        _ => false,
    }
}

/// The longest window, in ms, of a call the module accepted (`args` after the key):
/// the positional one or one of a LIMIT block.
fn window_ms(args: &[Vec<u8>]) -> u64 {
    let number = |a: &[u8]| -> u64 { std::str::from_utf8(a).unwrap().parse().unwrap() };
    let limits = (0..args.len()).filter(|&i| args[i].eq_ignore_ascii_case(b"LIMIT"));
    let longest = limits
        .map(|i| number(&args[i + 2]))
        .fold(number(&args[1]), u64::max);
    let ms = args.iter().any(|a| a.eq_ignore_ascii_case(b"MS"));
    if ms {
        longest
    } else {
        longest * 1000
    }
}

fn hostile(kind: Kind, seed: u64) {
    let t0 = Instant::now();
    let mut server = Server::start(kind, &[]);
    let mut con = server.connection();
    setup(&mut con);
    let foreign_before = foreign_snapshot(&mut con);
    let mut rng = Rng::new(seed);
    let (mut arrays, mut errs, mut wrongtypes) = (0u64, 0u64, 0u64);
    let (mut unchanged_checked, mut expired, mut refunds_giving) = (0u64, 0u64, 0u64);
    for batch in 0..VECTORS / BATCH {
        let vectors: Vec<Vector> = (0..BATCH).map(|_| vector(&mut rng)).collect();
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut sent = 0;
        for v in &vectors {
            let command = std::str::from_utf8(&v.command).unwrap();
            if let Some(k) = &v.key {
                pipe.cmd("PEXPIRETIME").arg(k).cmd("DUMP").arg(k);
                pipe.cmd(command).arg(k).arg(&v.args);
                pipe.cmd("DUMP").arg(k).cmd("PEXPIRETIME").arg(k);
                sent += 5;
            } else {
                pipe.cmd(command);
                sent += 1;
            }
        }
        let start = server_ms(&mut con);
        let got: Vec<Value> = pipe.query(&mut con).unwrap_or_else(|e| {
            panic!("batch {batch}: connection lost: {e}\n{}", server.log_tail())
        });
        let end = server_ms(&mut con);
        let mut it = support::replies(got, sent, "batch").into_iter();
        let mut next = || it.next().unwrap();
        for v in &vectors {
            let show = || {
                let args: Vec<String> = v
                    .args
                    .iter()
                    .map(|a| String::from_utf8_lossy(&a[..a.len().min(40)]).to_string())
                    .collect();
                format!(
                    "batch {batch}: {} {:?} {args:?}",
                    String::from_utf8_lossy(&v.command),
                    v.key
                        .as_ref()
                        .map(|k| String::from_utf8_lossy(k).to_string())
                )
            };
            // (DUMP, PEXPIRETIME) before and after the call.
            let (before, reply, after) = if v.key.is_some() {
                let (t0, d0, r, d1, t1) = (next(), next(), next(), next(), next());
                (Some((d0, t0)), r, Some((d1, t1)))
            } else {
                (None, next(), None)
            };
            let foreign = v.key.as_deref().map(is_foreign).unwrap_or(false);
            let is_check = v.command.eq_ignore_ascii_case(b"SLIDINGWINDOW.CHECK");
            let is_refund = v.command.eq_ignore_ascii_case(b"SLIDINGWINDOW.REFUND");
            let mut may_change = false;
            match &reply {
                Value::Array(items) => {
                    arrays += 1;
                    assert!(!foreign, "{}: success on a foreign key: {reply:?}", show());
                    // 2 or 6 integers; with DETAILS and several limits, a 7th element:
                    // one array of 6 integers per limit.
                    assert!(well_shaped(items), "{}: {reply:?}", show());
                    assert!(
                        matches!(items[0], Value::Int(0) | Value::Int(1)),
                        "{}: {reply:?}",
                        show()
                    );
                    may_change = is_check && items[0] == Value::Int(1);
                }
                Value::ServerError(e) => {
                    let detail = e.details().unwrap_or("");
                    match e.code() {
                        "WRONGTYPE" => {
                            wrongtypes += 1;
                            assert!(foreign, "{}: WRONGTYPE on a limiter or missing key", show());
                        }
                        "ERR" => {
                            errs += 1;
                            assert!(
                                KNOWN_ERRORS.iter().any(|k| detail.contains(k)),
                                "{}: unexpected error: {e:?}",
                                show()
                            );
                        }
                        _ => panic!("{}: unexpected error: {e:?}", show()),
                    }
                    assert!(
                        !v.well_formed || (foreign && e.code() == "WRONGTYPE"),
                        "{}: well-formed vector refused: {e:?}",
                        show()
                    );
                }
                other => panic!("{}: unexpected reply {other:?}", show()),
            }
            let (Some(b), Some(a)) = (before, after) else {
                continue;
            };
            // Gone by the DUMP or by the PEXPIRETIME after it (either may see it expire).
            let gone = a.0 == Value::Nil || a.1 == Value::Int(-2);
            let allowed_window = may_change.then(|| window_ms(&v.args));
            if gone && !foreign && expired_in_batch(&b.1, allowed_window, start, end) {
                expired += 1;
            } else if is_refund && matches!(reply, Value::Array(_)) && a != b {
                // A refund that gave something back: a valid state, the expiry kept.
                refunds_giving += 1;
                assert!(matches!(a.0, Value::BulkString(_)), "{}: no state", show());
                assert_eq!(a.1, b.1, "{}: a refund moved the expiry", show());
            } else if may_change {
                // A valid state with an expiry.
                assert!(
                    matches!(a.0, Value::BulkString(_)),
                    "{}: no state after an allowed CHECK",
                    show()
                );
                assert!(
                    matches!(a.1, Value::Int(t) if t > 0),
                    "{}: no expiry after an allowed CHECK: {:?}",
                    show(),
                    a.1
                );
            } else {
                unchanged_checked += 1;
                assert_eq!(
                    b,
                    a,
                    "{}: key changed by a reply that must not change it: {reply:?}",
                    show()
                );
            }
        }
        let pong: String = redis::cmd("PING").query(&mut con).expect("PING");
        assert_eq!(pong, "PONG");
    }
    assert!(server.alive(), "the server died");
    // Same type, bytes and expiry. (The internal encoding is compared apart: the
    // module's StringDMA read turns an int or embstr encoding into raw, same bytes.)
    let foreign_after = foreign_snapshot(&mut con);
    let strip = |s: &[(String, String, Vec<u8>, i64)]| -> Vec<(String, Vec<u8>, i64)> {
        s.iter()
            .map(|(k, _, d, t)| (k.clone(), d.clone(), *t))
            .collect()
    };
    assert_eq!(
        strip(&foreign_after),
        strip(&foreign_before),
        "a foreign key changed"
    );
    let reencoded: Vec<String> = foreign_before
        .iter()
        .zip(&foreign_after)
        .filter(|(b, a)| b.1 != a.1)
        .map(|(b, a)| format!("{} {}->{}", b.0, b.1, a.1))
        .collect();
    // The valid limiter keys are still valid states.
    for k in LIMITER_KEYS {
        if let Some(v) = support::get_raw(&mut con, k) {
            assert!(v[0] == 0xA1 || v[0] == 0xA2, "{k}: version byte {}", v[0]);
        }
    }
    let info = support::info(&mut con, "slidingwindow");
    eprintln!(
        "{kind}: {VECTORS} hostile vectors: {arrays} answered, {errs} ERR, {wrongtypes} WRONGTYPE; {unchanged_checked} replies checked to leave the key as it was, {refunds_giving} refunds that gave back with the expiry kept, {expired} keys expired by the clock during a batch; server up; {:?}\nforeign keys re-encoded (same bytes): {reencoded:?}\n{}",
        t0.elapsed(),
        info.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect::<Vec<_>>().join(" ")
    );
}
