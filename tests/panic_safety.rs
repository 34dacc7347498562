//! "A panic inside the module can never take the server down": with the module built
//! with the `fault-injection` feature (a test build, never the shipped one), a CHECK or
//! PEEK on the key `slidingwindow:test:panic` panics inside the handler. The server must
//! answer an ERR, stay up, count the call as an error, leave the key alone, and keep
//! serving — directly, inside MULTI/EXEC and from a script.

#[macro_use]
mod support;

use support::{
    error_text, fault_module_path, get_raw, info, info_field, sw, Kind, Server, CHECK, PEEK, REFUND,
};

on_every_server!(a_panic_in_a_handler_is_an_error_reply_and_the_server_lives_on);

const PANIC_KEY: &str = "slidingwindow:test:panic";

/// The error reply of a handler that panicked.
const INTERNAL_ERROR: &str = "ERR internal error in slidingwindow";

fn a_panic_in_a_handler_is_an_error_reply_and_the_server_lives_on(kind: Kind) {
    let mut s = Server::start_with_module(kind, &fault_module_path(), &[]);
    let mut c = s.connection();
    let doomed = sw(PANIC_KEY).limit(10).window(60).now(100);
    let fine = sw("fine").limit(10).window(60).now(100);
    assert_eq!(fine.check(&mut c), [1, 1]);
    for command in [CHECK, PEEK, REFUND] {
        for round in 0..3 {
            let e = doomed
                .cmd(command)
                .query::<Vec<i64>>(&mut c)
                .expect_err("a panicking call answered");
            let text = error_text(&e);
            assert!(
                text.starts_with(INTERNAL_ERROR),
                "{command} #{round}: {text}"
            );
            // Alive, and serving the next command on the same connection.
            let pong: String = redis::cmd("PING").query(&mut c).unwrap();
            assert_eq!(pong, "PONG");
            assert!(s.alive(), "{command} #{round}: the server died");
        }
    }
    // Inside MULTI/EXEC: the panicking call is an error in EXEC's reply, the others run.
    let mut pipe = redis::pipe();
    pipe.ignore_errors()
        .atomic()
        .add_command(fine.cmd(CHECK))
        .add_command(doomed.cmd(CHECK))
        .add_command(fine.cmd(PEEK));
    let replies: Vec<redis::Value> = pipe.query(&mut c).unwrap();
    assert_eq!(replies.len(), 3, "{replies:?}");
    let ints = |v: &[i64]| redis::Value::Array(v.iter().map(|&i| redis::Value::Int(i)).collect());
    assert_eq!(replies[0], ints(&[1, 2]), "{replies:?}");
    assert!(
        matches!(&replies[1], redis::Value::ServerError(e) if e.details().unwrap_or("").starts_with("internal error")),
        "{replies:?}"
    );
    assert_eq!(replies[2], ints(&[1, 3]), "{replies:?}");
    // From a script, the error reaches the script as an error.
    let e = redis::cmd("EVAL")
        .arg("return redis.call('SLIDINGWINDOW.PEEK', KEYS[1], ARGV[1], ARGV[2], ARGV[3])")
        .arg(1)
        .arg(doomed.args())
        .query::<redis::Value>(&mut c)
        .expect_err("a panicking call from Lua answered");
    assert!(error_text(&e).contains("internal error"), "{e}");
    // Nothing was written under the key; the module counted the calls as errors
    // (3 CHECKs, 3 PEEKs, 3 REFUNDs, MULTI, EVAL) and keeps counting.
    assert_eq!(get_raw(&mut c, PANIC_KEY), None);
    let stats = info(&mut c, "slidingwindow");
    assert_eq!(
        info_field(&stats, "slidingwindow_errors"),
        Some("11"),
        "{stats}"
    );
    assert_eq!(fine.check(&mut c), [1, 3]);
    assert!(s.alive(), "the server died");
    s.kill();
}
