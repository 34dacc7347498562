//! State survives DEBUG RELOAD (RDB), a restart that replays the AOF, and an AOF
//! rewrite (BGREWRITEAOF) followed by a crash: same bytes, same counts, same absolute
//! expiry.

#[macro_use]
mod support;

use support::{
    get_raw, info_field, pexpiretime, sw, try_info, wait_until, Kind, Server, Sw, PATIENCE,
};

on_every_server!(
    debug_reload_keeps_the_state,
    a_restart_with_aof_keeps_the_state,
    an_aof_rewrite_keeps_the_state,
);

const IDENTITIES: usize = 50;

/// The `i`th identity's limiter (limit 5 per hour), even ones in seconds, odd ones in
/// milliseconds, at `now` seconds.
fn limiter(i: usize, now: u64) -> Sw {
    let s = sw(support::key("id", i)).limit(5);
    if i.is_multiple_of(2) {
        s.window(3600).now(now)
    } else {
        s.window(3_600_000).now(now * 1000).ms()
    }
}

/// Distinct histories: identity i gets i % 7 + 1 requests from 1000 + i seconds.
fn load(c: &mut redis::Connection, identities: std::ops::Range<usize>) {
    for i in identities {
        for j in 0..(i % 7 + 1) as u64 {
            limiter(i, 1_000 + i as u64 + j).check(c);
        }
    }
}

/// Each identity's bytes, absolute expiry, and DETAILS at a later time.
type Snapshot = Vec<(Option<Vec<u8>>, i64, Vec<i64>)>;

fn snapshot(c: &mut redis::Connection) -> Snapshot {
    (0..IDENTITIES)
        .map(|i| {
            let k = support::key("id", i);
            let expiry = pexpiretime(c, &k);
            assert!(expiry > 0, "{k} has no expiry: {expiry}");
            (get_raw(c, &k), expiry, limiter(i, 1100).details().peek(c))
        })
        .collect()
}

fn debug_reload_keeps_the_state(kind: Kind) {
    let s = Server::start(kind, &["--enable-debug-command", "yes"]);
    let mut c = s.connection();
    load(&mut c, 0..IDENTITIES);
    let before = snapshot(&mut c);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    assert_eq!(snapshot(&mut c), before);
    // And the limiter keeps counting from there: identity 0 had 1 request.
    assert_eq!(limiter(0, 1100).check(&mut c), [1, 2]);
}

/// The AOF's text: every file in appendonlydir.
fn aof_text(s: &Server) -> String {
    let files = std::fs::read_dir(s.dir.join("appendonlydir")).expect("appendonlydir");
    let bytes: Vec<u8> = files
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect::<Vec<_>>()
        .concat();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn a_restart_with_aof_keeps_the_state(kind: Kind) {
    for fsync in ["always", "everysec"] {
        let mut s = Server::start(kind, &["--appendonly", "yes", "--appendfsync", fsync]);
        let mut c = s.connection();
        load(&mut c, 0..IDENTITIES);
        let before = snapshot(&mut c);
        // A clean shutdown flushes the AOF under either policy.
        s.shutdown_and_restart();
        let mut c = s.connection();
        assert_eq!(snapshot(&mut c), before, "{fsync}");
        // The AOF holds effects: SET ... PXAT, never the module's command.
        let text = aof_text(&s);
        assert!(text.contains("PXAT"), "{fsync}: no SET PXAT in the AOF");
        assert!(
            !text.to_lowercase().contains("slidingwindow"),
            "{fsync}: command logged verbatim"
        );
    }
}

/// BGREWRITEAOF compacts the AOF into a new base (an RDB preamble by default, or
/// commands), then new writes go to a new incremental file. A SIGKILL after both, with
/// `appendfsync always`, and a restart: every identity as it was.
fn an_aof_rewrite_keeps_the_state(kind: Kind) {
    for preamble in ["yes", "no"] {
        let mut s = Server::start(
            kind,
            &[
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--aof-use-rdb-preamble",
                preamble,
            ],
        );
        let mut c = s.connection();
        load(&mut c, 0..IDENTITIES / 2);
        let _: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
        wait_until(PATIENCE, "the AOF rewrite", || {
            let text = try_info(&mut c, "persistence").map_err(|e| e.to_string())?;
            let idle = info_field(&text, "aof_rewrite_in_progress") == Some("0")
                && info_field(&text, "aof_rewrite_scheduled") == Some("0");
            match info_field(&text, "aof_last_bgrewrite_status") {
                Some("ok") => Ok(idle),
                other => Err(format!("aof_last_bgrewrite_status {other:?}")),
            }
        });
        let rewrites: u64 = support::info_u64(&mut c, "persistence", "aof_rewrites");
        assert!(rewrites >= 1, "preamble {preamble}: no rewrite happened");
        // The rest after the rewrite, in the new incremental file.
        load(&mut c, IDENTITIES / 2..IDENTITIES);
        let before = snapshot(&mut c);
        s.restart(); // SIGKILL, then replay base + incremental AOF
        let mut c = s.connection();
        assert_eq!(snapshot(&mut c), before, "preamble {preamble}");
        assert!(
            !aof_text(&s).to_lowercase().contains("slidingwindow"),
            "preamble {preamble}: command logged verbatim"
        );
    }
}
