//! State survives DEBUG RELOAD (RDB) and a restart that replays the AOF, byte for byte.

mod support;

use support::{check, get_raw, peek, Server, KINDS};

/// Some identities with distinct histories, in seconds and in milliseconds.
fn load(c: &mut redis::Connection) -> Vec<String> {
    let mut keys = Vec::new();
    for i in 0..50u64 {
        let key = format!("id:{i}");
        for j in 0..(i % 7 + 1) {
            let now = (1_000 + i + j).to_string();
            if i % 2 == 0 {
                check(c, &[&key, "5", "3600", &now]);
            } else {
                check(c, &[&key, "5", "3600000", &now, "MS"]);
            }
        }
        keys.push(key);
    }
    keys
}

fn snapshot(c: &mut redis::Connection, keys: &[String]) -> Vec<(Option<Vec<u8>>, Vec<i64>)> {
    keys.iter()
        .enumerate()
        .map(|(i, k)| {
            let mut args = vec![k.as_str(), "5", "3600", "1100", "DETAILS"];
            if i % 2 == 1 {
                args[2] = "3600000";
                args.push("MS");
            }
            (get_raw(c, k), peek(c, &args))
        })
        .collect()
}

fn ttls_are_kept(c: &mut redis::Connection, keys: &[String]) {
    for k in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(k).query(c).unwrap();
        assert!(ttl > 0, "{k} lost its expiry: {ttl}");
    }
}

#[test]
fn debug_reload_keeps_the_state() {
    for kind in KINDS {
        let s = Server::start(kind, &["--enable-debug-command", "yes"]);
        let mut c = s.connection();
        let keys = load(&mut c);
        let before = snapshot(&mut c, &keys);
        let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
        assert_eq!(snapshot(&mut c, &keys), before);
        ttls_are_kept(&mut c, &keys);
        // And the limiter keeps counting from there.
        assert_eq!(check(&mut c, &["id:0", "5", "3600", "1100"]), [1, 2]);
    }
}

#[test]
fn a_restart_with_aof_keeps_the_state() {
    for kind in KINDS {
        for fsync in ["always", "everysec"] {
            let mut s = Server::start(kind, &["--appendonly", "yes", "--appendfsync", fsync]);
            let mut c = s.connection();
            let keys = load(&mut c);
            let before = snapshot(&mut c, &keys);
            // A clean shutdown flushes the AOF under either policy.
            s.shutdown_and_restart();
            let mut c = s.connection();
            assert_eq!(snapshot(&mut c, &keys), before, "{kind:?} {fsync}");
            ttls_are_kept(&mut c, &keys);
            // The AOF holds effects: SET ... PXAT, never the module's command.
            let aof = std::fs::read_dir(s.dir.join("appendonlydir"))
                .unwrap()
                .map(|e| std::fs::read(e.unwrap().path()).unwrap())
                .collect::<Vec<_>>()
                .concat();
            let text = String::from_utf8_lossy(&aof);
            assert!(text.contains("PXAT"), "no SET PXAT in the AOF");
            assert!(
                !text.to_lowercase().contains("slidingwindow"),
                "command logged verbatim"
            );
        }
    }
}
