//! ACL: least-privilege users can use the limiter. CHECK is in @write and @fast,
//! PEEK and COUNTS in @read and @fast, all three in the module's own @slidingwindow,
//! wherever the server lets a module set categories (Redis 7.2+, every Valkey). On Redis
//! 7.0 they are in no category and are granted by name (the README's lines, tested
//! here on every server).

#[macro_use]
mod support;

use support::*;

on_every_server!(
    command_info_lists_the_categories_where_the_server_allows_them,
    least_privilege_users,
);

/// Whether this server lets modules set ACL categories: every Valkey, Redis from 7.2.
fn sets_categories(c: &mut redis::Connection) -> bool {
    let server = info(c, "server");
    if info_field(&server, "valkey_version").is_some() {
        return true;
    }
    let version = info_field(&server, "redis_version").expect("redis_version in INFO");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (7, 2)
}

/// A connection authenticated as `user` (password "pw").
fn as_user(s: &Server, user: &str) -> redis::Connection {
    let mut c = s.connection();
    let _: () = redis::cmd("AUTH")
        .arg(user)
        .arg("pw")
        .query(&mut c)
        .unwrap();
    c
}

fn set_user(admin: &mut redis::Connection, user: &str, rules: &[&str]) {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(user)
        .arg(&["reset", "on", ">pw"][..])
        .arg(rules)
        .query(admin)
        .unwrap_or_else(|e| panic!("ACL SETUSER {user} {rules:?}: {e}"));
}

/// The error code of a reply ("NOPERM", "ERR", ...), or "OK".
fn outcome(c: &mut redis::Connection, cmd: &str, args: &[&str]) -> String {
    match redis::cmd(cmd).arg(args).query::<redis::Value>(c) {
        Ok(_) => "OK".into(),
        Err(e) => e.code().unwrap_or("?").to_string(),
    }
}

fn command_info_lists_the_categories_where_the_server_allows_them(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut c = s.connection();
    let categorised = sets_categories(&mut c);
    let cats: Vec<String> = redis::cmd("ACL").arg("CAT").query(&mut c).unwrap();
    assert_eq!(
        cats.iter().any(|x| x == "slidingwindow"),
        categorised,
        "{kind:?}: ACL CAT {cats:?}"
    );
    for (cmd, want) in [
        ("slidingwindow.check", ["@write", "@fast", "@slidingwindow"]),
        ("slidingwindow.peek", ["@read", "@fast", "@slidingwindow"]),
        ("slidingwindow.counts", ["@read", "@fast", "@slidingwindow"]),
        (
            "slidingwindow.refund",
            ["@write", "@fast", "@slidingwindow"],
        ),
    ] {
        // COMMAND INFO: [name, arity, flags, first, last, step, categories, ...]
        let info: Vec<redis::Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(cmd)
            .query(&mut c)
            .unwrap();
        let Some(redis::Value::Array(fields)) = info.first() else {
            panic!("{kind:?}: COMMAND INFO {cmd}: {info:?}");
        };
        let categories: Vec<String> = redis::from_redis_value(fields[6].clone()).unwrap();
        let expected: Vec<String> = if categorised {
            want.iter().map(|s| s.to_string()).collect()
        } else {
            Vec::new()
        };
        assert_eq!(categories, expected, "{kind:?} {cmd}");
    }
    eprintln!("{kind:?}: categories set: {categorised}");
}

fn least_privilege_users(kind: Kind) {
    let s = Server::start(kind, &[]);
    let mut admin = s.connection();
    let categorised = sets_categories(&mut admin);
    let grant = if categorised { "OK" } else { "NOPERM" };
    // The README's lines, one per kind of user.
    set_user(&mut admin, "app", &["~rl:*", "+@read", "+@write"]);
    set_user(&mut admin, "reader", &["~rl:*", "+@read"]);
    // Redis 7.0 knows no @slidingwindow: that user gets no command at all there.
    let limiter_rules: &[&str] = if categorised {
        &["~rl:*", "+@slidingwindow"]
    } else {
        &["~rl:*"]
    };
    set_user(&mut admin, "limiter", limiter_rules);
    set_user(&mut admin, "broad", &["~*", "+@all", "-@dangerous"]);
    set_user(
        &mut admin,
        "named",
        &[
            "~rl:*",
            "+slidingwindow.check",
            "+slidingwindow.peek",
            "+slidingwindow.counts",
            "+slidingwindow.refund",
        ],
    );

    let mut app = as_user(&s, "app");
    assert_eq!(
        outcome(&mut app, CHECK, &["rl:a", "5", "60"]),
        grant,
        "{kind:?} app CHECK"
    );
    assert_eq!(
        outcome(&mut app, PEEK, &["rl:a", "5", "60"]),
        grant,
        "{kind:?} app PEEK"
    );
    assert_eq!(
        outcome(&mut app, COUNTS, &["rl:a", "60"]),
        grant,
        "{kind:?} app COUNTS"
    );
    // Outside the key pattern: NOPERM, and nothing is created.
    assert_eq!(
        outcome(&mut app, CHECK, &["other:a", "5", "60"]),
        "NOPERM",
        "{kind:?}"
    );
    assert_eq!(get_raw(&mut admin, "other:a"), None, "{kind:?}");

    let mut reader = as_user(&s, "reader");
    assert_eq!(
        outcome(&mut reader, PEEK, &["rl:a", "5", "60"]),
        grant,
        "{kind:?} reader PEEK"
    );
    assert_eq!(
        outcome(&mut reader, COUNTS, &["rl:a", "60"]),
        grant,
        "{kind:?} reader COUNTS"
    );
    assert_eq!(
        outcome(&mut reader, CHECK, &["rl:b", "5", "60"]),
        "NOPERM",
        "{kind:?} reader CHECK"
    );
    assert_eq!(get_raw(&mut admin, "rl:b"), None, "{kind:?}");

    let mut limiter = as_user(&s, "limiter");
    assert_eq!(
        outcome(&mut limiter, CHECK, &["rl:c", "5", "60"]),
        grant,
        "{kind:?} limiter"
    );
    // Exactly the limiter: no other command.
    assert_eq!(
        outcome(&mut limiter, "GET", &["rl:c"]),
        "NOPERM",
        "{kind:?} limiter GET"
    );

    let mut broad = as_user(&s, "broad");
    assert_eq!(
        outcome(&mut broad, CHECK, &["any", "5", "60"]),
        "OK",
        "{kind:?} broad"
    );

    // Granted by name: works on every server, Redis 7.0 included.
    let mut named = as_user(&s, "named");
    let d = sw("rl:d").limit(5).window(60).now(100);
    assert_eq!(d.check(&mut named), [1, 1], "{kind:?}");
    assert_eq!(d.peek(&mut named), [1, 2], "{kind:?}");
    assert_eq!(
        outcome(&mut named, COUNTS, &["rl:d", "60", "100"]),
        "OK",
        "{kind:?}"
    );
    // REFUND gives back the hit CHECK counted (the README's by-name line grants it).
    assert_eq!(
        outcome(&mut named, REFUND, &["rl:d", "5", "60", "100"]),
        "OK",
        "{kind:?}"
    );
    assert_eq!(d.peek(&mut named), [1, 1], "{kind:?} after REFUND");
    assert_eq!(
        outcome(&mut named, CHECK, &["x:d", "5", "60"]),
        "NOPERM",
        "{kind:?}"
    );
    assert_eq!(
        outcome(&mut named, "SET", &["rl:d", "x"]),
        "NOPERM",
        "{kind:?}"
    );
    assert_eq!(
        get_raw(&mut admin, "rl:d").map(|v| v[0]),
        Some(0xA1),
        "{kind:?}"
    );
}
