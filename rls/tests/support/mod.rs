//! Real servers for rls' tests, on free loopback ports, stopped on drop: redis-server
//! (Redis 7.0 on the PATH, `REDIS_SERVER` overrides) with the module
//! (`target/release/libredis_slidingwindow.so`, `make build`), the same server as a
//! managed one (`--enable-module-command no`, no module: the client loads the Functions
//! library), a 3-master cluster with the module; and the service's own binary.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const OK: i32 = 1;
pub const OVER: i32 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Module,
    LibraryOnly,
    Cluster,
}

pub use slidingwindow_testservers::{free_port, Server as Redis};
use slidingwindow_testservers::{Cluster, Kind as ServerKind};

static SEQ: AtomicU32 = AtomicU32::new(0);

pub fn temp_dir(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "sw-rls-{what}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Redis 7.0 with the module, or without it as a managed service.
pub fn redis(module: bool, extra: &[&str]) -> Redis {
    let kind = if module {
        ServerKind::Module
    } else {
        ServerKind::LibraryOnly
    };
    Redis::start_with(kind, extra)
}

/// One server (module or library-only) or a 3-master cluster with the module.
pub struct Backend {
    pub kind: Kind,
    pub nodes: Vec<Redis>,
}

impl Backend {
    pub fn start(kind: Kind) -> Backend {
        let nodes = match kind {
            Kind::Module => vec![redis(true, &[])],
            Kind::LibraryOnly => vec![redis(false, &[])],
            Kind::Cluster => Cluster::start(3).nodes,
        };
        Backend { kind, nodes }
    }

    /// Starts every node again after a kill, as it was (nothing in it: no library either).
    pub fn start_again(&mut self) {
        let module = self.kind != Kind::LibraryOnly;
        for n in &mut self.nodes {
            n.start_again(module);
        }
    }

    /// The service's Redis environment for this backend.
    pub fn env(&self) -> Vec<(String, String)> {
        let urls: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        vec![
            ("REDIS_SOCKET_TYPE".into(), "tcp".into()),
            ("REDIS_URL".into(), urls.join(",")),
            (
                "REDIS_TYPE".into(),
                if self.kind == Kind::Cluster {
                    "cluster"
                } else {
                    "single"
                }
                .into(),
            ),
        ]
    }

    /// CHECK calls on every node (the module's command, or FCALL through the library).
    pub fn calls(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.calls("slidingwindow.check") + n.calls("fcall"))
            .sum()
    }
}

/// The service binary, on free ports, its config under `root/ratelimit/config/`.
pub struct Rls {
    pub grpc_port: u16,
    pub http_port: u16,
    pub debug_port: u16,
    pub prom_port: u16,
    pub root: PathBuf,
    child: Option<Child>,
}

pub const SUBDIR: &str = "ratelimit";

impl Rls {
    /// Writes `files` (name, yaml) into the config folder and starts the service.
    pub async fn start(backend: &Backend, files: &[(&str, &str)], env: &[(&str, &str)]) -> Rls {
        let root = temp_dir("rls");
        let app = root.join(SUBDIR).join("config");
        std::fs::create_dir_all(&app).unwrap();
        for (name, yaml) in files {
            std::fs::write(app.join(name), yaml).unwrap();
        }
        Rls::start_in(root, backend, env).await
    }

    pub async fn start_in(root: PathBuf, backend: &Backend, env: &[(&str, &str)]) -> Rls {
        let mut r = Rls {
            grpc_port: free_port(),
            http_port: free_port(),
            debug_port: free_port(),
            prom_port: free_port(),
            root,
            child: None,
        };
        let mut vars: HashMap<String, String> = backend.env().into_iter().collect();
        for (k, v) in [
            ("GRPC_HOST", "127.0.0.1".to_string()),
            ("HOST", "127.0.0.1".to_string()),
            ("DEBUG_HOST", "127.0.0.1".to_string()),
            ("GRPC_PORT", r.grpc_port.to_string()),
            ("PORT", r.http_port.to_string()),
            ("DEBUG_PORT", r.debug_port.to_string()),
            ("USE_PROMETHEUS", "true".to_string()),
            ("PROMETHEUS_ADDR", format!("127.0.0.1:{}", r.prom_port)),
            ("RUNTIME_ROOT", r.root.display().to_string()),
            ("RUNTIME_SUBDIRECTORY", SUBDIR.to_string()),
            ("RUNTIME_RELOAD_INTERVAL", "100ms".to_string()),
            ("REDIS_TIMEOUT", "300ms".to_string()),
            ("REDIS_POOL_SIZE", "2".to_string()),
            ("LOG_LEVEL", "info".to_string()),
        ] {
            vars.insert(k.into(), v);
        }
        for (k, v) in env {
            vars.insert(k.to_string(), v.to_string());
        }
        let log = std::fs::File::create(r.root.join("rls.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_slidingwindow-ratelimit"))
            .env_clear()
            .envs(&vars)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn slidingwindow-ratelimit");
        r.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(c) = r.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    panic!("the service exited {st}: {}", r.log());
                }
            }
            if let Ok((200, _)) = r.http("GET", "/healthcheck", "").await {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the service did not start: {}",
                r.log()
            );
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        r
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("rls.log")).unwrap_or_default()
    }

    pub fn config_dir(&self) -> PathBuf {
        self.root.join(SUBDIR).join("config")
    }

    pub async fn client(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        RateLimitServiceClient::connect(format!("http://127.0.0.1:{}", self.grpc_port))
            .await
            .expect("gRPC connect")
    }

    pub async fn call(&self, req: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.client()
            .await
            .should_rate_limit(req)
            .await
            .map(|r| r.into_inner())
    }

    /// A plain HTTP/1.1 request: (status, body).
    pub async fn http(
        &self,
        method: &str,
        path: &str,
        body: &str,
    ) -> std::io::Result<(u16, String)> {
        http(self.http_port, method, path, body).await
    }

    pub async fn json(&self, body: &str) -> (u16, serde_json::Value) {
        let (st, text) = self.http("POST", "/json", body).await.expect("/json");
        (
            st,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
        )
    }

    pub async fn metrics(&self) -> String {
        http(self.prom_port, "GET", "/metrics", "")
            .await
            .expect("/metrics")
            .1
    }

    /// Waits (at most 10 s) until the log contains `text`.
    pub async fn wait_log(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.log().contains(text) {
            assert!(
                Instant::now() < deadline,
                "no {text:?} in the log: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Rls {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

pub async fn http(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// A descriptor of (key, value) entries.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

/// One descriptor of one entry.
pub fn one(domain: &str, key: &str, value: &str) -> RateLimitRequest {
    request(domain, vec![desc(&[(key, value)])])
}
