//! The crate's live tests run on real servers (crates/testservers: a module server, a
//! managed one, Redis 6.2, a cluster); this adds the async connections and limiters.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use slidingwindow_client::{Backend, Limiter};
pub use slidingwindow_testservers::{Cluster, Kind, Server};

/// A `ConnectionManager` with short timeouts, so that the outage tests stay short.
pub async fn manager(s: &Server) -> redis::aio::ConnectionManager {
    let cfg = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(300)))
        .set_response_timeout(Some(Duration::from_millis(400)))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(200));
    redis::Client::open(s.url())
        .unwrap()
        .get_connection_manager_with_config(cfg)
        .await
        .expect("connection manager")
}

/// A limiter on `s` through a `ConnectionManager`.
pub async fn limiter(s: &Server, backend: Backend) -> Limiter<redis::aio::ConnectionManager> {
    Limiter::builder(manager(s).await).backend(backend).build()
}

/// An async connection to the cluster.
pub async fn cluster_connection(c: &Cluster) -> redis::cluster_async::ClusterConnection {
    let urls: Vec<String> = c.nodes.iter().map(|n| n.url()).collect();

    redis::cluster::ClusterClient::builder(urls)
        .connection_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
        .get_async_connection()
        .await
        .expect("cluster connection")
}

/// Waits (at most 30 s) until `f` holds.
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
