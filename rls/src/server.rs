//! The listeners: gRPC (RateLimitService v3 and grpc.health.v1) on GRPC_PORT, HTTP
//! (/healthcheck, /json) on PORT, /rlconfig on DEBUG_PORT, Prometheus on
//! PROMETHEUS_ADDR when USE_PROMETHEUS.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use slidingwindow_client::{DenyCache, Limiter};

use crate::metrics::Metrics;
use crate::service::{Failure, Sender, Service};
use crate::settings::{RedisType, Settings};

/// The gRPC face of the service.
#[derive(Clone)]
pub struct Grpc(pub Arc<Service>);

#[tonic::async_trait]
impl RateLimitService for Grpc {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        match self.0.should_rate_limit(request.get_ref()).await {
            Ok(r) => Ok(tonic::Response::new(r)),
            Err(f) => {
                log::debug!("ShouldRateLimit refused: {f:?}");
                Err(f.status())
            }
        }
    }
}

async fn json_handler(State(svc): State<Arc<Service>>, body: Bytes) -> Response {
    let req = match crate::json::request(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    match svc.should_rate_limit(&req).await {
        Ok(r) => {
            let status = match r.overall_code {
                2 => StatusCode::TOO_MANY_REQUESTS,
                1 => StatusCode::OK,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            let body = crate::json::response(&r).to_string();
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        Err(Failure::InvalidArgument(m)) => {
            (StatusCode::BAD_REQUEST, format!("{m}\n")).into_response()
        }
        Err(Failure::Unavailable(m)) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{m}\n")).into_response()
        }
        Err(Failure::Internal(m)) => {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{m}\n")).into_response()
        }
    }
}

fn metrics_text(svc: &Service) -> String {
    let stats = svc.limiter.stats();
    svc.metrics.render(
        svc.limiter.deny_cache().map(|c| c.stats().hits),
        stats.down,
        stats.sent,
    )
}

/// The HTTP routes of PORT.
pub fn http_router(svc: Arc<Service>) -> Router {
    Router::new()
        .route("/healthcheck", get(|| async { "OK" }))
        .route("/json", post(json_handler))
        .with_state(svc)
}

fn debug_router(svc: Arc<Service>) -> Router {
    Router::new()
        .route(
            "/rlconfig",
            get(|State(s): State<Arc<Service>>| async move { s.config.get().dump() }),
        )
        .route(
            "/stats",
            get(|State(s): State<Arc<Service>>| async move { metrics_text(&s) }),
        )
        .with_state(svc)
}

fn prometheus_router(svc: Arc<Service>, path: &str) -> Router {
    Router::new()
        .route(
            path,
            get(|State(s): State<Arc<Service>>| async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    metrics_text(&s),
                )
            }),
        )
        .with_state(svc)
}

/// Connects to Redis, retrying every second until it answers (logged).
pub async fn connect(s: &Settings) -> Result<Sender, String> {
    let urls = s.redis_urls();
    if urls.is_empty() {
        return Err("REDIS_URL is empty".into());
    }
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let r = match s.redis_type {
            RedisType::Single => single(&urls[0], s).await,
            RedisType::Cluster => redis::cluster::ClusterClient::builder(urls.clone())
                .connection_timeout(s.redis_timeout)
                .response_timeout(s.redis_timeout)
                .build()
                .map(|c| Conn::ClusterClient(Box::new(c)))
                .map_err(|e| e.to_string()),
        };
        let r = match r {
            Ok(Conn::Single(x)) => Ok(x),
            Ok(Conn::ClusterClient(c)) => c
                .get_async_connection()
                .await
                .map(Sender::Cluster)
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        match r {
            Ok(x) => return Ok(x),
            Err(e) if attempt == 1 || attempt.is_multiple_of(30) => {
                log::warn!(
                    "redis at {} not reachable yet ({e}); retrying every second",
                    s.redis_url
                );
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

enum Conn {
    Single(Sender),
    ClusterClient(Box<redis::cluster::ClusterClient>),
}

async fn single(url: &str, s: &Settings) -> Result<Conn, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let cfg = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(s.redis_timeout))
        .set_response_timeout(Some(s.redis_timeout))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(500));
    let mut pool = Vec::with_capacity(s.redis_pool_size);
    for _ in 0..s.redis_pool_size {
        pool.push(
            client
                .get_connection_manager_with_config(cfg.clone())
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    Ok(Conn::Single(Sender::Single(Arc::new((
        pool,
        AtomicUsize::new(0),
    )))))
}

/// Builds the service from settings: config loaded and watched, Redis connected.
pub async fn build(settings: Settings) -> Result<Arc<Service>, String> {
    let metrics = Arc::new(Metrics::default());
    let config = crate::loader::start(
        settings.config_dir(),
        settings.runtime_ignore_dotfiles,
        settings.merge_domain_config,
        settings.reload_interval,
        metrics.clone(),
    )
    .map_err(|e| format!("configuration refused: {e}"))?;
    let sender = connect(&settings).await?;
    let deny = (settings.local_cache_size_in_bytes > 0).then(|| {
        // An entry costs about 128 bytes (key, limits, deadline).
        let entries = (settings.local_cache_size_in_bytes / 128).max(1) as usize;
        DenyCache::new(entries, Duration::from_secs(1))
    });
    let limiter = Limiter::builder(sender)
        .prefix("")
        .timeout(settings.redis_timeout)
        .fail_open(true)
        .deny_cache(deny)
        .build();
    Ok(Arc::new(Service {
        config,
        limiter,
        settings,
        metrics,
    }))
}

async fn bind(host: &str, port: u16) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind((host, port))
        .await
        .map_err(|e| format!("cannot listen on {host}:{port}: {e}"))
}

/// Serves until ctrl-c / SIGTERM.
pub async fn serve(svc: Arc<Service>) -> Result<(), String> {
    let s = svc.settings.clone();
    let grpc_listener = bind(&s.grpc_host, s.grpc_port).await?;
    let http_listener = bind(&s.host, s.port).await?;
    let debug_listener = bind(&s.debug_host, s.debug_port).await?;
    let grpc_addr: SocketAddr = grpc_listener.local_addr().map_err(|e| e.to_string())?;
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<RateLimitServiceServer<Grpc>>()
        .await;
    let grpc = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(RateLimitServiceServer::new(Grpc(svc.clone())))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
            shutdown(),
        );
    let http =
        axum::serve(http_listener, http_router(svc.clone())).with_graceful_shutdown(shutdown());
    let debug =
        axum::serve(debug_listener, debug_router(svc.clone())).with_graceful_shutdown(shutdown());
    let prom = if s.use_prometheus {
        let l = tokio::net::TcpListener::bind(s.prometheus_bind())
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", s.prometheus_addr))?;
        Some(
            axum::serve(l, prometheus_router(svc.clone(), &s.prometheus_path))
                .with_graceful_shutdown(shutdown()),
        )
    } else {
        None
    };
    log::warn!(
        "serving gRPC on {grpc_addr}, HTTP on {}:{}, debug on {}:{}{}",
        s.host,
        s.port,
        s.debug_host,
        s.debug_port,
        if s.use_prometheus {
            format!(", Prometheus on {}{}", s.prometheus_addr, s.prometheus_path)
        } else {
            String::new()
        }
    );
    let prom = async move {
        match prom {
            Some(p) => p.await.map_err(|e| e.to_string()),
            None => Ok(()),
        }
    };
    let (g, h, d, p) = tokio::join!(grpc, http, debug, prom);
    g.map_err(|e| e.to_string())?;
    h.map_err(|e| e.to_string())?;
    d.map_err(|e| e.to_string())?;
    p
}

static STOPS: AtomicUsize = AtomicUsize::new(0);

async fn shutdown() {
    let term = async {
        #[cfg(unix)]
        {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        }
        #[cfg(not(unix))]
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
    if STOPS.fetch_add(1, Ordering::Relaxed) == 0 {
        log::warn!("shutting down");
    }
}
