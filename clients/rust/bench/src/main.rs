//! `make bench-rust`: the tower layer's overhead per request in an axum app.
//!
//! Each app runs in a child process (this binary, `serve <variant> <redis port>`), loaded
//! from this one over HTTP/1.1 keep-alive connections:
//!
//! * `none`: the app without a limiter (the ceiling);
//! * `governor`: tower_governor 0.8's in-memory GCRA, keyed by peer IP (every request
//!   allowed);
//! * `slidingwindow`: this crate's `RateLimitLayer` on Redis 7 with the module, one
//!   `SLIDINGWINDOW.CHECK` per request (every request allowed: 10^9 per 60 s, one key);
//! * `node-none`, `node-slidingwindow`: the Node bench's Express apps
//!   (clients/node/build/bench/http.js `serve`), when built, for the CPU comparison.
//!
//! Per app: requests/s, p50 and p99 latency at `--connections` (32) for `--duration` s;
//! Redis's server time per request (INFO commandstats, reset before the run); and the
//! app process's CPU per request at a fixed `--rate` (from /proc/<pid>/stat), whose
//! difference to the no-limiter app of the same language is the limiter's own CPU per
//! allowed request. Writes bench/results/rust.json (and rust.md through
//! bench/readme_blocks.py, which renders the README's figures from it).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const LIMIT: u64 = 1_000_000_000;

fn repo() -> PathBuf {
    std::env::var_os("SLIDINGWINDOW_REPO")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.."))
}

// ---- the child: one app ---------------------------------------------------------------

async fn serve(variant: &str, redis_port: u16) {
    use axum::routing::get;
    use axum::Router;
    let app = Router::new().route("/", get(|| async { "ok" }));
    let app = match variant {
        "none" => app,
        "governor" => {
            let config = tower_governor::governor::GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .finish()
                .expect("governor config");
            app.layer(tower_governor::GovernorLayer::new(config))
        }
        "slidingwindow" => {
            use axum::extract::ConnectInfo;
            use slidingwindow_client::{Identity, Limiter, Policy, RateLimitLayer};
            let url = format!("redis://127.0.0.1:{redis_port}/");
            let con = redis::Client::open(url)
                .unwrap()
                .get_connection_manager()
                .await
                .unwrap();
            let layer =
                RateLimitLayer::new(Limiter::new(con), Policy::new("bench", LIMIT, 60).unwrap())
                    .key(
                        Identity::new()
                            .peer_with(|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0)),
                    );
            app.layer(layer)
        }
        other => panic!("unknown variant {other}"),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("PORT {}", listener.local_addr().unwrap().port());
    std::io::stdout().flush().unwrap();
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
    .unwrap();
}

// ---- the parent: load and measure ----------------------------------------------------

struct Opts {
    duration: Duration,
    connections: usize,
    rounds: usize,
    rate: u64,
}

struct App {
    child: Child,
    port: u16,
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_app(variant: &str, redis_port: u16) -> Option<App> {
    let mut cmd = if let Some(js) = variant.strip_prefix("node-") {
        let script = node_script()?;
        let mut c = Command::new("node");
        c.arg(script)
            .arg("serve")
            .arg(js)
            .arg(redis_port.to_string());
        c
    } else {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.arg("serve").arg(variant).arg(redis_port.to_string());
        c
    };
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .ok()?;
    let out = child.stdout.take().unwrap();
    let mut line = String::new();
    let mut reader = std::io::BufReader::new(out);
    loop {
        line.clear();
        if std::io::BufRead::read_line(&mut reader, &mut line).ok()? == 0 {
            return None;
        }
        if let Some(p) = line.trim().strip_prefix("PORT ") {
            return Some(App {
                child,
                port: p.parse().ok()?,
            });
        }
    }
}

fn node_script() -> Option<PathBuf> {
    let p = std::env::var_os("SLIDINGWINDOW_NODE_BENCH")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("clients/node/build/bench/http.js"));
    p.exists().then_some(p)
}

/// The process's CPU time (user + system) so far, from /proc/<pid>/stat.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split(' ').collect();
    // After the command name: state is field 3, utime 14 and stime 15 (1-indexed).
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(ticks * 1_000_000 / hz)
}

/// One keep-alive connection: sends GET / until `stop`, `pace` apart when given.
async fn connection(port: u16, stop: Arc<AtomicBool>, pace: Option<Duration>) -> (Vec<u32>, u64) {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream.set_nodelay(true).unwrap();
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    let mut lat = Vec::new();
    let mut non2xx = 0;
    let mut tick = pace.map(|p| {
        let mut i = tokio::time::interval(p);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    let mut line = String::new();
    while !stop.load(Ordering::Relaxed) {
        if let Some(t) = tick.as_mut() {
            t.tick().await;
        }
        let t0 = Instant::now();
        w.write_all(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
            .await
            .unwrap();
        line.clear();
        r.read_line(&mut line).await.unwrap();
        if !line.starts_with("HTTP/1.1 2") {
            non2xx += 1;
        }
        let mut length = 0usize;
        loop {
            line.clear();
            r.read_line(&mut line).await.unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0u8; length];
        r.read_exact(&mut body).await.unwrap();
        lat.push(t0.elapsed().as_micros() as u32);
    }
    (lat, non2xx)
}

struct Load {
    requests: u64,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
    non2xx: u64,
}

async fn load(port: u16, connections: usize, duration: Duration, rate: Option<u64>) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let pace = rate.map(|r| Duration::from_secs_f64(connections as f64 / r as f64));
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(connection(port, stop.clone(), pace)))
        .collect();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut lat = Vec::new();
    let mut non2xx = 0;
    for t in tasks {
        let (l, n) = t.await.unwrap();
        lat.extend(l);
        non2xx += n;
    }
    let seconds = started.elapsed().as_secs_f64();
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0) as f64
            / 1000.0
    };
    Load {
        requests: lat.len() as u64,
        seconds,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        non2xx,
    }
}

fn server_usec(con: &mut redis::Connection) -> (f64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    let mut usec = 0.0;
    let mut calls = 0;
    for l in info.lines().filter(|l| l.starts_with("cmdstat_")) {
        for part in l.split(':').nth(1).unwrap_or("").split(',') {
            if let Some(v) = part.strip_prefix("usec=") {
                usec += v.parse::<f64>().unwrap_or(0.0);
            }
            if let Some(v) = part.strip_prefix("calls=") {
                if l.starts_with("cmdstat_slidingwindow.check:") {
                    calls += v.parse::<u64>().unwrap_or(0);
                }
            }
        }
    }
    (usec, calls)
}

#[derive(Default, Clone)]
struct Row {
    variant: String,
    req_per_sec: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
    server_usec_per_request: Vec<f64>,
    cpu_usec_per_request: Vec<f64>,
    non2xx: u64,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

fn start_redis() -> (Child, u16) {
    let module = repo().join("target/release/libredis_slidingwindow.so");
    assert!(module.exists(), "{} missing: make build", module.display());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child =
        Command::new(std::env::var_os("REDIS_SERVER").unwrap_or_else(|| "redis-server".into()))
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--loadmodule")
            .arg(&module)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut c) = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .and_then(|c| c.get_connection())
        {
            if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                break;
            }
        }
        assert!(Instant::now() < deadline, "redis did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, port)
}

async fn bench(o: Opts) {
    let (mut redis_child, redis_port) = start_redis();
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{redis_port}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut variants = vec!["none", "governor", "slidingwindow"];
    if node_script().is_some() && Command::new("node").arg("--version").output().is_ok() {
        variants.extend(["node-none", "node-slidingwindow"]);
    } else {
        eprintln!("node rows SKIPPED: no clients/node/build/bench/http.js (make bench-node builds it; or set SLIDINGWINDOW_NODE_BENCH)");
    }
    let mut rows: Vec<Row> = variants
        .iter()
        .map(|v| Row {
            variant: v.to_string(),
            ..Row::default()
        })
        .collect();
    for round in 0..o.rounds {
        let mut order: Vec<usize> = (0..variants.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let v = variants[i];
            let Some(app) = start_app(v, redis_port) else {
                eprintln!("{v}: did not start, skipped");
                continue;
            };
            load(app.port, o.connections, Duration::from_millis(500), None).await; // warm-up
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query(&mut con)
                .unwrap();
            let full = load(app.port, o.connections, o.duration, None).await;
            let (usec, _) = server_usec(&mut con);
            let c0 = cpu(app.child.id());
            let paced = load(app.port, o.connections, o.duration, Some(o.rate)).await;
            let c1 = cpu(app.child.id());
            let r = &mut rows[i];
            r.req_per_sec.push(full.requests as f64 / full.seconds);
            r.p50.push(full.p50_ms);
            r.p99.push(full.p99_ms);
            r.server_usec_per_request
                .push(usec / full.requests.max(1) as f64);
            r.cpu_usec_per_request
                .push((c1 - c0).as_secs_f64() * 1e6 / paced.requests.max(1) as f64);
            r.non2xx += full.non2xx + paced.non2xx;
            eprintln!(
                "round {round} {v}: {:.0} req/s, p99 {:.2} ms, server {:.2} us/req, cpu {:.1} us/req at {} req/s ({} paced)",
                full.requests as f64 / full.seconds,
                full.p99_ms,
                usec / full.requests.max(1) as f64,
                (c1 - c0).as_secs_f64() * 1e6 / paced.requests.max(1) as f64,
                o.rate,
                paced.requests
            );
        }
    }
    let _ = redis_child.kill();
    let _ = redis_child.wait();
    report(&o, &rows);
}

fn report(o: &Opts, rows: &[Row]) {
    let base = |node: bool| {
        rows.iter()
            .find(|r| r.variant == if node { "node-none" } else { "none" })
            .filter(|r| !r.cpu_usec_per_request.is_empty())
            .map(|r| median(&r.cpu_usec_per_request))
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split(' ').next().unwrap_or("?").to_string();
    let num = |v: f64| {
        if v.is_finite() {
            format!("{v:.3}")
        } else {
            "null".into()
        }
    };
    let mut apps = Vec::new();
    for r in rows.iter().filter(|r| !r.req_per_sec.is_empty()) {
        let cpu = median(&r.cpu_usec_per_request);
        let own = base(r.variant.starts_with("node-"))
            .map(|b| cpu - b)
            .unwrap_or(f64::NAN);
        apps.push(format!(
            "{{\"app\": \"{}\", \"req_per_sec\": {}, \"p50_ms\": {}, \"p99_ms\": {}, \"server_usec_per_request\": {}, \"cpu_usec_per_request\": {}, \"limiter_cpu_usec_per_request\": {}, \"non2xx\": {}}}",
            r.variant,
            num(median(&r.req_per_sec)),
            num(median(&r.p50)),
            num(median(&r.p99)),
            num(median(&r.server_usec_per_request)),
            num(cpu),
            num(own),
            r.non2xx
        ));
    }
    let json = format!(
        "{{\"connections\": {}, \"duration_s\": {}, \"rounds\": {}, \"rate\": {}, \"cores\": {cores}, \"load_average\": \"{load}\", \"apps\": [\n  {}\n]}}\n",
        o.connections,
        o.duration.as_secs(),
        o.rounds,
        o.rate,
        apps.join(",\n  ")
    );
    let dir = repo().join("bench/results");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("rust.json"), &json);
    }
    // The tables (rust.md and the README's block) are rendered from rust.json by
    // bench/readme_blocks.py, so that both say what the committed run says.
    print!("{json}");
    let status = Command::new(std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into()))
        .arg(repo().join("bench/readme_blocks.py"))
        .arg("--rust-md")
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        eprintln!("bench/readme_blocks.py --rust-md failed: bench/results/rust.md not rewritten");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if args.first().map(String::as_str) == Some("serve") {
        rt.block_on(serve(&args[1], args[2].parse().unwrap()));
        return;
    }
    let get = |name: &str, default: u64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let o = Opts {
        duration: Duration::from_secs(get("--duration", 5)),
        connections: get("--connections", 32) as usize,
        rounds: get("--rounds", 2) as usize,
        rate: get("--rate", 2000),
    };
    rt.block_on(bench(o));
}
