//! Arity, key specs and COMMAND DOCS for every command, set through
//! RedisModule_SetCommandInfo (present on Redis 7.0 and every Valkey).

use anyhow::bail;
use libc::c_int;
use redis_module::raw;
use std::ffi::CStr;
use std::mem::{size_of, zeroed};
use std::ptr::{null, null_mut};

type Arg = raw::RedisModuleCommandArg;
use raw::{
    RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK as BLOCK,
    RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER as INTEGER,
    RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY as KEY,
    RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN as TOKEN,
};

/// What COMMAND DOCS says of a command, and its key spec.
#[derive(Clone, Copy)]
pub struct Doc {
    summary: &'static CStr,
    /// The release that introduced the command.
    since: &'static CStr,
    arity: c_int,
    /// RW + ACCESS + UPDATE for CHECK and REFUND; RO + ACCESS for the read-only ones.
    writes: bool,
    /// CHECK and PEEK take the limits; COUNTS takes one window.
    args: Args,
}

#[derive(Clone, Copy)]
enum Args {
    Limits,
    Window,
}

pub const CHECK: Doc = Doc {
    summary:
        c"Counts a request against one or more sliding-window limits and says whether it is allowed",
    since: c"0.1.0",
    arity: -4,
    writes: true,
    args: Args::Limits,
};

pub const PEEK: Doc = Doc {
    summary: c"Says what SLIDINGWINDOW.CHECK would answer now, without counting anything",
    since: c"0.1.0",
    arity: -4,
    writes: false,
    args: Args::Limits,
};

pub const REFUND: Doc = Doc {
    summary: c"Gives back what SLIDINGWINDOW.CHECK counted with the same arguments, newest first, keeping the key's expiry, and answers as PEEK then would",
    since: c"0.2.0",
    arity: -4,
    writes: true,
    args: Args::Limits,
};

pub const COUNTS: Doc = Doc {
    summary: c"The previous and current window's counts of one window size, and the time elapsed in the current window",
    since: c"0.2.0",
    arity: -3,
    writes: false,
    args: Args::Window,
};

fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType, summary: &'static CStr) -> Arg {
    // Zeroed is the C API's "unset" for every field (null pointers, no flags).
    let mut a: Arg = unsafe { zeroed() };
    a.name = name.as_ptr();
    a.type_ = kind;
    a.key_spec_index = -1;
    a.summary = summary.as_ptr();
    a
}

fn optional(mut a: Arg, token: Option<&'static CStr>) -> Arg {
    a.flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int;
    a.token = token.map_or(null(), CStr::as_ptr);
    a
}

fn key() -> Arg {
    let mut key = arg(
        c"key",
        KEY,
        c"The identity being limited: one key holds all its windows",
    );
    key.key_spec_index = 0;
    key
}

fn window() -> Arg {
    arg(
        c"window",
        INTEGER,
        c"Window length, in seconds (or milliseconds with MS)",
    )
}

fn now() -> Arg {
    optional(
        arg(
            c"now",
            INTEGER,
            c"Current time in the window's unit; the server clock when omitted",
        ),
        None,
    )
}

fn ms(summary: &'static CStr) -> Arg {
    optional(arg(c"ms", TOKEN, summary), Some(c"MS"))
}

/// Everything `arguments` points into, kept alive until SetCommandInfo has copied it.
struct ArgLists {
    top: Vec<Arg>,
    _limit_block: Vec<Arg>,
}

/// The documented arguments, each list ending with the zeroed entry the API expects.
fn arguments(args: Args) -> ArgLists {
    let limit = || {
        arg(
            c"limit",
            INTEGER,
            c"Requests allowed per window (0 denies everything)",
        )
    };
    let end: Arg = unsafe { zeroed() };
    match args {
        Args::Limits => {
            let mut block = vec![limit(), window(), end];
            let mut more = optional(
                arg(
                    c"limits",
                    BLOCK,
                    c"Another limit on the same key: allowed only when every limit allows; each window at most once, 8 limits in all",
                ),
                Some(c"LIMIT"),
            );
            more.flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int
                | raw::REDISMODULE_CMD_ARG_MULTIPLE_TOKEN as c_int;
            more.subargs = block.as_mut_ptr();
            let top = vec![
                key(),
                limit(),
                window(),
                now(),
                more,
                optional(
                    arg(c"cost", INTEGER, c"Weight of this request (default 1)"),
                    Some(c"COST"),
                ),
                ms(c"Every window and now are in milliseconds"),
                optional(
                    arg(
                        c"details",
                        TOKEN,
                        c"Reply with limit, remaining, retry_after and reset_after too, and each limit's figures when there are several",
                    ),
                    Some(c"DETAILS"),
                ),
                end,
            ];
            ArgLists {
                top,
                _limit_block: block,
            }
        }
        Args::Window => ArgLists {
            top: vec![
                key(),
                window(),
                now(),
                ms(c"window and now are in milliseconds"),
                end,
            ],
            _limit_block: Vec::new(),
        },
    }
}

fn key_specs(writes: bool) -> Vec<raw::RedisModuleCommandKeySpec> {
    let flags = if writes {
        raw::REDISMODULE_CMD_KEY_RW
            | raw::REDISMODULE_CMD_KEY_ACCESS
            | raw::REDISMODULE_CMD_KEY_UPDATE
    } else {
        raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS
    };
    let mut spec: raw::RedisModuleCommandKeySpec = unsafe { zeroed() };
    spec.flags = u64::from(flags);
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    spec.bs.index.pos = 1;
    spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    spec.fk.range.lastkey = 0;
    spec.fk.range.keystep = 1;
    spec.fk.range.limit = 0;
    vec![spec, unsafe { zeroed() }]
}

const VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: size_of::<Arg>(),
};

/// Sets arity, key spec and docs of a command already created.
pub fn set(command: *mut raw::RedisModuleCommand, name: &CStr, doc: &Doc) -> anyhow::Result<()> {
    // Everything below is copied by SetCommandInfo: it may be freed after the call.
    let version = VERSION;
    let mut specs = key_specs(doc.writes);
    let mut args = arguments(doc.args);
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: doc.summary.as_ptr(),
        complexity: c"O(1)".as_ptr(),
        since: doc.since.as_ptr(),
        history: null_mut(),
        tips: null(),
        arity: doc.arity,
        key_specs: specs.as_mut_ptr(),
        args: args.top.as_mut_ptr(),
    };
    let Some(set_info) = (unsafe { raw::RedisModule_SetCommandInfo }) else {
        bail!("this server lacks RedisModule_SetCommandInfo");
    };
    if unsafe { set_info(command, &info) } != raw::REDISMODULE_OK as c_int {
        bail!("SetCommandInfo refused {name:?}");
    }
    Ok(())
}
