//! `slidingwindow-ratelimit`: configured by envoyproxy/ratelimit's environment variables.

use slidingwindow_ratelimit::{logger, server, settings::Settings};

#[tokio::main]
async fn main() {
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            logger::init(log::LevelFilter::Error, false);
            log::error!("cannot start: {e}");
            std::process::exit(2);
        }
    };
    logger::init(settings.log_level, settings.log_json);
    for u in &settings.unsupported {
        log::warn!("unsupported setting: {u}");
    }
    let svc = match server::build(settings).await {
        Ok(s) => s,
        Err(e) => {
            log::error!("cannot start: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = server::serve(svc).await {
        log::error!("{e}");
        std::process::exit(1);
    }
}
