//! Every argument error gets an ERR reply naming the argument, a foreign value gets
//! WRONGTYPE, and neither changes anything. Arguments are checked before the key is
//! touched: a bad call on a foreign key is an ERR, not WRONGTYPE.

#[macro_use]
mod support;

use support::{call, get_raw, pexpiretime, sw, Kind, Server, CHECK, PEEK};

on_every_server!(
    argument_errors_name_the_argument_and_change_nothing,
    a_key_holding_anything_else_is_wrongtype_and_left_untouched,
    arguments_are_checked_before_the_key_is_read,
);

const MAX: &str = "9007199254740991";

/// Arguments after the command name, `k` standing for the key, and the error each gets.
const ARGUMENT_ERRORS: &[(&[&str], &str)] = &[
    (&["k", "10"], "wrong number of arguments"),
    (&["k"], "wrong number of arguments"),
    (&["k", "-1", "60"], "limit must be an integer from 0 to"),
    (&["k", "1.5", "60"], "limit must be an integer"),
    (&["k", "9007199254740992", "60"], "limit must be an integer"),
    (
        &["k", "99999999999999999999999999", "60"],
        "limit must be an integer",
    ),
    (&["k", "", "60"], "limit must be an integer"),
    (
        &["k", "10", "0"],
        "window must be an integer from 1 to 9007199254740 seconds",
    ),
    (&["k", "10", "-5"], "window must be an integer"),
    (
        &["k", "10", "4611686018427387904"],
        "window must be an integer",
    ),
    (
        &["k", "10", "9007199254740992", "MS"],
        "window must be an integer from 1 to 9007199254740991 milliseconds",
    ),
    (&["k", "10", "60", "-1"], "now must be an integer from 0 to"),
    (&["k", "10", "60", "12.5"], "now must be an integer"),
    (
        &["k", "10", "60", "9007199254740992"],
        "now must be an integer",
    ),
    (&["k", "10", "60", "COST"], "COST needs a value"),
    (
        &["k", "10", "60", "COST", "0"],
        "cost must be an integer from 1 to",
    ),
    (
        &["k", "10", "60", "COST", "9223372036854775807"],
        "cost must be an integer",
    ),
    (&["k", "10", "60", "COST", "-3"], "cost must be an integer"),
    (
        &["k", "10", "60", "COST", "1", "COST", "1"],
        "COST given more than once",
    ),
    (&["k", "10", "60", "MS", "ms"], "MS given more than once"),
    (
        &["k", "10", "60", "DETAILS", "details"],
        "DETAILS given more than once",
    ),
    (&["k", "10", "60", "FOO"], "unknown option 'FOO'"),
    (&["k", "10", "60", "5", "6"], "unknown option '6'"),
    (&["k", "10", "60", "MS", "5"], "unknown option '5'"),
];

/// The error a call must get (panics if it succeeds).
fn err(c: &mut redis::Connection, command: &str, args: &[&str]) -> String {
    match call(c, command, args) {
        Ok(v) => panic!("{command} {args:?} answered {v:?}, expected an error"),
        Err(e) => support::error_text(&e),
    }
}

/// `ARGUMENT_ERRORS` with `key` in place of `k`.
fn on_key<'a>(args: &[&'a str], key: &'a str) -> Vec<&'a str> {
    args.iter()
        .map(|&a| if a == "k" { key } else { a })
        .collect()
}

fn argument_errors_name_the_argument_and_change_nothing(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    sw("k").limit(10).window(60).now(100).check(&mut c);
    let before = (get_raw(&mut c, "k"), pexpiretime(&mut c, "k"));
    for command in [CHECK, PEEK] {
        for (args, expected) in ARGUMENT_ERRORS {
            let e = err(&mut c, command, args);
            assert!(e.contains(expected), "{command} {args:?}: {e}");
            assert!(e.starts_with("ERR "), "{e}");
            let after = (get_raw(&mut c, "k"), pexpiretime(&mut c, "k"));
            assert_eq!(after, before, "{command} {args:?} changed the key");
        }
    }
    let e = err(&mut c, CHECK, &["k", "10", "60", "1e3"]);
    assert!(
        e.contains(&format!("now must be an integer from 0 to {MAX}")),
        "{e}"
    );
    // Nothing else was created by the failed calls.
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 1);
    assert!(s.log().lines().all(|l| !l.contains("panicked")));
}

/// Keys holding something the module did not write, and the commands that make them.
const FOREIGN: &[&[&str]] = &[
    &["SET", "text", "hello world"],
    &["SET", "int", "12345678"],
    &["SET", "empty", ""],
    &["SET", "almost", "\u{a1}\u{0}<\u{10}\u{3}\u{0}"],
    &["RPUSH", "list", "a"],
    &["HSET", "hash", "f", "v"],
    &["SADD", "set", "m"],
    &["PEXPIRE", "text", "86400000"],
];

/// The foreign keys, plus "damaged": a state with a byte flipped in its flags.
fn foreign_keys(c: &mut redis::Connection) -> Vec<&'static str> {
    for cmd in FOREIGN {
        let _: () = redis::cmd(cmd[0]).arg(&cmd[1..]).query(c).unwrap();
    }
    sw("damaged").limit(10).window(60).now(100).check(c);
    let mut bytes = get_raw(c, "damaged").unwrap();
    bytes[1] = 0x7f;
    let _: () = redis::cmd("SET")
        .arg("damaged")
        .arg(&bytes)
        .query(c)
        .unwrap();
    let mut keys: Vec<&str> = FOREIGN
        .iter()
        .filter(|cmd| cmd[0] != "PEXPIRE")
        .map(|cmd| cmd[1])
        .collect();
    keys.push("damaged");
    keys
}

/// Value (DUMP: type and bytes) and absolute expiry of each key. Not OBJECT ENCODING:
/// reading a foreign string of 6 to 34 bytes may turn its embstr/int representation
/// into raw, with the same value (documented in the README).
fn dump(c: &mut redis::Connection, keys: &[&str]) -> Vec<(Option<Vec<u8>>, i64)> {
    keys.iter()
        .map(|k| {
            let d: Option<Vec<u8>> = redis::cmd("DUMP").arg(k).query(c).unwrap();
            (d, pexpiretime(c, k))
        })
        .collect()
}

/// Runs `call(connection, command, key)` for CHECK and PEEK on every foreign key, then
/// checks that none of them changed.
fn on_each_foreign_key(kind: Kind, mut call: impl FnMut(&mut redis::Connection, &str, &str)) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let keys = foreign_keys(&mut c);
    let before = dump(&mut c, &keys);
    for &key in &keys {
        for command in [CHECK, PEEK] {
            call(&mut c, command, key);
        }
    }
    assert_eq!(dump(&mut c, &keys), before);
}

fn a_key_holding_anything_else_is_wrongtype_and_left_untouched(kind: Kind) {
    on_each_foreign_key(kind, |c, command, key| {
        let e = err(c, command, &[key, "10", "60", "100"]);
        assert!(e.starts_with("WRONGTYPE"), "{command} {key}: {e}");
    });
}

fn arguments_are_checked_before_the_key_is_read(kind: Kind) {
    on_each_foreign_key(kind, |c, command, key| {
        for (args, expected) in ARGUMENT_ERRORS {
            let args = on_key(args, key);
            let e = err(c, command, &args);
            assert!(
                e.starts_with("ERR ") && e.contains(expected),
                "{command} {args:?}: {e}"
            );
        }
    });
}
