//! The configuration files: `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`,
//! every file under it (subfolders too), read again every `RUNTIME_RELOAD_INTERVAL`
//! (1 s). A change is loaded whole; a bad file is logged with its file, line and reason
//! and the configuration in force keeps serving.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::config::{Config, ConfigError};
use crate::metrics::Metrics;

/// The files under `dir`, sorted by path: (path, contents). A missing folder is empty.
pub fn read_dir(dir: &Path, ignore_dotfiles: bool) -> std::io::Result<Vec<(String, String)>> {
    fn walk(d: &Path, dot: bool, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for e in std::fs::read_dir(d)? {
            let e = e?;
            let name = e.file_name();
            if dot && name.to_string_lossy().starts_with('.') {
                continue;
            }
            let p = e.path();
            // metadata() follows symlinks: a ConfigMap's ..data links are read through.
            let md = std::fs::metadata(&p)?;
            if md.is_dir() {
                walk(&p, dot, out)?;
            } else if md.is_file() {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut paths = Vec::new();
    match walk(dir, ignore_dotfiles, &mut paths) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    }
    paths.sort();
    let mut files = Vec::new();
    for p in paths {
        // A Kubernetes ConfigMap folder holds each file twice (..2024_xx/f.yaml and f.yaml
        // through ..data): read only the names a user wrote.
        if p.components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with(".."))
        {
            continue;
        }
        let text = std::fs::read_to_string(&p)?;
        files.push((p.display().to_string(), text));
    }
    Ok(files)
}

/// The configuration in force, swapped whole on a good reload.
#[derive(Clone, Default)]
pub struct Current(Arc<RwLock<Arc<Config>>>);

impl Current {
    pub fn new(c: Config) -> Current {
        Current(Arc::new(RwLock::new(Arc::new(c))))
    }

    pub fn get(&self) -> Arc<Config> {
        match self.0.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    pub fn set(&self, c: Config) {
        match self.0.write() {
            Ok(mut g) => *g = Arc::new(c),
            Err(p) => *p.into_inner() = Arc::new(c),
        }
    }
}

/// Reads and loads the folder once.
pub fn load_dir(
    dir: &Path,
    ignore_dotfiles: bool,
    merge: bool,
) -> Result<(Config, Vec<(String, String)>), ConfigError> {
    let files = read_dir(dir, ignore_dotfiles)
        .map_err(|e| ConfigError(format!("{}: {e}", dir.display())))?;
    let cfg = Config::load(&files, merge)?;
    Ok((cfg, files))
}

/// Loads the folder now (a bad folder at start: the error), then watches it in a task.
pub fn start(
    dir: PathBuf,
    ignore_dotfiles: bool,
    merge: bool,
    interval: Duration,
    metrics: Arc<Metrics>,
) -> Result<Current, ConfigError> {
    let (cfg, mut seen) = load_dir(&dir, ignore_dotfiles, merge)?;
    if cfg.is_empty() {
        log::warn!(
            "no rate limit configuration in {}: every descriptor is allowed",
            dir.display()
        );
    } else {
        log::info!(
            "loaded {} file(s) from {}: domains {:?}",
            cfg.files.len(),
            dir.display(),
            cfg.domains()
        );
    }
    metrics.config_load(true);
    let current = Current::new(cfg);
    let cur = current.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            let files = match read_dir(&dir, ignore_dotfiles) {
                Ok(f) => f,
                Err(e) => {
                    log::error!(
                        "error reading {}: {e}; the configuration in force keeps serving",
                        dir.display()
                    );
                    continue;
                }
            };
            if files == seen {
                continue;
            }
            match Config::load(&files, merge) {
                Ok(cfg) => {
                    log::warn!(
                        "reloaded the configuration from {}: domains {:?}",
                        dir.display(),
                        cfg.domains()
                    );
                    cur.set(cfg);
                    metrics.config_load(true);
                }
                Err(e) => {
                    log::error!("error loading new configuration: {e}; the configuration in force keeps serving");
                    metrics.config_load(false);
                }
            }
            seen = files;
        }
    });
    Ok(current)
}
