//! A runnable axum gateway limited by redis-slidingwindow. See README.md beside it.
//!
//!     cargo run -p redis-slidingwindow-client --example gateway
//!     REDIS_URL=redis://127.0.0.1:6379 LISTEN=127.0.0.1:3000 RATE="100/minute" ...

mod app;

use std::net::SocketAddr;
use std::time::Duration;

use slidingwindow_client::{Limiter, Policy, TrustedProxies};

/// The smallest logger: the limiter's outage and recovery lines on stderr.
struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!("{} {}: {}", r.level(), r.target(), r.args());
        }
    }
    fn flush(&self) {}
}

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if log::set_logger(&Stderr).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
    let url = env("REDIS_URL", "redis://127.0.0.1:6379");
    let listen: SocketAddr = env("LISTEN", "127.0.0.1:3000").parse()?;
    let policy = Policy::rates("api", &env("RATE", "100/minute"))?;
    let trusted = TrustedProxies::try_new(
        env("TRUSTED_PROXIES", "")
            .split(',')
            .filter(|s| !s.is_empty()),
    )?;
    // Short client-side timeouts: the limiter's own 500 ms timeout bounds every call, and
    // a reconnect must not queue requests behind a long backoff.
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_response_timeout(Some(Duration::from_millis(500)))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(500));
    let redis = redis::Client::open(url.as_str())?
        .get_connection_manager_with_config(config)
        .await?;
    let limiter = Limiter::new(redis);
    let app = app::router(limiter, policy, trusted);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!("gateway on http://{listen} (Redis {url})");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
