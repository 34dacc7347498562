//! A write that cannot happen in place falls back to a fresh string, and every copy
//! agrees. The fault-injection build never writes the key `slidingwindow:test:no-in-place`
//! in place (src/fault.rs); the same calls on another key take the usual in-place path.
//! Both keys must end with the same bytes and expiry on the master, on its replica and
//! after the master restarts from its AOF.
//!
//! And the usual path when the length changes (a count crossing a varint boundary, a
//! window rolling over, a refund shrinking a count): the value is created raw at its new
//! size, so the next call's read converts nothing, and keeps the expiry it should, and
//! under an lfu maxmemory-policy the key's access counter.

#[macro_use]
mod support;

use support::{
    fault_module_path, get_raw, pexpiretime, replica_of, sw, wait_link, Kind, Server, Sw, CHECK,
    REFUND,
};

on_every_server!(the_fresh_string_fallback_keeps_master_replica_and_aof_alike);
on_every_server!(a_value_of_a_new_length_is_stored_raw_with_its_expiry);
on_every_server!(a_value_of_a_new_length_keeps_its_lfu_counter);

const FALLBACK_KEY: &str = "slidingwindow:test:no-in-place";
const IN_PLACE_KEY: &str = "in-place";

fn the_fresh_string_fallback_keeps_master_replica_and_aof_alike(kind: Kind) {
    let mut master = Server::start_with_module(
        kind,
        &fault_module_path(),
        &["--appendonly", "yes", "--appendfsync", "always"],
    );
    let replica = Server::start(kind, &[]);
    let mut m = master.connection();
    let mut r = replica.connection();
    replica_of(&mut r, &master);
    // A new key, same-length writes, a count crossing a varint boundary (127 -> 128), a
    // second window (version 2), then back to one window: every kind of write.
    let calls = |key: &str| {
        let one = |now: u64, cost: u64| sw(key).limit(1000).window(3600).now(now).cost(cost);
        vec![
            one(10_000, 1),
            one(10_001, 1),
            one(10_002, 125),
            one(10_003, 1),
            one(10_004, 1),
            one(10_005, 1).and_limit(50, 60),
            one(10_006, 2).and_limit(50, 60),
            one(25_000, 1),
        ]
    };
    for (fallback, in_place) in calls(FALLBACK_KEY).iter().zip(calls(IN_PLACE_KEY)) {
        let reply = |call: &Sw, c: &mut redis::Connection| -> redis::Value {
            call.clone().details().cmd(CHECK).query(c).unwrap()
        };
        let (a, b) = (reply(fallback, &mut m), reply(&in_place, &mut m));
        assert_eq!(a, b, "the same call on both keys");
        assert_eq!(fallback.check(&mut m)[0], 1, "every call is allowed: {a:?}");
        assert_eq!(in_place.check(&mut m)[0], 1, "every call is allowed: {a:?}");
        assert_eq!(
            get_raw(&mut m, FALLBACK_KEY),
            get_raw(&mut m, IN_PLACE_KEY),
            "master bytes after {fallback:?}"
        );
    }
    let master_bytes = get_raw(&mut m, FALLBACK_KEY).expect("the key is written");
    // Each key's own expiry: the two were written a moment apart by the server's clock.
    let expiry: Vec<i64> = [FALLBACK_KEY, IN_PLACE_KEY]
        .iter()
        .map(|key| pexpiretime(&mut m, key))
        .collect();
    assert!(expiry[0] > 0, "the fallback keeps an expiry: {expiry:?}");

    wait_link(&mut r);
    support::wait_replicas(&mut m, 1);
    for (key, expiry) in [FALLBACK_KEY, IN_PLACE_KEY].iter().zip(&expiry) {
        assert_eq!(
            get_raw(&mut r, key).as_ref(),
            Some(&master_bytes),
            "replica {key}"
        );
        assert_eq!(pexpiretime(&mut r, key), *expiry, "replica {key}");
    }

    // SIGKILL, then the AOF (fsync always) is all the master has.
    master.restart();
    let mut m = master.connection();
    for (key, expiry) in [FALLBACK_KEY, IN_PLACE_KEY].iter().zip(&expiry) {
        assert_eq!(
            get_raw(&mut m, key).as_ref(),
            Some(&master_bytes),
            "AOF {key}"
        );
        assert_eq!(pexpiretime(&mut m, key), *expiry, "AOF {key}");
    }
}

fn a_value_of_a_new_length_is_stored_raw_with_its_expiry(kind: Kind) {
    let server = Server::start(kind, &[]);
    let mut c = server.connection();
    let key = "grows";
    let call = |now: u64, cost: u64| sw(key).limit(1000).window(3600).now(now).cost(cost);
    let encoding = |c: &mut redis::Connection| -> String {
        redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(key)
            .query(c)
            .unwrap()
    };
    let mut last_len = 0;
    let mut expiry = 0;
    // (command, now, cost): a new key; 127 -> 128 (one byte more); the window rolls over
    // (128 moves to the previous count, same length); a refund of 2 takes the current
    // count 1 -> 0 and the previous 128 -> 127 (one byte less); a cost of 200 (one byte
    // more); a refund that leaves the length as it was.
    let steps = [
        (CHECK, 10_000, 127),
        (CHECK, 10_001, 1),
        (CHECK, 11_000, 1),
        (REFUND, 11_001, 2),
        (CHECK, 11_002, 200),
        (REFUND, 11_003, 1),
    ];
    let mut lengths_changed = 0;
    for (command, now, cost) in steps {
        let reply: Vec<i64> = call(now, cost).cmd(command).query(&mut c).unwrap();
        let bytes = get_raw(&mut c, key).expect("the key is written");
        if bytes.len() != last_len {
            lengths_changed += 1;
        }
        last_len = bytes.len();
        assert_eq!(encoding(&mut c), "raw", "{command} now {now}: {reply:?}");
        let at = pexpiretime(&mut c, key);
        if command == CHECK {
            // Two windows from the server's clock.
            expiry = at;
            assert!(at > 0, "{command} now {now} sets an expiry");
        } else {
            assert_eq!(at, expiry, "{command} now {now} keeps the expiry");
        }
    }
    assert!(
        lengths_changed >= 4,
        "the steps change the length: {lengths_changed}"
    );
}

fn a_value_of_a_new_length_keeps_its_lfu_counter(kind: Kind) {
    // lfu-log-factor 0: every access adds one to the counter (up to 255); lfu-decay-time
    // 0: it never decays. A new value starts at 5 (LFU_INIT_VAL).
    let server = Server::start(
        kind,
        &[
            "--maxmemory-policy",
            "allkeys-lfu",
            "--lfu-log-factor",
            "0",
            "--lfu-decay-time",
            "0",
        ],
    );
    let mut c = server.connection();
    let key = "busy";
    let freq = |c: &mut redis::Connection| -> i64 {
        redis::cmd("OBJECT").arg("FREQ").arg(key).query(c).unwrap()
    };
    let call = |now: u64| sw(key).limit(1000).window(3600).now(now);
    let mut last_len = 0;
    let mut changes = 0;
    // 200 calls (and a GET after each, also an access): the count crosses 127 -> 128 (one
    // byte more), then two windows later it starts again from 1 (one byte less).
    for i in 0..200u64 {
        let now = if i < 150 { 10_000 } else { 17_200 };
        let before = if i == 0 { 0 } else { freq(&mut c) };
        let _: Vec<i64> = call(now).cmd(CHECK).query(&mut c).unwrap();
        let len = get_raw(&mut c, key).expect("the key is written").len();
        if last_len != 0 && len != last_len {
            changes += 1;
            // The counter went on from where it was (the call's own access adds one);
            // recreated, it would be back at 5.
            let after = freq(&mut c);
            assert!(
                after >= before,
                "call {i}: OBJECT FREQ {before} -> {after} when the length changed"
            );
        }
        last_len = len;
    }
    assert!(changes >= 2, "the calls change the length {changes} times");
    assert!(freq(&mut c) > 150, "OBJECT FREQ {}", freq(&mut c));
}
