//! ACL: the grants the Functions library needs, and the error of a call refused by ACL.
//! The rules and texts of the Python client's `permissions.py`.
//!
//! A function's own `redis.call`s are checked against the caller's ACL, so the
//! application's user needs `FCALL`/`FCALL_RO` and every command the library calls. A
//! call refused for lack of a permission (a command inside the library, the call itself,
//! or its key) is [`Error::MissingPermission`](crate::Error::MissingPermission): a
//! configuration error, never an outage. On Redis 7.0+ the limiter asks the library which
//! commands are missing (`FCALL_RO slidingwindow_permissions 1 <key>`); on Redis 6.2,
//! which cannot tell, the error names the whole list.

use redis::RedisError;

use crate::error::Error;

/// What the library calls on Redis 7.0+ (`slidingwindow_permissions` checks these).
pub const LIBRARY_COMMANDS: [&str; 5] = ["time", "get", "set", "pexpiretime", "pexpireat"];
/// What the library calls through EVAL on Redis 6.2.
pub const LIBRARY_COMMANDS_62: [&str; 4] = ["time", "get", "set", "pttl"];
/// README.md, "ACL": the application's user on Redis 7.0+ and Valkey.
pub const LIBRARY_LINE: &str =
    "ACL SETUSER app on >secret ~rate:* +fcall +fcall_ro +time +get +set +pexpiretime +pexpireat";
/// The same on Redis 6.2.
pub const LIBRARY_LINE_62: &str =
    "ACL SETUSER app on >secret ~rate:* +evalsha +eval +time +get +set +pttl";
/// The operator who loads the library.
pub const OPERATOR_LINE: &str =
    "ACL SETUSER sw-admin on >admin-secret +function|load +function|list +fcall_ro";

/// What was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A command inside the library.
    Script,
    /// The call's key.
    Key,
    /// The call itself.
    Command,
}

/// Which code answered the refused call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    Module,
    Library,
    Eval,
}

fn text(e: &RedisError) -> String {
    e.to_string()
}

/// "... permissions to run the 'fcall' command" -> `fcall`.
fn named_command(e: &RedisError) -> Option<String> {
    let t = text(e);
    let start = t.find("permissions to run the '")? + "permissions to run the '".len();
    let end = t[start..].find('\'')?;
    Some(t[start..start + end].to_ascii_lowercase())
}

/// Redis 7.2+ and Valkey name the user: "User app has no permissions ...".
fn user(e: &RedisError) -> String {
    let t = text(e);
    t.split_whitespace()
        .collect::<Vec<_>>()
        .windows(4)
        .find(|w| w[0] == "User" && w[2] == "has" && w[3] == "no")
        .map(|w| w[1].to_string())
        .unwrap_or_else(|| "<user>".into())
}

/// What `e` says was refused, or `None` when it is no ACL refusal.
pub(crate) fn refusal(e: &RedisError) -> Option<Refused> {
    let lower = text(e).to_ascii_lowercase();
    if lower.contains("the user executing the script can't run this command")
        || lower.contains("acl failure in script")
    {
        return Some(Refused::Script);
    }
    if e.code() == Some("NOPERM") {
        if lower.contains("permissions to access one of the keys")
            || lower.contains("no permissions to access a key")
        {
            return Some(Refused::Key);
        }
        if named_command(e).is_some() {
            return Some(Refused::Command);
        }
    }
    None
}

/// The error for `e`, refused as `kind` on `path`; `listed`: what
/// `slidingwindow_permissions` answered (`None`: not asked, or it failed).
pub(crate) fn error(
    e: &RedisError,
    kind: Refused,
    path: Path,
    key: Option<&str>,
    listed: Option<Vec<String>>,
) -> Error {
    let named = named_command(e);
    let user = user(e);
    let (whole, line): (&[&str], &str) = match path {
        Path::Eval => (&LIBRARY_COMMANDS_62, LIBRARY_LINE_62),
        _ => (&LIBRARY_COMMANDS, LIBRARY_LINE),
    };
    if kind == Refused::Key {
        let message = format!(
            "{e} -- the Redis user may not access the key '{}': add the limiter's key prefix to \
             its key patterns, ACL SETUSER {user} ~<prefix>* (the clients' default prefix is \
             rate:); the least-privilege line: {line}",
            key.unwrap_or("")
        );
        return Error::MissingPermission {
            commands: Vec::new(),
            message,
        };
    }
    let missing: Option<Vec<String>> =
        listed.map(|l| l.into_iter().map(|c| c.to_ascii_lowercase()).collect());
    let mut commands: Vec<String> = match kind {
        Refused::Command => {
            let mut c: Vec<String> = named.into_iter().collect();
            for m in missing.unwrap_or_default() {
                if !c.contains(&m) {
                    c.push(m);
                }
            }
            c
        }
        _ if path == Path::Eval => whole.iter().map(|s| s.to_string()).collect(),
        _ => match missing {
            Some(m) if !m.is_empty() => m,
            _ => whole.iter().map(|s| s.to_string()).collect(),
        },
    };
    commands.dedup();
    let grant: Vec<String> = commands.iter().map(|c| format!("+{c}")).collect();
    let advice = if path == Path::Module && commands.iter().all(|c| c.starts_with("slidingwindow."))
    {
        "the module's lines are in README.md, ACL (+@read +@write on Redis 7.2+ and Valkey; the \
         commands by name on Redis 7.0)"
            .to_string()
    } else {
        let a = format!("the library's least-privilege line (README.md, ACL): {line}");
        if path == Path::Eval && kind == Refused::Script {
            format!("Redis 6.2 cannot say which of them is missing; {a}")
        } else {
            a
        }
    };
    let message = format!(
        "{e} -- the Redis user may not run {}. Grant {}: ACL SETUSER {user} {}; {advice}",
        commands.join(", "),
        if commands.len() == 1 { "it" } else { "them" },
        grant.join(" ")
    );
    Error::MissingPermission { commands, message }
}
