//! Outages and what a server can lose: the server stopped, frozen with SIGSTOP, FUNCTION
//! FLUSH, SCRIPT FLUSH, a restart without the library, and the configuration errors that
//! are no outage (LibraryNotLoaded, MissingPermission).

mod support;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use slidingwindow_client::{Backend, Call, Error, Limiter, Mode};
use support::{eventually, Kind, Server};

/// Every log line of this binary, with the name of the thread that wrote it.
static LINES: Mutex<Vec<(String, log::Level, String)>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        if r.target().starts_with("slidingwindow") {
            let thread = std::thread::current().name().unwrap_or("").to_string();
            LINES
                .lock()
                .unwrap()
                .push((thread, r.level(), r.args().to_string()));
        }
    }
    fn flush(&self) {}
}

/// A runtime whose threads carry `name`, so the log lines of one test can be told apart.
fn runtime(name: &str) -> tokio::runtime::Runtime {
    let _ = log::set_logger(&Capture).map(|()| log::set_max_level(log::LevelFilter::Info));
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .unwrap()
}

/// The warnings written by the threads named `name` (workers) or `test` (the test's own).
fn warnings(name: &str, test: &str) -> Vec<String> {
    LINES
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, l, _)| (t == name || t == test) && *l == log::Level::Warn)
        .map(|(_, _, m)| m.clone())
        .collect()
}

const TIMEOUT: Duration = Duration::from_millis(500);
/// Slack for a loaded 2-core machine on top of the timeout: the bound asserted is
/// "about the timeout", never the client's own reconnect backoff (seconds).
const SLACK: Duration = Duration::from_millis(700);

fn limiter_for(
    con: redis::aio::ConnectionManager,
    fail_open: bool,
) -> Limiter<redis::aio::ConnectionManager> {
    Limiter::builder(con)
        .timeout(TIMEOUT)
        .probe_interval(Duration::from_millis(200))
        .fail_open(fail_open)
        .build()
}

#[test]
fn server_stopped_then_frozen() {
    runtime("stopped-worker").block_on(async {
        let mut s = Server::start(Kind::Module);
        let l = limiter_for(support::manager(&s).await, true);
        let closed = limiter_for(support::manager(&s).await, false);
        let call = Call::new(1000, 60);
        assert!(!l.check("a", &call).await.unwrap().degraded());
        assert!(!closed.check("a", &call).await.unwrap().degraded());

        // Stopped: the first call waits at most about the timeout, then fails open.
        s.kill();
        let t = Instant::now();
        let d = l.check("a", &call).await.unwrap();
        assert!(d.allowed() && d.degraded(), "{d:?}");
        assert!(
            t.elapsed() <= TIMEOUT + SLACK,
            "first call took {:?}",
            t.elapsed()
        );
        let d = closed.check("a", &call).await.unwrap();
        assert!(!d.allowed() && d.degraded(), "fail-closed: {d:?}");
        // Then every call is answered without Redis: nothing more is sent by requests.
        let sent = l.stats().sent;
        for _ in 0..200 {
            assert!(l.check("a", &call).await.unwrap().degraded());
        }
        assert_eq!(
            l.stats().sent,
            sent,
            "requests reached Redis during the outage"
        );
        assert!(l.stats().down);
        let w = warnings("stopped-worker", "server_stopped_then_frozen");
        assert_eq!(
            w.iter().filter(|m| m.contains("Redis unavailable")).count(),
            2,
            "one per limiter: {w:?}"
        );

        // Back: a probe closes the circuit; one recovery line per limiter.
        s.start_again(true);
        for lim in [&l, &closed] {
            eventually("recovery", || {
                let _ = futures_poll(lim);
                !lim.stats().down
            })
            .await;
        }
        assert!(!l.check("a", &call).await.unwrap().degraded());
        let w = warnings("stopped-worker", "server_stopped_then_frozen");
        assert_eq!(
            w.iter().filter(|m| m.contains("reachable again")).count(),
            2,
            "{w:?}"
        );
        assert!(l.stats().probes >= 1);

        // Frozen (SIGSTOP): the socket stays open and nothing answers; the call gives up
        // at the timeout (here the connection manager's own 400 ms response timeout comes
        // first).
        s.freeze();
        let t = Instant::now();
        let d = l.check("a", &call).await.unwrap();
        assert!(d.allowed() && d.degraded(), "{d:?}");
        assert!(
            t.elapsed() <= TIMEOUT + SLACK,
            "frozen call took {:?}",
            t.elapsed()
        );
        let sent = l.stats().sent;
        for _ in 0..100 {
            assert!(l.check("a", &call).await.unwrap().degraded());
        }
        assert_eq!(l.stats().sent, sent);
        s.thaw();
        eventually("recovery after SIGCONT", || {
            let _ = futures_poll(&l);
            !l.stats().down
        })
        .await;
        assert!(!l.check("a", &call).await.unwrap().degraded());
        let w = warnings("stopped-worker", "server_stopped_then_frozen");
        assert_eq!(
            w.iter().filter(|m| m.contains("Redis unavailable")).count(),
            3,
            "{w:?}"
        );
    });
}

/// The probe a CHECK starts during an outage is a PEEK (conformance/README.md, "Outages"):
/// the server, back and empty, sees one PEEK and no CHECK, and holds no key.
#[test]
fn a_probe_is_a_peek() {
    runtime("peek-worker").block_on(async {
        let mut s = Server::start(Kind::Module);
        let l = limiter_for(support::manager(&s).await, true);
        let call = Call::new(5, 60);
        assert!(!l.check("p", &call).await.unwrap().degraded());
        s.kill();
        assert!(l.check("p", &call).await.unwrap().degraded()); // opens the circuit
        assert!(l.stats().down);
        s.start_again(true);
        tokio::time::sleep(Duration::from_millis(300)).await; // past the probe interval
        assert!(l.check("p", &call).await.unwrap().degraded()); // starts the probe
        eventually("the probe to close the circuit", || !l.stats().down).await;
        assert_eq!(
            (
                s.calls("slidingwindow.check"),
                s.calls("slidingwindow.peek")
            ),
            (0, 1)
        );
        let held: i64 = redis::cmd("EXISTS")
            .arg("rate:p")
            .query(&mut s.con())
            .unwrap();
        assert_eq!(held, 0, "the probe counted nothing");
    });
}

/// Starts a probe when one is due: a call during an outage is what starts probes.
fn futures_poll(l: &Limiter<redis::aio::ConnectionManager>) -> Option<()> {
    let l = l.clone();
    tokio::spawn(async move {
        let _ = l.peek("probe-trigger", &Call::new(1000, 60)).await;
    });
    Some(())
}

#[test]
fn function_flush_and_restart_without_the_library() {
    runtime("flush-worker").block_on(async {
        let mut s = Server::start(Kind::LibraryOnly);
        let l = limiter_for(support::manager(&s).await, true);
        let call = Call::new(1000, 60);
        assert!(!l.check("a", &call).await.unwrap().degraded());
        assert_eq!((l.stats().mode, l.stats().loads), (Some(Mode::Function), 1));

        // FUNCTION FLUSH: "Function not found", looked for again inside the same call.
        let _: () = redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query(&mut s.con())
            .unwrap();
        let d = l.check("a", &call).await.unwrap();
        assert!(d.allowed() && !d.degraded(), "{d:?}");
        assert_eq!(d.summary.count, 2, "the key survived the flush");
        assert_eq!(l.stats().loads, 2);
        assert_eq!(l.stats().outages, 0, "not an outage");

        // Restart without the library (no persistence): an outage while down, then the
        // probe finds no function, loads it, and calls go through.
        s.kill();
        assert!(l.check("a", &call).await.unwrap().degraded());
        s.start_again(false);
        eventually("recovery", || {
            let _ = futures_poll(&l);
            !l.stats().down
        })
        .await;
        let d = l.check("a", &call).await.unwrap();
        assert!(!d.degraded(), "{d:?}");
        assert_eq!(l.stats().loads, 3);
        let v: String = redis::cmd("FCALL_RO")
            .arg("slidingwindow_version")
            .arg(0)
            .query(&mut s.con())
            .unwrap();
        assert_eq!(v, slidingwindow_client::library::version());
    });
}

#[test]
fn module_gone_after_restart_moves_to_the_library() {
    runtime("gone-worker").block_on(async {
        let mut s = Server::start(Kind::Module);
        let l = limiter_for(support::manager(&s).await, true);
        let call = Call::new(1000, 60);
        assert!(!l.check("a", &call).await.unwrap().degraded());
        assert_eq!(l.stats().mode, Some(Mode::Module));
        s.kill();
        s.start_again(false); // a failover onto a server without the module
                              // The first call may find the old connection broken (an outage, a probe later
                              // reconnects): calls go on until one gets through.
        let deadline = Instant::now() + Duration::from_secs(30);
        let d = loop {
            let d = l.check("a", &call).await.unwrap();
            if !d.degraded() {
                break d;
            }
            assert!(Instant::now() < deadline, "never recovered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        // A new, empty server: this call alone (a probe is a PEEK, counting nothing).
        assert!(d.allowed() && d.summary.count == 1, "a new server: {d:?}");
        assert_eq!(l.stats().mode, Some(Mode::Function));
    });
}

#[test]
fn script_flush_on_redis62() {
    runtime("script-worker").block_on(async {
        let s = Server::start(Kind::Redis62);
        let l = limiter_for(support::manager(&s).await, true);
        let call = Call::new(1000, 60);
        assert!(!l.check("a", &call).await.unwrap().degraded());
        assert_eq!(l.stats().mode, Some(Mode::Eval));
        let before = s.calls("eval");
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut s.con())
            .unwrap();
        let d = l.check("a", &call).await.unwrap();
        assert!(!d.degraded() && d.summary.count == 2, "{d:?}");
        assert_eq!(
            s.calls("eval"),
            before + 1,
            "NOSCRIPT answered with one EVAL"
        );
        // EVAL loaded the script: EVALSHA works again.
        assert!(!l.check("a", &call).await.unwrap().degraded());
        assert_eq!(s.calls("eval"), before + 1);
        assert_eq!(l.stats().outages, 0);
    });
}

#[test]
fn configuration_errors_are_not_outages() {
    runtime("acl-worker").block_on(async {
        let s = Server::start(Kind::LibraryOnly);
        let mut admin = s.con();
        // A user who may not load the library.
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", "app", "on", ">pw", "~*", "+@all", "-function"][..])
            .query(&mut admin)
            .unwrap();
        let url = format!("redis://app:pw@127.0.0.1:{}/", s.port);
        let con = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection_manager()
            .await
            .unwrap();
        let l = Limiter::builder(con).backend(Backend::Auto).build();
        let e = l.check("a", &Call::new(5, 60)).await.unwrap_err();
        assert!(matches!(e, Error::LibraryNotLoaded(_)), "{e:?}");
        assert!(e.to_string().contains("FUNCTION LOAD REPLACE"), "{e}");
        assert!(!l.stats().down);

        // An older library loaded by the operator, that this user may not replace: used
        // as it is, with one warning.
        let version = slidingwindow_client::library::version();
        let old = slidingwindow_client::library::CODE.replace(
            &format!("local VERSION = '{version}'"),
            "local VERSION = '0.0.1'",
        );
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(&old)
            .query(&mut admin)
            .unwrap();
        let url = format!("redis://app:pw@127.0.0.1:{}/", s.port);
        let con = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection_manager()
            .await
            .unwrap();
        let l = Limiter::new(con);
        for i in 1..=3 {
            let d = l.check("old", &Call::new(5, 60)).await.unwrap();
            assert!(
                d.allowed() && !d.degraded() && d.summary.count == i,
                "{d:?}"
            );
        }
        assert_eq!(l.stats().mode, Some(Mode::Function));
        let w = warnings("acl-worker", "configuration_errors_are_not_outages");
        assert_eq!(
            w.iter()
                .filter(|m| m.contains("older than this crate's"))
                .count(),
            1,
            "{w:?}"
        );

        // Loaded by the operator, and a user without +time: MissingPermission.
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(slidingwindow_client::library::CODE)
            .query(&mut admin)
            .unwrap();
        let _: () = redis::cmd("ACL")
            .arg(
                &[
                    "SETUSER",
                    "narrow",
                    "on",
                    ">pw",
                    "~rate:*",
                    "+fcall",
                    "+fcall_ro",
                    "+get",
                    "+set",
                ][..],
            )
            .query(&mut admin)
            .unwrap();
        let url = format!("redis://narrow:pw@127.0.0.1:{}/", s.port);
        let con = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection_manager()
            .await
            .unwrap();
        let l = Limiter::builder(con).backend(Backend::Library).build();
        let e = l.check("a", &Call::new(5, 60)).await.unwrap_err();
        match &e {
            Error::MissingPermission { commands, message } => {
                // From the library's slidingwindow_permissions: what this user lacks.
                assert!(commands.contains(&"time".to_string()), "{e}");
                assert!(
                    !commands.contains(&"get".to_string())
                        && !commands.contains(&"set".to_string()),
                    "{e}"
                );
                assert!(commands.iter().all(|c| c == &c.to_lowercase()));
                // Redis 7.0 does not name the user (7.2+ does).
                assert!(message.contains("ACL SETUSER <user> +time"), "{message}");
                assert!(
                    message.contains(slidingwindow_client::permissions::LIBRARY_LINE),
                    "{message}"
                );
            }
            other => panic!("expected MissingPermission, got {other:?}"),
        }
        assert!(!l.stats().down);
    });
}
