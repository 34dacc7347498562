//! ACL for the Functions library: the least-privilege lines of README.md and lua/README.md
//! (read from between their `library-acl-lines` markers, so the READMEs say what runs
//! here), on every server without the module (`enable-module-command no`) and on Redis
//! 6.2 (EVALSHA, EVAL after NOSCRIPT):
//!
//! * the application's line runs check, peek, counts, refund, several limits, DETAILS, MS
//!   and COST, on explicit `now` (the same replies as an unrestricted user) and on the
//!   server's clock, and nothing lands in ACL LOG; every command the line grants is called;
//! * the operator's line loads the library and checks it, and touches no key; the
//!   application's user may not load it;
//! * a user with `+fcall +fcall_ro` only gets the script's ACL error (each server's exact
//!   text), and `slidingwindow_permissions` names exactly the missing commands; a user
//!   missing one command of the line gets that one; FCALL itself or a key refused gets
//!   NOPERM (each server's text).

#[macro_use]
mod support;

use redis::Value;
use std::collections::HashMap;
use std::path::Path;
use support::lua::{canon, eval_body, library_source, Op};
use support::{error_text, info, info_field, Kind, Server};

on_every_server!(
    the_application_line_runs_every_call,
    the_operator_line_loads_and_checks_the_library,
    missing_permissions_are_named,
);

// ------------------------------------------------------------------ the README lines

/// The three `ACL SETUSER` lines between the markers of one README: the application's
/// user (Redis 7.0+), the same on Redis 6.2, the operator.
fn readme_lines(relative: &str) -> [Vec<String>; 3] {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{relative}: {e}"));
    let start = text
        .find("<!-- library-acl-lines")
        .unwrap_or_else(|| panic!("{relative}: no <!-- library-acl-lines marker"));
    let end = text[start..]
        .find("<!-- /library-acl-lines -->")
        .unwrap_or_else(|| panic!("{relative}: no <!-- /library-acl-lines --> marker"));
    let lines: Vec<Vec<String>> = text[start..start + end]
        .lines()
        .filter(|l| l.starts_with("ACL SETUSER "))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    lines
        .try_into()
        .unwrap_or_else(|l: Vec<_>| panic!("{relative}: {} ACL lines, expected 3", l.len()))
}

/// The READMEs' lines, the same in both.
fn lines() -> [Vec<String>; 3] {
    let main = readme_lines("README.md");
    assert_eq!(
        main,
        readme_lines("lua/README.md"),
        "README.md and lua/README.md differ"
    );
    main
}

/// The application's line for this server.
fn app_line(kind: Kind) -> Vec<String> {
    let [app, app62, _] = lines();
    if kind == Kind::Redis62 {
        app62
    } else {
        app
    }
}

/// The commands a line grants by name (`+time` -> "time"), in its order.
fn granted(line: &[String]) -> Vec<String> {
    line.iter()
        .filter_map(|t| t.strip_prefix('+'))
        .map(str::to_string)
        .collect()
}

/// The commands the library calls among those the line grants (not FCALL, EVALSHA, ...).
fn library_commands(line: &[String]) -> Vec<String> {
    let entry = ["fcall", "fcall_ro", "evalsha", "eval"];
    granted(line)
        .into_iter()
        .filter(|c| !entry.contains(&c.as_str()))
        .collect()
}

/// Runs `ACL SETUSER` with the line's words; returns (user, password).
fn apply(admin: &mut redis::Connection, line: &[String]) -> (String, String) {
    assert_eq!(&line[..2], ["ACL", "SETUSER"], "{line:?}");
    let _: () = redis::cmd("ACL")
        .arg(&line[1..])
        .query(admin)
        .unwrap_or_else(|e| panic!("{}: {e}", line.join(" ")));
    let password = line
        .iter()
        .find_map(|t| t.strip_prefix('>'))
        .expect("a >password in the line");
    (line[2].clone(), password.to_string())
}

/// The line for `user` without the rules in `drop` (e.g. "+time"), reset first so that
/// nothing of an earlier grant stays.
fn variant(line: &[String], user: &str, drop: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = ["ACL", "SETUSER", user, "reset"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    out.extend(
        line[3..]
            .iter()
            .filter(|t| !drop.contains(&t.as_str()))
            .cloned(),
    );
    out
}

fn login(s: &Server, user: &str, password: &str) -> redis::Connection {
    let mut c = s.connection();
    let _: () = redis::cmd("AUTH")
        .arg(user)
        .arg(password)
        .query(&mut c)
        .unwrap_or_else(|e| panic!("AUTH {user}: {e}"));
    c
}

// ---------------------------------------------------------------------- the servers

/// A server without the module: `enable-module-command no` (a managed service) on 7.0+,
/// Redis 6.2 as it is.
fn library_server(kind: Kind) -> Server {
    if kind == Kind::Redis62 {
        Server::start_without_module(kind, &[])
    } else {
        Server::start_without_module(kind, &["--enable-module-command", "no"])
    }
}

/// How the library is called: FCALL / FCALL_RO, or EVALSHA (EVAL on NOSCRIPT) on 6.2.
#[derive(Clone)]
enum Via {
    Fcall,
    Eval(String),
}

impl Via {
    /// On 6.2 the body's sha1, from SCRIPT LOAD followed by SCRIPT FLUSH: the first
    /// EVALSHA then meets NOSCRIPT, and the caller sends the body by EVAL, as the clients do.
    fn of(kind: Kind, admin: &mut redis::Connection) -> Via {
        if kind != Kind::Redis62 {
            return Via::Fcall;
        }
        let sha = support::lua::script_load(admin);
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(admin).unwrap();
        Via::Eval(sha)
    }
}

/// A reply, or its error as the server sent it ("CODE detail").
type Reply = Result<Value, String>;

/// One call of the library on `key`, as the clients make it: FCALL_RO for peek and counts,
/// FCALL for check and refund; on 6.2 EVALSHA, and EVAL with the body after NOSCRIPT.
fn call(c: &mut redis::Connection, via: &Via, op: Op, key: &str, args: &[&str]) -> Reply {
    let got = match via {
        Via::Fcall => {
            let ro = matches!(op, Op::Peek | Op::Counts);
            redis::cmd(if ro { "FCALL_RO" } else { "FCALL" })
                .arg(op.function())
                .arg(1)
                .arg(key)
                .arg(args)
                .query::<Value>(c)
        }
        Via::Eval(sha) => {
            let r = redis::cmd("EVALSHA")
                .arg(sha)
                .arg(1)
                .arg(key)
                .arg(op.function())
                .arg(args)
                .query::<Value>(c);
            match r {
                Err(e) if e.code() == Some("NOSCRIPT") => redis::cmd("EVAL")
                    .arg(eval_body())
                    .arg(1)
                    .arg(key)
                    .arg(op.function())
                    .arg(args)
                    .query::<Value>(c),
                other => other,
            }
        }
    };
    got.map_err(|e| {
        assert!(e.code().is_some(), "{op:?} {key} {args:?}: no reply: {e}");
        error_text(&e)
    })
}

fn show(r: &Reply) -> String {
    match r {
        Ok(v) => canon(v),
        Err(e) => format!("error {e}"),
    }
}

/// The error text of a reply, or panics.
fn error_of(r: Reply) -> String {
    match r {
        Err(e) => e,
        Ok(v) => panic!("expected an error, got {}", canon(&v)),
    }
}

/// `FCALL_RO slidingwindow_permissions 1 key` as `c`'s user.
fn permissions(c: &mut redis::Connection, key: &str) -> redis::RedisResult<Vec<String>> {
    redis::cmd("FCALL_RO")
        .arg("slidingwindow_permissions")
        .arg(1)
        .arg(key)
        .query(c)
}

/// ACL LOG: (username, object, context) of each entry, newest first.
fn acl_log(admin: &mut redis::Connection) -> Vec<(String, String, String)> {
    let entries: Vec<Value> = redis::cmd("ACL").arg("LOG").query(admin).unwrap();
    entries
        .iter()
        .map(|e| {
            let fields: HashMap<String, String> = match e {
                Value::Array(items) => items
                    .chunks(2)
                    .filter_map(|kv| {
                        let k: String = redis::from_redis_value(kv[0].clone()).ok()?;
                        let v: String = redis::from_redis_value(kv[1].clone()).ok()?;
                        Some((k, v))
                    })
                    .collect(),
                Value::Map(items) => items
                    .iter()
                    .filter_map(|(k, v)| {
                        let k: String = redis::from_redis_value(k.clone()).ok()?;
                        let v: String = redis::from_redis_value(v.clone()).ok()?;
                        Some((k, v))
                    })
                    .collect(),
                other => panic!("ACL LOG entry {other:?}"),
            };
            let get = |f: &str| fields.get(f).cloned().unwrap_or_default();
            (get("username"), get("object"), get("context"))
        })
        .collect()
}

/// The objects ACL LOG holds for `user`, leaving out the client's own connection setup
/// (CLIENT SETINFO, which a client sends and ignores the refusal of).
fn refused_for(admin: &mut redis::Connection, user: &str) -> Vec<String> {
    acl_log(admin)
        .into_iter()
        .filter(|(u, object, _)| u == user && object != "client|setinfo")
        .map(|(_, object, _)| object)
        .collect()
}

fn reset_log(admin: &mut redis::Connection) {
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(admin)
        .unwrap();
}

/// `calls=` of a command in INFO commandstats (0 when it was never called).
fn calls(admin: &mut redis::Connection, command: &str) -> u64 {
    let text = info(admin, "commandstats");
    info_field(&text, &format!("cmdstat_{command}"))
        .and_then(|v| v.split(',').next()?.strip_prefix("calls=")?.parse().ok())
        .unwrap_or(0)
}

/// Loads the library as an unrestricted user (FUNCTION LOAD; 6.2: nothing, the callers
/// send the body by EVAL after NOSCRIPT).
fn load(admin: &mut redis::Connection, kind: Kind) {
    if kind != Kind::Redis62 {
        support::lua::load_library(admin);
    }
}

// ---------------------------------------------------------------------- the calls

/// Calls on the caller's own `now`: deterministic replies, compared with an unrestricted
/// user's. (op, key suffix, arguments after the key.)
const ON_NOW: &[(Op, &str, &[&str])] = &[
    (Op::Check, "a", &["3", "60", "1000"]),
    (Op::Check, "a", &["3", "60", "1000"]),
    (Op::Check, "a", &["3", "60", "1001"]),
    (Op::Check, "a", &["3", "60", "1002"]), // denied: 3 of 3
    (Op::Peek, "a", &["3", "60", "1002", "DETAILS"]),
    (Op::Counts, "a", &["60", "1002"]),
    (Op::Refund, "a", &["3", "60", "1002", "DETAILS"]), // reads the expiry, writes
    (Op::Check, "a", &["3", "60", "1003", "DETAILS"]),
    (
        Op::Check,
        "cost",
        &["10", "60", "1000", "COST", "4", "DETAILS"],
    ),
    (Op::Check, "cost", &["10", "60", "1001", "COST", "7"]), // denied: 4 + 7 > 10
    (Op::Refund, "cost", &["10", "60", "1001", "COST", "2"]),
    (Op::Check, "ms", &["2", "1000", "5000000", "MS", "DETAILS"]),
    (Op::Check, "ms", &["2", "1000", "5000400", "MS"]),
    (Op::Check, "ms", &["2", "1000", "5000800", "MS", "DETAILS"]), // denied
    (Op::Counts, "ms", &["1000", "5000800", "MS"]),
    (Op::Peek, "ms", &["2", "1000", "5001600", "MS", "DETAILS"]), // slid: allowed again
    // Several limits, and then one of them alone: the others are kept, with the key's
    // later expiry read back (PEXPIRETIME; PTTL on 6.2).
    (
        Op::Check,
        "multi",
        &[
            "5", "60", "1000", "LIMIT", "20", "3600", "LIMIT", "50", "86400", "DETAILS",
        ],
    ),
    (
        Op::Check,
        "multi",
        &[
            "5", "60", "1010", "LIMIT", "20", "3600", "COST", "2", "DETAILS",
        ],
    ),
    (Op::Check, "multi", &["5", "60", "1020"]),
    (
        Op::Peek,
        "multi",
        &[
            "5", "60", "1030", "LIMIT", "20", "3600", "LIMIT", "50", "86400", "DETAILS",
        ],
    ),
    (
        Op::Refund,
        "multi",
        &["5", "60", "1030", "LIMIT", "20", "3600", "DETAILS"],
    ),
    (Op::Counts, "multi", &["3600", "1030"]),
    (Op::Counts, "multi", &["86400", "1030"]),
];

/// A window so long that the key's expiry passes 2^53 ms, then a call naming another
/// window: the kept expiry is inexact, so the library writes with KEEPTTL and then
/// `PEXPIREAT ... GT` (7.0+; 6.2 has no GT).
const FAR: &[(Op, &str, &[&str])] = &[
    (Op::Check, "far", &["1", "9007199254740", "0"]),
    (Op::Check, "far", &["5", "60", "0", "DETAILS"]),
];

/// Calls on the server's clock (TIME): only their shape is compared.
const ON_CLOCK: &[(Op, &str, &[&str])] = &[
    (Op::Check, "clock", &["5", "60"]), // the short path
    (Op::Check, "clock", &["5", "60", "DETAILS"]),
    (Op::Check, "clock", &["5", "60000", "MS", "COST", "2"]),
    (Op::Check, "clock", &["5", "60", "LIMIT", "10", "3600"]),
    (Op::Peek, "clock", &["5", "60"]),
    (Op::Peek, "clock", &["5", "60", "DETAILS"]),
    (Op::Counts, "clock", &["60"]),
    (Op::Refund, "clock", &["5", "60"]),
];

/// Runs `calls` on `prefix`-keys; the replies.
fn run(
    c: &mut redis::Connection,
    via: &Via,
    prefix: &str,
    calls: &[(Op, &str, &[&str])],
) -> Vec<Reply> {
    calls
        .iter()
        .map(|(op, key, args)| call(c, via, *op, &format!("{prefix}{key}"), args))
        .collect()
}

fn the_application_line_runs_every_call(kind: Kind) {
    application_line(kind);
}

#[test]
fn the_application_line_runs_every_call_redis62() {
    application_line(Kind::Redis62);
}

fn application_line(kind: Kind) {
    let s = library_server(kind);
    let mut admin = s.connection();
    load(&mut admin, kind);
    let via = Via::of(kind, &mut admin);
    let line = app_line(kind);
    let (user, password) = apply(&mut admin, &line);
    let mut app = login(&s, &user, &password);
    let far = kind != Kind::Redis62;
    let fixed: Vec<_> = ON_NOW
        .iter()
        .chain(if far { FAR } else { &[] })
        .copied()
        .collect();

    // The same calls as an unrestricted user, on keys of its own, for the replies.
    let expected = run(&mut admin, &via, "rate:admin:", &fixed);
    if kind == Kind::Redis62 {
        // The application's first EVALSHA meets NOSCRIPT again and sends EVAL.
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
    }
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut admin)
        .unwrap();
    reset_log(&mut admin);

    let got = run(&mut app, &via, "rate:app:", &fixed);
    for (i, (want, have)) in expected.iter().zip(&got).enumerate() {
        let (op, key, args) = fixed[i];
        assert!(
            want.is_ok(),
            "{kind}: admin {op:?} {key} {args:?}: {}",
            show(want)
        );
        assert_eq!(
            show(have),
            show(want),
            "{kind}: as {user}: {op:?} {key} {args:?}"
        );
    }
    // The replies cover what they claim: allowed and denied, 2-, 6- and 7-element replies.
    let shapes: Vec<String> = got.iter().map(show).collect();
    for start in ["[0,", "[1,"] {
        assert!(
            shapes.iter().any(|r| r.starts_with(start)),
            "{kind}: {shapes:?}"
        );
    }
    for len in [2, 6, 7] {
        assert!(
            got.iter()
                .any(|r| matches!(r, Ok(Value::Array(a)) if a.len() == len)),
            "{kind}: no {len}-element reply: {shapes:?}"
        );
    }
    if far {
        let exp = support::pexpiretime(&mut admin, "rate:app:far");
        assert!(exp > support::lua::MAX as i64, "{kind}: expiry {exp}");
    }

    for (op, key, args) in ON_CLOCK {
        let r = call(&mut app, &via, *op, &format!("rate:app:{key}"), args);
        assert!(
            matches!(&r, Ok(Value::Array(a)) if !a.is_empty()),
            "{kind}: as {user}: {op:?} {key} {args:?} on the server's clock: {}",
            show(&r)
        );
    }

    // Nothing was refused, not even a call the library makes with pcall and lets fail.
    let refused = refused_for(&mut admin, &user);
    assert!(
        refused.is_empty(),
        "{kind}: ACL LOG for {user}: {refused:?}"
    );
    // And every command the line grants was called: none is there for nothing.
    for command in library_commands(&line) {
        assert!(
            calls(&mut admin, &command) > 0,
            "{kind}: {command} granted but never called"
        );
    }
    let entry = if kind == Kind::Redis62 {
        ["evalsha", "eval"]
    } else {
        ["fcall", "fcall_ro"]
    };
    for command in entry {
        assert!(
            calls(&mut admin, command) > 0,
            "{kind}: {command} never called"
        );
    }
    // No FUNCTION LOAD for the application (7.0+).
    if kind != Kind::Redis62 {
        let e = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(library_source())
            .query::<Value>(&mut app)
            .unwrap_err();
        assert_eq!(e.code(), Some("NOPERM"), "{kind}: {e}");
    }
}

fn the_operator_line_loads_and_checks_the_library(kind: Kind) {
    let s = library_server(kind);
    let mut admin = s.connection();
    let [_, _, operator] = lines();
    let (user, password) = apply(&mut admin, &operator);
    let mut op = login(&s, &user, &password);
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library_source())
        .query(&mut op)
        .unwrap_or_else(|e| panic!("{kind}: FUNCTION LOAD as {user}: {e}"));
    assert_eq!(name, "slidingwindow");
    // FUNCTION LIST shows the library and its functions, the diagnostic among them.
    let list: Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("slidingwindow")
        .query(&mut op)
        .unwrap();
    let text = canon(&list);
    for f in [
        "slidingwindow_check",
        "slidingwindow_peek",
        "slidingwindow_counts",
        "slidingwindow_refund",
        "slidingwindow_version",
        "slidingwindow_permissions",
    ] {
        assert!(text.contains(f), "{kind}: FUNCTION LIST: {text}");
    }
    let version: String = redis::cmd("FCALL_RO")
        .arg("slidingwindow_version")
        .arg(0)
        .query(&mut op)
        .unwrap();
    assert_eq!(version, support::lua::library_version(), "{kind}");
    // No key, no limiter call, nothing else.
    for (cmd, args) in [
        (
            "FCALL",
            vec!["slidingwindow_check", "1", "rate:x", "5", "60"],
        ),
        ("GET", vec!["rate:x"]),
        ("FUNCTION", vec!["FLUSH"]),
        ("FUNCTION", vec!["DELETE", "slidingwindow"]),
    ] {
        let e = redis::cmd(cmd)
            .arg(&args)
            .query::<Value>(&mut op)
            .unwrap_err();
        assert_eq!(e.code(), Some("NOPERM"), "{kind}: {cmd} {args:?}: {e}");
    }
}

// ------------------------------------------------------------------ what is missing

/// The error a call gets on `kind` when a command inside the library is refused through
/// `redis.call` (TIME), for `user` and the function `f`: the start of the text, before the
/// line number.
fn script_refusal(kind: Kind, user: &str, command: &str, f: &str) -> String {
    match kind {
        Kind::Redis7 => format!(
            "ERR The user executing the script can't run this command or subcommand \
             script: {f}, on @user_function:"
        ),
        Kind::Redis8 | Kind::Valkey8 => format!(
            "ERR ACL failure in script: User {user} has no permissions to run the \
             '{command}' command script: {f}, on @user_function:"
        ),
        Kind::Valkey9 => format!(
            "ERR ACL failure in script: User {user} has no permissions to run the \
             '{command}' command script: on @user_function:"
        ),
        Kind::Redis62 => "ERR Error running script (call to f_".to_string(),
    }
}

/// The same for a command the library sends with `redis.pcall` and returns the error of
/// (GET, SET): the whole text.
fn pcall_refusal(kind: Kind, user: &str, command: &str) -> String {
    match kind {
        Kind::Redis7 => {
            "ERR The user executing the script can't run this command or subcommand".to_string()
        }
        Kind::Redis62 => {
            "The user executing the script can't run this command or subcommand".to_string()
        }
        _ => format!(
            "ERR ACL failure in script: User {user} has no permissions to run the \
             '{command}' command"
        ),
    }
}

/// NOPERM for the call itself (`command` refused by name), whole text.
fn command_refusal(kind: Kind, user: &str, command: &str) -> String {
    match kind {
        Kind::Redis7 => {
            format!("NOPERM this user has no permissions to run the '{command}' command")
        }
        Kind::Redis62 => format!(
            "NOPERM this user has no permissions to run the '{command}' command or its subcommand"
        ),
        _ => format!("NOPERM User {user} has no permissions to run the '{command}' command"),
    }
}

/// NOPERM for a key outside the user's patterns, whole text.
fn key_refusal(kind: Kind) -> &'static str {
    match kind {
        Kind::Redis7 | Kind::Redis62 => {
            "NOPERM this user has no permissions to access one of the keys used as arguments"
        }
        _ => "NOPERM No permissions to access a key",
    }
}

fn missing_permissions_are_named(kind: Kind) {
    let s = library_server(kind);
    let mut admin = s.connection();
    load(&mut admin, kind);
    let via = Via::Fcall;
    let line = app_line(kind);
    let (_, password) = apply(&mut admin, &line);
    let needed = library_commands(&line);
    assert_eq!(
        needed,
        ["time", "get", "set", "pexpiretime", "pexpireat"],
        "{kind}: the line's commands are those slidingwindow_permissions checks"
    );

    // Only the functions: every call fails inside the library, at TIME first.
    let bare_rules: Vec<String> = needed.iter().map(|c| format!("+{c}")).collect();
    let bare_drop: Vec<&str> = bare_rules.iter().map(String::as_str).collect();
    apply(&mut admin, &variant(&line, "bare", &bare_drop));
    let mut bare = login(&s, "bare", &password);
    reset_log(&mut admin);
    for (op, args) in [
        (Op::Check, vec!["5", "60"]),
        (Op::Check, vec!["5", "60", "DETAILS"]),
        (Op::Peek, vec!["5", "60"]),
        (Op::Counts, vec!["60"]),
        (Op::Refund, vec!["5", "60"]),
    ] {
        let e = error_of(call(&mut bare, &via, op, "rate:bare", &args));
        let want = script_refusal(kind, "bare", "time", op.function());
        assert!(
            e.starts_with(&want),
            "{kind}: {op:?} {args:?}:\n{e}\nexpected {want}..."
        );
    }
    // With `now` given there is no TIME: GET is refused, and said so (not WRONGTYPE).
    let e = error_of(call(
        &mut bare,
        &via,
        Op::Check,
        "rate:bare",
        &["5", "60", "100"],
    ));
    assert_eq!(e, pcall_refusal(kind, "bare", "get"), "{kind}");
    let logged = refused_for(&mut admin, "bare");
    assert!(
        logged.iter().any(|o| o == "time"),
        "{kind}: ACL LOG {logged:?}"
    );
    assert_eq!(
        permissions(&mut bare, "rate:bare").unwrap(),
        needed,
        "{kind}: the diagnostic names every missing command"
    );

    // The line less one command: the diagnostic names exactly that one.
    for missing in &needed {
        let user = format!("no-{missing}");
        let rule = format!("+{missing}");
        apply(&mut admin, &variant(&line, &user, &[rule.as_str()]));
        let mut c = login(&s, &user, &password);
        assert_eq!(
            permissions(&mut c, "rate:x").unwrap(),
            std::slice::from_ref(missing),
            "{kind}: {user}"
        );
    }
    // What each of them meets (each command is needed: none is granted for nothing).
    let as_user = |user: &str| login(&s, user, &password);
    let mut c = as_user("no-time");
    let e = error_of(call(&mut c, &via, Op::Check, "rate:t", &["5", "60"]));
    assert!(
        e.starts_with(&script_refusal(
            kind,
            "no-time",
            "time",
            "slidingwindow_check"
        )),
        "{kind}: {e}"
    );
    let mut c = as_user("no-get");
    let e = error_of(call(&mut c, &via, Op::Peek, "rate:g", &["5", "60"]));
    assert_eq!(e, pcall_refusal(kind, "no-get", "get"), "{kind}");
    let mut c = as_user("no-set");
    let e = error_of(call(&mut c, &via, Op::Check, "rate:s", &["5", "60"]));
    assert_eq!(e, pcall_refusal(kind, "no-set", "set"), "{kind}");
    // A refused SET writes nothing; PEEK (no write) still answers.
    assert_eq!(support::get_raw(&mut admin, "rate:s"), None, "{kind}");
    let r = call(&mut c, &via, Op::Peek, "rate:s", &["5", "60"]);
    assert_eq!(show(&r), "[1,1]", "{kind}");
    // No PEXPIRETIME: the library falls back to PTTL, which the line does not grant: a
    // CHECK on a key holding a window it does not name (whose later expiry it keeps)
    // fails. A refund keeps the key's expiry with SET ... KEEPTTL and reads neither.
    let mut c = as_user("no-pexpiretime");
    let r = call(&mut c, &via, Op::Check, "rate:e", &["5", "60", "100"]);
    assert_eq!(show(&r), "[1,1]", "{kind}");
    let r = call(&mut c, &via, Op::Refund, "rate:e", &["5", "60", "100"]);
    assert_eq!(show(&r), "[1,1]", "{kind}"); // given back: PEEK's answer, 0 + 1
    let e = error_of(call(&mut c, &via, Op::Check, "rate:e", &["5", "30", "100"]));
    assert!(
        e.starts_with(&script_refusal(
            kind,
            "no-pexpiretime",
            "pttl",
            "slidingwindow_check"
        )),
        "{kind}: {e}"
    );
    // No PEXPIREAT: the rare write it makes (a kept expiry past 2^53 ms) is skipped, and
    // ACL LOG shows it.
    reset_log(&mut admin);
    let mut c = as_user("no-pexpireat");
    for (op, key, args) in FAR {
        let r = call(&mut c, &via, *op, &format!("rate:{key}"), args);
        assert!(r.is_ok(), "{kind}: {}", show(&r));
    }
    assert_eq!(
        refused_for(&mut admin, "no-pexpireat"),
        ["pexpireat"],
        "{kind}"
    );

    // The call itself refused: NOPERM, before the library runs.
    apply(&mut admin, &variant(&line, "no-fcall", &["+fcall"]));
    let mut c = as_user("no-fcall");
    let e = error_of(call(&mut c, &via, Op::Check, "rate:f", &["5", "60"]));
    assert_eq!(e, command_refusal(kind, "no-fcall", "fcall"), "{kind}");
    let r = call(&mut c, &via, Op::Peek, "rate:f", &["5", "60"]);
    assert_eq!(show(&r), "[1,1]", "{kind}: FCALL_RO still granted");
    let mut app = as_user(&line[2]);
    let e = error_of(call(&mut app, &via, Op::Check, "other:f", &["5", "60"]));
    assert_eq!(e, key_refusal(kind), "{kind}");
    let e = permissions(&mut app, "other:f").unwrap_err();
    assert_eq!(error_text(&e), key_refusal(kind), "{kind}");

    // The diagnostic: nothing missing for the line, nor for an unrestricted user; one key.
    assert_eq!(
        permissions(&mut app, "rate:x").unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        permissions(&mut admin, "any").unwrap(),
        Vec::<String>::new()
    );
    let e = redis::cmd("FCALL_RO")
        .arg("slidingwindow_permissions")
        .arg(0)
        .query::<Value>(&mut admin)
        .unwrap_err();
    assert!(
        error_text(&e).starts_with("ERR wrong number of arguments"),
        "{kind}: {e}"
    );
}

/// Redis 6.2: no redis.acl_check_cmd, so the diagnostic says it cannot tell; the errors
/// of a refused command inside the library and of EVALSHA refused.
#[test]
fn missing_permissions_on_redis62() {
    let kind = Kind::Redis62;
    let s = library_server(kind);
    let mut admin = s.connection();
    let via = Via::of(kind, &mut admin);
    let line = app_line(kind);
    let (_, password) = apply(&mut admin, &line);
    let needed = library_commands(&line);
    assert_eq!(needed, ["time", "get", "set", "pttl"]);
    let rules: Vec<String> = needed.iter().map(|c| format!("+{c}")).collect();
    let drop: Vec<&str> = rules.iter().map(String::as_str).collect();
    apply(&mut admin, &variant(&line, "bare", &drop));
    let mut bare = login(&s, "bare", &password);
    for (op, args) in [
        (Op::Check, vec!["5", "60"]),
        (Op::Peek, vec!["5", "60"]),
        (Op::Counts, vec!["60"]),
        (Op::Refund, vec!["5", "60"]),
    ] {
        let e = error_of(call(&mut bare, &via, op, "rate:bare", &args));
        assert!(
            e.starts_with("ERR Error running script (call to f_")
                && e.ends_with(
                    ": The user executing the script can't run this command or subcommand"
                ),
            "{op:?}: {e}"
        );
    }
    // GET refused (no TIME with `now`): the pcall's error, code `@user_script:`.
    let e = error_of(call(
        &mut bare,
        &via,
        Op::Check,
        "rate:bare",
        &["5", "60", "100"],
    ));
    assert!(
        e.starts_with("@user_script: ")
            && e.ends_with(": The user executing the script can't run this command or subcommand"),
        "{e}"
    );
    let logged = refused_for(&mut admin, "bare");
    assert!(logged.iter().any(|o| o == "time"), "ACL LOG {logged:?}");
    // The diagnostic cannot tell on 6.2.
    let e = redis::cmd("EVALSHA")
        .arg(match &via {
            Via::Eval(sha) => sha.clone(),
            Via::Fcall => unreachable!(),
        })
        .arg(1)
        .arg("rate:p")
        .arg("slidingwindow_permissions")
        .query::<Value>(&mut admin)
        .unwrap_err();
    assert_eq!(
        error_text(&e),
        "ERR slidingwindow_permissions needs redis.acl_check_cmd (Redis 7.0+)"
    );
    // Each command of the line is needed.
    for missing in &needed {
        let user = format!("no-{missing}");
        let rule = format!("+{missing}");
        apply(&mut admin, &variant(&line, &user, &[rule.as_str()]));
        let mut c = login(&s, &user, &password);
        let key = format!("rate:{user}");
        let mut errors = Vec::new();
        for (op, args) in [
            (Op::Check, vec!["5", "60", "100"]),
            (Op::Check, vec!["5", "60"]),
            (Op::Refund, vec!["5", "60", "100"]),
            // keeps the 60 s window's later expiry: reads it (PTTL on 6.2)
            (Op::Check, vec!["5", "30", "100"]),
        ] {
            let r = call(&mut c, &via, op, &key, &args);
            if r.is_err() {
                errors.push(error_of(r));
            }
        }
        assert!(
            errors
                .iter()
                .any(|e| e.contains("The user executing the script can't run this command")),
            "{user}: {errors:?}"
        );
    }
    // EVALSHA, EVAL refused: NOPERM before the script runs.
    apply(&mut admin, &variant(&line, "no-evalsha", &["+evalsha"]));
    let mut c = login(&s, "no-evalsha", &password);
    let e = error_of(call(&mut c, &via, Op::Check, "rate:f", &["5", "60"]));
    assert_eq!(e, command_refusal(kind, "no-evalsha", "evalsha"));
    let mut app = login(&s, &line[2], &password);
    let e = error_of(call(&mut app, &via, Op::Check, "other:f", &["5", "60"]));
    assert_eq!(e, key_refusal(kind));
}
