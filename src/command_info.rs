//! Arity, key specs and COMMAND DOCS for both commands, set through
//! RedisModule_SetCommandInfo (present on Redis 7.0 and Valkey 8.1).

use redis_module::raw;
use std::ffi::CStr;
use std::mem::{size_of, zeroed};
use std::os::raw::c_int;
use std::ptr::null_mut;

type Arg = raw::RedisModuleCommandArg;

fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    // Zeroed is the C API's "unset" for every field (null pointers, no flags).
    let mut a: Arg = unsafe { zeroed() };
    a.name = name.as_ptr();
    a.type_ = kind;
    a.key_spec_index = -1;
    a
}

fn optional(mut a: Arg, token: Option<&'static CStr>, summary: &'static CStr) -> Arg {
    a.flags = raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int;
    a.token = token.map_or(std::ptr::null(), CStr::as_ptr);
    a.summary = summary.as_ptr();
    a
}

/// The documented arguments, shared by CHECK and PEEK, ending with the zeroed entry
/// the API expects. RedisModule_SetCommandInfo copies them.
fn arguments() -> Vec<Arg> {
    use raw::{
        RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER as INTEGER,
        RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY as KEY,
        RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN as TOKEN,
    };
    let mut key = arg(c"key", KEY);
    key.key_spec_index = 0;
    key.summary = c"The identity being limited: one key holds its whole state".as_ptr();
    let mut limit = arg(c"limit", INTEGER);
    limit.summary = c"Requests allowed per sliding window (0 denies everything)".as_ptr();
    let mut window = arg(c"window", INTEGER);
    window.summary = c"Window length, in seconds (or milliseconds with MS)".as_ptr();
    let list = vec![
        key,
        limit,
        window,
        optional(
            arg(c"now", INTEGER),
            None,
            c"Current time in the window's unit; the server clock when omitted",
        ),
        optional(
            arg(c"cost", INTEGER),
            Some(c"COST"),
            c"Weight of this request (default 1)",
        ),
        optional(
            arg(c"ms", TOKEN),
            Some(c"MS"),
            c"window and now are in milliseconds",
        ),
        optional(
            arg(c"details", TOKEN),
            Some(c"DETAILS"),
            c"Reply with limit, remaining, retry_after and reset_after too",
        ),
        unsafe { zeroed() },
    ];
    list
}

fn key_specs(flags: u32) -> Vec<raw::RedisModuleCommandKeySpec> {
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

/// Sets arity, key spec and docs of a command already created. `write` selects the
/// key spec flags: RW + ACCESS + UPDATE for CHECK, RO + ACCESS for PEEK.
pub fn set(
    ctx: *mut raw::RedisModuleCtx,
    name: &CStr,
    summary: &'static CStr,
    write: bool,
) -> Result<(), String> {
    let get_command = unsafe { raw::RedisModule_GetCommand }.ok_or("GetCommand missing")?;
    let command = unsafe { get_command(ctx, name.as_ptr()) };
    if command.is_null() {
        return Err(format!("command {name:?} not found"));
    }
    let flags = if write {
        raw::REDISMODULE_CMD_KEY_RW
            | raw::REDISMODULE_CMD_KEY_ACCESS
            | raw::REDISMODULE_CMD_KEY_UPDATE
    } else {
        raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS
    };
    // Everything below is copied by SetCommandInfo: it may be freed after the call.
    let version = VERSION;
    let mut specs = key_specs(flags);
    let mut args = arguments();
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: summary.as_ptr(),
        complexity: c"O(1)".as_ptr(),
        since: c"0.1.0".as_ptr(),
        history: null_mut(),
        tips: std::ptr::null(),
        arity: -4,
        key_specs: specs.as_mut_ptr(),
        args: args.as_mut_ptr(),
    };
    let set_info = unsafe { raw::RedisModule_SetCommandInfo }.ok_or("SetCommandInfo missing")?;
    if unsafe { set_info(command, &info) } != raw::REDISMODULE_OK as c_int {
        return Err(format!("SetCommandInfo refused {name:?}"));
    }
    Ok(())
}
