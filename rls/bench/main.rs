//! `make bench-rls`: this service side by side with envoyproxy/ratelimit (when its binary is
//! given) on the same Redis 7 with the module, loaded by our own tonic client.
//!
//! For 1 and 3 descriptors per request: requests/s and p50/p99 at 32 and 128 concurrent
//! gRPC streams (one HTTP/2 connection), the service's CPU per request at a fixed rate
//! (its threads' schedstat), Redis server time per request (INFO commandstats), and bytes
//! in Redis per identity (used_memory over 2,000 identities). Every request is allowed.
//! RLS_BENCH_ROUNDS rounds (3) alternate the services; each figure is the median.
//!
//! The peer: `RLS_PEER=/path/to/ratelimit` (envoyproxy/ratelimit built from its source:
//! `git clone https://github.com/envoyproxy/ratelimit && cd ratelimit &&
//! go build -o /tmp/ratelimit ./src/service_cmd`; nothing of it is in this repository).
//! Without it the table says "peer not given".

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

const CONFIG: &str = "domain: bench\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 1000000000}\n  - key: c\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn redis_con(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap()
}

fn info_field(port: u16, section: &str, field: &str) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query(&mut redis_con(port))
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Total usec of every command Redis ran.
fn redis_usec(port: u16) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis_con(port))
        .unwrap();
    info.lines()
        .filter_map(|l| l.split("usec=").nth(1))
        .filter_map(|r| r.split(',').next())
        .filter_map(|n| n.parse::<f64>().ok())
        .sum()
}

/// The process's CPU time in seconds: each live thread's time on CPU from
/// /proc/<pid>/task/<tid>/schedstat, in ns (/proc/<pid>/stat's 10 ms ticks are 3.3 us per
/// request over a 3 s run at 1,000 requests/s, as coarse as what is compared). Both
/// services keep their threads for their life, so no exited thread's time is lost.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    ns as f64 / 1e9
}

fn request(n: usize, id: u64) -> RateLimitRequest {
    let keys = ["a", "b", "c"];
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: keys[..n]
            .iter()
            .map(|k| RateLimitDescriptor {
                entries: vec![Entry {
                    key: k.to_string(),
                    value: format!("id{id}"),
                }],
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

struct Service {
    name: &'static str,
    proc: Proc,
    grpc: u16,
}

fn start_service(name: &'static str, bin: &Path, redis_port: u16, root: &Path) -> Service {
    let (grpc, http, debug) = (free_port(), free_port(), free_port());
    let child = Command::new(bin)
        .env_clear()
        .env("REDIS_SOCKET_TYPE", "tcp")
        .env("REDIS_URL", format!("127.0.0.1:{redis_port}"))
        .env("RUNTIME_ROOT", root)
        .env("RUNTIME_SUBDIRECTORY", "rl")
        .env("RUNTIME_WATCH_ROOT", "false")
        .env("USE_STATSD", "false")
        .env("LOG_LEVEL", "error")
        .env("GRPC_HOST", "127.0.0.1")
        .env("HOST", "127.0.0.1")
        .env("DEBUG_HOST", "127.0.0.1")
        .env("GRPC_PORT", grpc.to_string())
        .env("PORT", http.to_string())
        .env("DEBUG_PORT", debug.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{name}: {}: {e}", bin.display()));
    Service {
        name,
        proc: Proc(child),
        grpc,
    }
}

async fn client(port: u16) -> RateLimitServiceClient<tonic::transport::Channel> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(c) = RateLimitServiceClient::connect(format!("http://127.0.0.1:{port}")).await {
            let mut probe = c.clone();
            if probe.should_rate_limit(request(1, 0)).await.is_ok() {
                return c;
            }
        }
        assert!(
            Instant::now() < deadline,
            "service on {port} did not answer"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// (req/s, p50 ms, p99 ms) with `streams` concurrent callers for `secs`.
async fn saturate(
    c: &RateLimitServiceClient<tonic::transport::Channel>,
    n: usize,
    streams: usize,
    secs: f64,
) -> (f64, f64, f64) {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = (0..streams)
        .map(|s| {
            let mut c = c.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut i = 0u64;
                while Instant::now() < end {
                    let t = Instant::now();
                    let r = c
                        .should_rate_limit(request(n, (s as u64) * 1_000_000 + i % 1000))
                        .await;
                    if let Ok(r) = r {
                        if r.get_ref().overall_code == 1 {
                            lat.push(t.elapsed().as_secs_f64() * 1000.0);
                        }
                    }
                    i += 1;
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    (all.len() as f64 / secs, q(0.5), q(0.99))
}

/// CPU us per request at a fixed `rate` for `secs`, Redis's command us per request
/// (commandstats) and Redis's CPU us per request.
async fn fixed_rate(
    svc: &Service,
    c: &RateLimitServiceClient<tonic::transport::Channel>,
    n: usize,
    rate: f64,
    secs: f64,
    redis: (u16, u32),
) -> (f64, f64, f64) {
    let (redis_port, redis_pid) = redis;
    let pid = svc.proc.0.id();
    let c0 = cpu_seconds(pid);
    let r0 = cpu_seconds(redis_pid);
    let u0 = redis_usec(redis_port);
    let total = (rate * secs) as u64;
    // Identities in the fixed-rate run (RLS_BENCH_IDS, default 1000: each seen ~3 times).
    let ids: u64 = std::env::var("RLS_BENCH_IDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
        .max(1);
    let start = Instant::now();
    let mut handles = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        let mut c = c.clone();
        handles.push(tokio::spawn(async move {
            c.should_rate_limit(request(n, 5_000_000 + i % ids))
                .await
                .is_ok()
        }));
    }
    let mut ok = 0u64;
    for h in handles {
        if h.await.unwrap_or(false) {
            ok += 1;
        }
    }
    if std::env::var_os("RLS_BENCH_VERBOSE").is_some() {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut redis_con(redis_port))
            .unwrap();
        eprintln!(
            "{} {n} descriptor(s), commandstats since start:\n{info}",
            svc.name
        );
    }
    let cpu = (cpu_seconds(pid) - c0) * 1e6 / ok.max(1) as f64;
    let redis_cpu = (cpu_seconds(redis_pid) - r0) * 1e6 / ok.max(1) as f64;
    let redis = (redis_usec(redis_port) - u0) / ok.max(1) as f64;
    (cpu, redis, redis_cpu)
}

/// Bytes in Redis per identity: used_memory (less the clients' buffers) over `ids` new
/// identities, one request each.
async fn bytes_per_identity(
    c: &RateLimitServiceClient<tonic::transport::Channel>,
    redis_port: u16,
    ids: u64,
) -> f64 {
    let _: () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query(&mut redis_con(redis_port))
        .unwrap();
    // Less the clients' buffers, which grow and shrink with the traffic, not the keys.
    let data = || {
        info_field(redis_port, "memory", "used_memory")
            - info_field(redis_port, "memory", "mem_clients_normal")
    };
    let m0 = data();
    let mut c = c.clone();
    for i in 0..ids {
        let _ = c.should_rate_limit(request(1, 9_000_000 + i)).await;
    }
    (data() - m0) / ids as f64
}

/// Where a run with the peer writes its tables (rendered into rls/README.md).
const RESULTS: &str = "bench/results/rls.md";

#[tokio::main]
async fn main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let ours = std::env::var_os("RLS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target/bench-client/slidingwindow-ratelimit"));
    let peer = std::env::var_os("RLS_PEER")
        .map(PathBuf::from)
        .filter(|p| p.exists());
    let secs: f64 = std::env::var("RLS_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let so = repo.join("target/release/libredis_slidingwindow.so");
    let dir = std::env::temp_dir().join(format!("rls-bench-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("rl/config")).unwrap();
    std::fs::write(dir.join("rl/config/bench.yaml"), CONFIG).unwrap();
    let redis_port = free_port();
    let _redis = Proc(
        Command::new("redis-server")
            .args([
                "--port",
                &redis_port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--loadmodule",
            ])
            .arg(&so)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server"),
    );
    let mut services = vec![("slidingwindow-ratelimit", ours)];
    match &peer {
        Some(p) => services.push(("envoyproxy/ratelimit", p.clone())),
        None => println!("envoyproxy/ratelimit: peer not given (set RLS_PEER to its binary; see rls/bench/main.rs); nothing is written to {}", RESULTS),
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // What is printed from here on is also the committed report (with a peer only: a
    // run without one compares nothing).
    let mut report = String::new();
    macro_rules! say {
        ($($t:tt)*) => {{
            let line = format!($($t)*);
            println!("{line}");
            report.push_str(&line);
            report.push('\n');
        }};
    }
    // Rounds alternate the services (each round starts with the next one), so a slow
    // spell of the shared machine lands on both; the tables give each condition's median
    // and every round's figure.
    let rounds: usize = std::env::var("RLS_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    let redis_pid = _redis.0.id();
    let mut running = Vec::new();
    for (name, bin) in &services {
        let svc = start_service(name, bin, redis_port, &dir);
        let c = client(svc.grpc).await;
        running.push((svc, c));
    }
    // (service, descriptors, streams) -> each round's (req/s, p50, p99, Redis command
    // us/request, Redis CPU us/request); streams 0 is the fixed rate: (service CPU
    // us/request, Redis command us/request, Redis CPU us/request, 0, 0).
    type Condition = (usize, usize, usize);
    let mut runs: Vec<(Condition, Vec<[f64; 5]>)> = Vec::new();
    let mut record = |key: Condition, v: [f64; 5]| match runs.iter_mut().find(|(k, _)| *k == key) {
        Some((_, all)) => all.push(v),
        None => runs.push((key, vec![v])),
    };
    for round in 0..rounds {
        for i in 0..running.len() {
            let s = (i + round) % running.len();
            let (svc, c) = &running[s];
            for n in [1, 3] {
                for streams in [32, 128] {
                    let u0 = redis_usec(redis_port);
                    let r0 = cpu_seconds(redis_pid);
                    let (rps, p50, p99) = saturate(c, n, streams, secs).await;
                    let served = (rps * secs).max(1.0);
                    let rus = (redis_usec(redis_port) - u0) / served;
                    let rcpu = (cpu_seconds(redis_pid) - r0) * 1e6 / served;
                    record((s, n, streams), [rps, p50, p99, rus, rcpu]);
                }
                let redis = (redis_port, redis_pid);
                let (cpu, rus, rcpu) = fixed_rate(svc, c, n, 1000.0, secs, redis).await;
                record((s, n, 0), [cpu, rus, rcpu, 0.0, 0.0]);
            }
        }
        println!("round {}/{rounds} done", round + 1);
    }
    let median = |all: &[[f64; 5]], f: usize| {
        let mut v: Vec<f64> = all.iter().map(|r| r[f]).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let each = |all: &[[f64; 5]], f: usize| {
        let v: Vec<String> = all.iter().map(|r| format!("{:.2}", r[f])).collect();
        v.join(", ")
    };
    say!("Redis 7 with the module on 127.0.0.1:{redis_port}; {secs} s per run, median of {rounds} rounds alternating the services; every request allowed; 2 shared cores. Redis server time: INFO commandstats (each command's wall time, so it counts a command preempted on a busy machine); Redis CPU: the server's threads' schedstat (its time on a CPU, reading, parsing and writing included).");
    say!("| service | descriptors | streams | req/s | p50 ms | p99 ms | Redis server us/request | Redis CPU us/request | commandstats, each round | CPU, each round |");
    say!("|---|---|---|---|---|---|---|---|---|---|");
    for ((s, n, streams), all) in runs.iter().filter(|(k, _)| k.2 > 0) {
        say!(
            "| {} | {n} | {streams} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |",
            running[*s].0.name,
            median(all, 0),
            median(all, 1),
            median(all, 2),
            median(all, 3),
            median(all, 4),
            each(all, 3),
            each(all, 4)
        );
    }
    say!("");
    say!("| service | descriptors | service CPU us/request at 1000 req/s | Redis server us/request | Redis CPU us/request | service CPU, each round | commandstats, each round |");
    say!("|---|---|---|---|---|---|---|");
    for ((s, n, _), all) in runs.iter().filter(|(k, _)| k.2 == 0) {
        say!(
            "| {} | {n} | {:.1} | {:.2} | {:.2} | {} | {} |",
            running[*s].0.name,
            median(all, 0),
            median(all, 1),
            median(all, 2),
            each(all, 0),
            each(all, 1)
        );
    }
    say!("");
    for (svc, c) in &running {
        let b = bytes_per_identity(c, redis_port, 2000).await;
        say!(
            "{}: {b:.0} bytes in Redis per identity (one descriptor, used_memory over 2000 identities)",
            svc.name
        );
    }
    if peer.is_some() {
        let path = repo.join(RESULTS);
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let load = load.split_whitespace().next().unwrap_or("?");
        let text = format!(
            "`RLS_PEER=/path/to/ratelimit make bench-rls` (rls/bench/main.rs), load average {load} at the end.\n\n{report}"
        );
        std::fs::write(&path, text).expect("write the results");
        println!("wrote {}", path.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
