//! redis-slidingwindow: the `slidingwindow` module. Registration only: the commands,
//! their flags and docs, the INFO section. The algorithm lives in `window`, the bytes
//! in `encoding`, argument checking in `args`, the command glue in `commands`.

// Unit tests leave out the `redis_module!` entry point, so the registration code is
// unused there.
#![cfg_attr(test, allow(dead_code))]

#[macro_use]
mod api;
mod args;
mod command_info;
mod commands;
mod encoding;
#[cfg(feature = "fault-injection")]
mod fault;
mod stats;
#[cfg(test)]
mod testrng;
mod window;

use redis_module::raw;
use std::ffi::CStr;
use std::os::raw::c_int;

type CommandFn =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

struct Command {
    name: &'static CStr,
    handler: CommandFn,
    flags: &'static CStr,
    write: bool,
    summary: &'static CStr,
}

const COMMANDS: [Command; 2] = [
    Command {
        name: c"slidingwindow.check",
        handler: commands::check,
        flags: c"write deny-oom fast",
        write: true,
        summary: c"Counts a request against a sliding-window limit and says whether it is allowed",
    },
    Command {
        name: c"slidingwindow.peek",
        handler: commands::peek,
        flags: c"readonly fast",
        write: false,
        summary: c"Says what SLIDINGWINDOW.CHECK would answer now, without counting anything",
    },
];

fn log_warning(ctx: *mut raw::RedisModuleCtx, msg: &str) {
    raw::redis_log(ctx, msg);
}

/// Registers the commands and the INFO section. Called once by RedisModule_OnLoad.
fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    if let Some(missing) = commands::missing_api() {
        return Err(format!("this server lacks RedisModule_{missing}"));
    }
    commands::init_strings()?;
    let create = unsafe { raw::RedisModule_CreateCommand }.ok_or("CreateCommand missing")?;
    for c in &COMMANDS {
        // Classic registration (no ACL categories): Redis 7.0 refuses modules that set them.
        let status = unsafe {
            create(
                ctx,
                c.name.as_ptr(),
                Some(c.handler),
                c.flags.as_ptr(),
                1,
                1,
                1,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!("could not create {:?}", c.name));
        }
        command_info::set(ctx, c.name, c.summary, c.write)?;
    }
    unsafe {
        // We signal the key ourselves, and only when CHECK writes it: a denied CHECK
        // must not fail other clients' WATCH.
        raw::RedisModule_SetModuleOptions.ok_or("SetModuleOptions missing")?(
            ctx,
            raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int,
        );
        raw::RedisModule_RegisterInfoFunc.ok_or("RegisterInfoFunc missing")?(ctx, Some(info));
    }
    Ok(())
}

/// `INFO slidingwindow`: one section named after the module.
extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    unsafe {
        api!(RedisModule_InfoAddSection)(ctx, c"".as_ptr());
        for (field, value) in stats::snapshot() {
            let name = std::ffi::CString::new(field).unwrap_or_default();
            api!(RedisModule_InfoAddFieldULongLong)(ctx, name.as_ptr(), value);
        }
    }
}

#[cfg(not(test))]
fn init(ctx: &redis_module::Context, _args: &[redis_module::RedisString]) -> redis_module::Status {
    match register(ctx.ctx) {
        Ok(()) => redis_module::Status::Ok,
        Err(e) => {
            log_warning(ctx.ctx, &format!("slidingwindow: {e}"));
            redis_module::Status::Err
        }
    }
}

// Left out of unit tests: its global allocator needs a running Redis.
#[cfg(not(test))]
redis_module::redis_module! {
    name: "slidingwindow",
    version: 100,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    init: init,
    commands: [],
}
