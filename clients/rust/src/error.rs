//! The errors a call can return, and which of them are outages.

use std::fmt;
use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind};

/// What a limiter call can fail with.
///
/// Outages (the server unreachable, frozen, loading, failing over) are **not** returned:
/// the circuit answers those without Redis (fail-open or fail-closed, see
/// [`Decision::degraded`](crate::Decision::degraded)). What is returned is a
/// configuration or programming error that no probe can repair.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Error {
    /// An error reply or client error that is no outage (`WRONGTYPE`, an argument the
    /// server refused, a wrong password, ...).
    Redis(RedisError),
    /// No reply within the limiter's per-call timeout (an outage: only seen by
    /// [`LimiterBuilder::on_error`](crate::LimiterBuilder::on_error) hooks).
    Timeout(Duration),
    /// The server has neither the module nor the Functions library, and this user may not
    /// load the library (`NOPERM` on `FUNCTION LOAD`). The message names the operator's
    /// command.
    LibraryNotLoaded(String),
    /// A call refused by ACL. `commands` are the lower-case command names this user may
    /// not run; the message names the `ACL SETUSER` line that fixes it.
    MissingPermission {
        /// The missing commands, lower case.
        commands: Vec<String>,
        /// What to run, in words.
        message: String,
    },
    /// The call's own arguments are wrong (caught before any I/O).
    InvalidArgument(String),
    /// The server answered something this client cannot read.
    UnexpectedReply(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Redis(e) => write!(f, "{e}"),
            Error::Timeout(t) => write!(f, "no reply from Redis within {} ms", t.as_millis()),
            Error::LibraryNotLoaded(m) => f.write_str(m),
            Error::MissingPermission { message, .. } => f.write_str(message),
            Error::InvalidArgument(m) => f.write_str(m),
            Error::UnexpectedReply(m) => write!(f, "unexpected reply: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<RedisError> for Error {
    fn from(e: RedisError) -> Error {
        Error::Redis(e)
    }
}

impl From<crate::rates::RateError> for Error {
    fn from(e: crate::rates::RateError) -> Error {
        Error::InvalidArgument(e.0)
    }
}

/// Error codes that are configuration, whatever the client library calls them.
const CONFIG_CODES: [&str; 3] = ["NOAUTH", "WRONGPASS", "NOPERM"];
/// Error codes that are states of the server (can end with nobody touching the app).
const OUTAGE_CODES: [&str; 6] = [
    "LOADING",
    "READONLY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "OOM",
    "TRYAGAIN",
];

/// Whether a redis-rs error means Redis cannot answer now (an outage), not that the call
/// is wrong. The same table as the Python and Node clients'.
pub fn is_outage(e: &RedisError) -> bool {
    if let Some(code) = e.code() {
        if CONFIG_CODES.contains(&code) {
            return false;
        }
        if OUTAGE_CODES.contains(&code) {
            return true;
        }
    }
    match e.kind() {
        ErrorKind::Io | ErrorKind::ClusterConnectionNotFound => true,
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly,
        ) => true,
        ErrorKind::AuthenticationFailed => false,
        _ => {
            // Connection-level failures some paths report as client errors.
            e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
        }
    }
}

impl Error {
    /// Whether this is an outage (the circuit's business), not a configuration error.
    pub fn is_outage(&self) -> bool {
        match self {
            Error::Timeout(_) => true,
            Error::Redis(e) => is_outage(e),
            _ => false,
        }
    }
}
