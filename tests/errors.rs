//! Every argument error gets an ERR reply naming the argument, a foreign value gets
//! WRONGTYPE, and neither changes anything.

mod support;

use support::{check, get_raw, sw, Server, KINDS};

const MAX: &str = "9007199254740991";

fn err(c: &mut redis::Connection, command: &str, args: &[&str]) -> String {
    match sw(c, command, args) {
        Ok(v) => panic!("{command} {args:?} answered {v:?}, expected an error"),
        Err(e) => support::error_text(&e),
    }
}

#[test]
fn argument_errors_name_the_argument_and_change_nothing() {
    let cases: &[(&[&str], &str)] = &[
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
    for kind in KINDS {
        let s = Server::start(kind, &[]);
        let mut c = s.connection();
        check(&mut c, &["k", "10", "60", "100"]);
        let before = get_raw(&mut c, "k");
        for command in ["SLIDINGWINDOW.CHECK", "SLIDINGWINDOW.PEEK"] {
            for (args, expected) in cases {
                let e = err(&mut c, command, args);
                assert!(e.contains(expected), "{kind:?} {command} {args:?}: {e}");
                assert!(e.starts_with("ERR "), "{e}");
                assert_eq!(get_raw(&mut c, "k"), before, "{args:?} changed the key");
                assert_eq!(get_raw(&mut c, "k"), before);
            }
        }
        let e = err(&mut c, "SLIDINGWINDOW.CHECK", &["k", "10", "60", "1e3"]);
        assert!(
            e.contains(&format!("now must be an integer from 0 to {MAX}")),
            "{e}"
        );
        // Nothing else was created by the failed calls.
        let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
        assert_eq!(n, 1);
        assert!(s.log_tail().lines().all(|l| !l.contains("panicked")));
    }
}

#[test]
fn a_key_holding_anything_else_is_wrongtype_and_left_untouched() {
    for kind in KINDS {
        let s = Server::start(kind, &[]);
        let mut c = s.connection();
        let setup: &[&[&str]] = &[
            &["SET", "text", "hello world"],
            &["SET", "int", "12345678"],
            &["SET", "empty", ""],
            &["SET", "almost", "\u{a1}\u{0}<\u{10}\u{3}\u{0}"],
            &["RPUSH", "list", "a"],
            &["HSET", "hash", "f", "v"],
            &["SADD", "set", "m"],
        ];
        for cmd in setup {
            let _: () = redis::cmd(cmd[0]).arg(&cmd[1..]).query(&mut c).unwrap();
        }
        // A state with a byte flipped in its flags is not ours either.
        check(&mut c, &["damaged", "10", "60", "100"]);
        let mut bytes = get_raw(&mut c, "damaged").unwrap();
        bytes[1] = 0x7f;
        let _: () = redis::cmd("SET")
            .arg("damaged")
            .arg(&bytes)
            .query(&mut c)
            .unwrap();
        let keys = [
            "text", "int", "empty", "almost", "list", "hash", "set", "damaged",
        ];
        // Value (DUMP: type and bytes), TTL. Not OBJECT ENCODING: reading a foreign
        // string of 6 to 34 bytes may turn its embstr/int representation into raw, with
        // the same value (documented in the README).
        let dump = |c: &mut redis::Connection| -> Vec<(Option<Vec<u8>>, i64)> {
            keys.iter()
                .map(|k| {
                    let d: Option<Vec<u8>> = redis::cmd("DUMP").arg(k).query(c).unwrap();
                    let ttl: i64 = redis::cmd("PTTL").arg(k).query(c).unwrap();
                    (d, ttl)
                })
                .collect()
        };
        let before = dump(&mut c);
        for key in keys {
            for command in ["SLIDINGWINDOW.CHECK", "SLIDINGWINDOW.PEEK"] {
                let e = err(&mut c, command, &[key, "10", "60", "100"]);
                assert!(e.starts_with("WRONGTYPE"), "{kind:?} {command} {key}: {e}");
            }
        }
        assert_eq!(dump(&mut c), before);
    }
}
