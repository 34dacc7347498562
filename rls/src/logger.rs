//! A small `log` backend on stderr: LOG_LEVEL and LOG_FORMAT (text or json).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

struct Logger {
    json: bool,
}

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let ts = format!("{}.{:03}", t.as_secs(), t.subsec_millis());
        let level = r.level().as_str().to_ascii_lowercase();
        let line = if self.json {
            serde_json::json!({"@timestamp": ts, "level": level, "msg": r.args().to_string(), "target": r.target()})
                .to_string()
        } else {
            format!("time={ts} level={level} msg={:?}", r.args().to_string())
        };
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }

    fn flush(&self) {}
}

/// Installs the logger (once; later calls change nothing).
pub fn init(level: log::LevelFilter, json: bool) {
    if log::set_boxed_logger(Box::new(Logger { json })).is_ok() {
        log::set_max_level(level);
    }
}
