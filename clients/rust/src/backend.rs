//! Which server-side code answers a call: the module's commands or the Functions library.
//!
//! The same rules as the Python client's `backend.py`:
//!
//! * [`Backend::Auto`] (the default): the module when the server has it, else the
//!   bundled library. The first call is the module's command itself, so a server with
//!   the module pays nothing for detection.
//! * [`Backend::Module`]: `SLIDINGWINDOW.*` only.
//! * [`Backend::Library`]: the library only.
//!
//! Looking for the library reads its `slidingwindow_version` (on every primary of a
//! cluster) and replaces one older than this crate's with `FUNCTION LOAD REPLACE`; a newer
//! one is kept. A user who may not load it gets [`Error::LibraryNotLoaded`], naming the
//! command the operator runs; when every primary already holds an older library that
//! this user may not replace, that one is used as it is, with one warning naming the
//! operator's command (as the Node client does). Where the server has no `FUNCTION` (Redis 6.2) calls go
//! through `EVALSHA <sha> 1 key <function name> ...`, and `EVAL` with the body once on
//! `NOSCRIPT` (after `SCRIPT FLUSH` or a restart).
//!
//! Only these errors make the limiter look again, inside the same call, which then goes
//! through: with `Auto`, the module's command is unknown (a failover or restart onto a
//! server without it); `Function not found` (`FUNCTION FLUSH`; a failover or restart onto
//! a node without it). None of them is an outage.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use redis::{Cmd, RedisError, Value};

use crate::error::Error;
use crate::send::SendCommand;

/// Which server-side code a limiter uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// The module when the server has it, else the bundled Functions library.
    #[default]
    Auto,
    /// The module's `SLIDINGWINDOW.*` commands only.
    Module,
    /// The Functions library only (`FCALL`, or `EVALSHA` on Redis 6.2).
    Library,
}

/// What a limiter sends, once decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `SLIDINGWINDOW.CHECK key ...`
    Module,
    /// `FCALL slidingwindow_check 1 key ...` (`FCALL_RO` for PEEK and COUNTS)
    Function,
    /// `EVALSHA <sha> 1 key slidingwindow_check ...` (`EVAL` on `NOSCRIPT`)
    Eval,
}

/// The Functions library shipped in this crate (a copy of the repository's
/// `lua/slidingwindow.lua`, proved identical by `tests/library_copy.rs`).
pub mod library {
    /// What `FUNCTION LOAD` takes: the whole file.
    pub const CODE: &str = include_str!("../slidingwindow.lua");

    /// What `EVAL`/`EVALSHA` take: the file without its `#!lua` line.
    pub fn body() -> &'static str {
        CODE.split_once('\n').map(|(_, b)| b).unwrap_or(CODE)
    }

    /// The body's sha1, as `EVALSHA` names it.
    pub fn sha() -> &'static str {
        static SHA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        SHA.get_or_init(|| sha1_smol::Sha1::from(body()).digest().to_string())
    }

    /// The library's `slidingwindow_version` (its `local VERSION = '...'` line).
    pub fn version() -> &'static str {
        CODE.lines()
            .find_map(|l| l.strip_prefix("local VERSION = '")?.strip_suffix('\''))
            .expect("slidingwindow.lua has a `local VERSION = '...'` line")
    }

    /// What an operator runs when the application's user may not load the library.
    pub const LOAD_COMMAND: &str =
        "redis-cli FUNCTION LOAD REPLACE \"$(cat lua/slidingwindow.lua)\"";

    /// `"0.2.0"` -> `[0, 2, 0]`; anything unreadable sorts first (is replaced).
    pub fn version_parts(v: &str) -> Vec<u64> {
        let parts: Result<Vec<u64>, _> = v.split('.').map(str::parse).collect();
        parts.unwrap_or_default()
    }

    /// Whether a loaded library's version is older than the shipped one.
    pub fn is_older(v: &str) -> bool {
        version_parts(v) < version_parts(version())
    }
}

/// One of the four operations, as the module names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `SLIDINGWINDOW.CHECK`
    Check,
    /// `SLIDINGWINDOW.PEEK`
    Peek,
    /// `SLIDINGWINDOW.REFUND`
    Refund,
    /// `SLIDINGWINDOW.COUNTS`
    Counts,
}

impl Op {
    /// The module's command name.
    pub fn command(self) -> &'static str {
        match self {
            Op::Check => "SLIDINGWINDOW.CHECK",
            Op::Peek => "SLIDINGWINDOW.PEEK",
            Op::Refund => "SLIDINGWINDOW.REFUND",
            Op::Counts => "SLIDINGWINDOW.COUNTS",
        }
    }

    /// The library's function name.
    pub fn function(self) -> &'static str {
        match self {
            Op::Check => "slidingwindow_check",
            Op::Peek => "slidingwindow_peek",
            Op::Refund => "slidingwindow_refund",
            Op::Counts => "slidingwindow_counts",
        }
    }

    /// Whether the library's function is `no-writes` (sent with `FCALL_RO`).
    pub fn readonly(self) -> bool {
        matches!(self, Op::Peek | Op::Counts)
    }
}

/// One call as the module would take it: the operation, the key, the other arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wire {
    /// Which command.
    pub op: Op,
    /// The Redis key.
    pub key: String,
    /// Everything after the key, as the module takes it (`limit window [now] ...`).
    pub args: Vec<String>,
}

impl Wire {
    /// The command that carries this call in `mode`.
    pub fn command(&self, mode: Mode) -> Cmd {
        let mut cmd = match mode {
            Mode::Module => {
                let mut c = redis::cmd(self.op.command());
                c.arg(&self.key);
                c
            }
            Mode::Function => {
                let mut c = redis::cmd(if self.op.readonly() {
                    "FCALL_RO"
                } else {
                    "FCALL"
                });
                c.arg(self.op.function()).arg(1).arg(&self.key);
                c
            }
            Mode::Eval => {
                let mut c = redis::cmd("EVALSHA");
                c.arg(library::sha())
                    .arg(1)
                    .arg(&self.key)
                    .arg(self.op.function());
                c
            }
        };
        cmd.arg(&self.args);
        cmd
    }

    /// The same call with the library's body (`EVAL`), after `NOSCRIPT`.
    fn eval(&self) -> Cmd {
        let mut c = redis::cmd("EVAL");
        c.arg(library::body())
            .arg(1)
            .arg(&self.key)
            .arg(self.op.function())
            .arg(&self.args);
        c
    }
}

fn text(e: &RedisError) -> String {
    e.to_string().to_ascii_lowercase()
}

/// `ERR unknown command 'NAME'` (Redis 6.2 quotes it with backticks).
fn unknown_command(e: &RedisError, name: &str) -> bool {
    let t = text(e);
    t.contains(&name.to_ascii_lowercase())
        && (t.contains("unknown command") || t.contains("command doesn't exist"))
}

fn function_missing(e: &RedisError) -> bool {
    text(e).contains("function not found")
}

fn noscript(e: &RedisError) -> bool {
    e.code() == Some("NOSCRIPT")
}

fn noperm(e: &RedisError) -> bool {
    e.code() == Some("NOPERM")
}

fn not_loaded_message(cause: &RedisError) -> String {
    format!(
        "the slidingwindow module is not on this server and the slidingwindow library {} is \
         not loaded, and this user may not load it ({cause}). An operator loads it once, on \
         every primary: {} (lua/slidingwindow.lua of the repository, also shipped in the Rust \
         crate as slidingwindow.lua)",
        library::version(),
        library::LOAD_COMMAND
    )
}

/// The decision of one limiter: the choice as given, the mode once known.
#[derive(Debug)]
pub(crate) struct Chooser {
    pub(crate) choice: Backend,
    mode: Mutex<Option<Mode>>,
    /// Bumped by every detection: a call that saw an older one reuses the newer answer.
    generation: AtomicU64,
    detect: tokio::sync::Mutex<()>,
    pub(crate) detections: AtomicU64,
    pub(crate) loads: AtomicU64,
    warned_old: std::sync::atomic::AtomicBool,
}

async fn reply<S: SendCommand>(sender: &S, cmd: Cmd) -> Result<Value, RedisError> {
    sender.send(cmd).await.and_then(Value::extract_error)
}

impl Chooser {
    pub(crate) fn new(choice: Backend) -> Chooser {
        Chooser {
            choice,
            // Auto tries the module first: its first call is the call itself.
            mode: Mutex::new(match choice {
                Backend::Library => None,
                _ => Some(Mode::Module),
            }),
            generation: AtomicU64::new(0),
            detect: tokio::sync::Mutex::new(()),
            detections: AtomicU64::new(0),
            loads: AtomicU64::new(0),
            warned_old: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The mode in use (`None` while undecided).
    pub(crate) fn mode(&self) -> Option<Mode> {
        *self.mode.lock().unwrap()
    }

    /// One call of `wire`: its reply, after looking for the library where needed.
    pub(crate) async fn call<S: SendCommand>(
        &self,
        sender: &S,
        wire: &Wire,
    ) -> Result<Value, Error> {
        let mut generation = self.generation.load(Ordering::Acquire);
        let mut mode = match self.mode() {
            Some(m) => m,
            None => self.find_library(sender, generation).await?,
        };
        for attempt in 1..=2 {
            let err = match reply(sender, wire.command(mode)).await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if mode == Mode::Eval && noscript(&err) {
                return match reply(sender, wire.eval()).await {
                    Ok(v) => Ok(v),
                    Err(e) => Err(self.explain_now(sender, wire, mode, e).await),
                };
            }
            if attempt == 2 || !self.gone(&err, mode) {
                return Err(self.explain_now(sender, wire, mode, err).await);
            }
            // The module or the library is not there (any more): look again, call again.
            if generation == self.generation.load(Ordering::Acquire) {
                self.mode.lock().unwrap().take();
            }
            mode = self.find_library(sender, generation).await?;
            generation = self.generation.load(Ordering::Acquire);
        }
        unreachable!("the loop returns")
    }

    /// A refused call as the error to return: an ACL refusal becomes
    /// `MissingPermission`, naming the commands (on the FCALL path from the library's
    /// `slidingwindow_permissions`, else every command the library needs).
    async fn explain_now<S: SendCommand>(
        &self,
        sender: &S,
        wire: &Wire,
        mode: Mode,
        e: RedisError,
    ) -> Error {
        use crate::permissions::{error, refusal, Path, Refused};
        let Some(kind) = refusal(&e) else {
            return Error::Redis(e);
        };
        let path = match mode {
            Mode::Module => Path::Module,
            Mode::Function => Path::Library,
            Mode::Eval => Path::Eval,
        };
        let mut listed = None;
        if mode == Mode::Function && kind != Refused::Key {
            let mut c = redis::cmd("FCALL_RO");
            c.arg("slidingwindow_permissions").arg(1).arg(&wire.key);
            if let Ok(Value::Array(items)) = reply(sender, c).await {
                listed = Some(
                    items
                        .iter()
                        .filter_map(|v| redis::from_redis_value_ref::<String>(v).ok())
                        .collect(),
                );
            }
        }
        error(&e, kind, path, Some(&wire.key), listed)
    }

    fn gone(&self, e: &RedisError, mode: Mode) -> bool {
        match mode {
            Mode::Module => self.choice == Backend::Auto && unknown_command(e, "slidingwindow."),
            Mode::Function => function_missing(e) || unknown_command(e, "fcall"),
            Mode::Eval => false,
        }
    }

    /// Uses the loaded library, replaces an older one, loads a missing one, or falls back
    /// to EVAL where the server has no FUNCTION. One detection at a time; a call that
    /// waited for another's uses its answer.
    async fn find_library<S: SendCommand>(&self, sender: &S, seen: u64) -> Result<Mode, Error> {
        let _one = self.detect.lock().await;
        if self.generation.load(Ordering::Acquire) != seen {
            if let Some(m) = self.mode() {
                return Ok(m);
            }
        }
        let mode = self.detect_now(sender).await?;
        *self.mode.lock().unwrap() = Some(mode);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(mode)
    }

    async fn detect_now<S: SendCommand>(&self, sender: &S) -> Result<Mode, Error> {
        self.detections.fetch_add(1, Ordering::Relaxed);
        let mut version = redis::cmd("FCALL_RO");
        version.arg("slidingwindow_version").arg(0);
        let replies = sender.send_to_primaries(version).await?;
        let mut load = false;
        // Every primary holds some library (maybe older): usable as it is if this user may
        // not replace it.
        let mut every_primary_has_one = true;
        let mut oldest = String::new();
        for r in replies {
            match r.and_then(Value::extract_error) {
                Ok(v) => {
                    let v: String = redis::from_redis_value(v).map_err(|e| {
                        Error::UnexpectedReply(format!("slidingwindow_version: {e}"))
                    })?;
                    if library::is_older(&v) {
                        load = true;
                        oldest = v;
                    }
                }
                Err(e) if unknown_command(&e, "fcall_ro") => return Ok(Mode::Eval),
                Err(e) if crate::permissions::refusal(&e).is_some() => {
                    // FCALL_RO itself refused.
                    let kind = crate::permissions::refusal(&e).unwrap();
                    return Err(crate::permissions::error(
                        &e,
                        kind,
                        crate::permissions::Path::Library,
                        None,
                        None,
                    ));
                }
                Err(e) if function_missing(&e) => {
                    load = true;
                    every_primary_has_one = false;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if load {
            let mut cmd = redis::cmd("FUNCTION");
            cmd.arg("LOAD").arg("REPLACE").arg(library::CODE);
            let replies = sender.send_to_primaries(cmd).await?;
            for r in replies {
                match r.and_then(Value::extract_error) {
                    Ok(_) => {}
                    Err(e) if noperm(&e) && every_primary_has_one => {
                        // An app upgraded before its operator keeps limiting, on the
                        // older library, with one warning per limiter.
                        if !self.warned_old.swap(true, Ordering::Relaxed) {
                            log::warn!(
                                target: "slidingwindow",
                                "rate limiter: the loaded slidingwindow library {oldest} is older \
                                 than this crate's {} and this user may not replace it ({e}); \
                                 using it as it is. An operator replaces it: {}",
                                library::version(),
                                library::LOAD_COMMAND
                            );
                        }
                        return Ok(Mode::Function);
                    }
                    Err(e) if noperm(&e) => {
                        return Err(Error::LibraryNotLoaded(not_loaded_message(&e)))
                    }
                    // FUNCTION refused by name (renamed away): EVAL still works.
                    Err(e) if unknown_command(&e, "function") => return Ok(Mode::Eval),
                    Err(e) => return Err(e.into()),
                }
            }
            self.loads.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Mode::Function)
    }
}
