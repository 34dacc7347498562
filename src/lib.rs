//! redis-slidingwindow: the `slidingwindow` module. Registration only: the commands,
//! their flags, ACL categories and docs, the INFO section. The algorithm lives in
//! `window`, the bytes in `encoding`, argument checking in `args` (all three in the
//! pure crate slidingwindow-core, crates/core), the handlers in `commands`, key access
//! in `key`, replies in `reply`.

// Unit tests leave out the `redis_module!` entry point, so the registration code is
// unused there.
#![cfg_attr(test, allow(dead_code))]

#[macro_use]
mod api;
mod command_info;
mod commands;
#[cfg(feature = "fault-injection")]
mod fault;
mod key;
mod reply;
mod stats;

// The pure parts (crates/core), named as the handlers have always named them.
use slidingwindow_core::{args, encoding, window};

use anyhow::{anyhow, bail, Context as _};
use libc::c_int;
use redis_module::raw;
use std::ffi::CStr;

type CommandFn =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// The module's own ACL category: `+@slidingwindow` grants exactly the limiter.
const CATEGORY: &CStr = c"slidingwindow";

pub struct Command {
    pub name: &'static CStr,
    handler: CommandFn,
    flags: &'static CStr,
    /// Standard ACL categories, where the server lets modules set them (Redis 7.2+,
    /// Valkey); the module's own category is added where it exists.
    acl: &'static str,
    pub doc: command_info::Doc,
}

const COMMANDS: [Command; 4] = [
    Command {
        name: c"slidingwindow.check",
        handler: commands::check,
        flags: c"write deny-oom fast",
        acl: "write fast",
        doc: command_info::CHECK,
    },
    Command {
        name: c"slidingwindow.peek",
        handler: commands::peek,
        flags: c"readonly fast",
        acl: "read fast",
        doc: command_info::PEEK,
    },
    Command {
        name: c"slidingwindow.refund",
        handler: commands::refund,
        // deny-oom like CHECK (and like the Functions library's refund, which cannot
        // be allowed under OOM without allowing every write).
        flags: c"write deny-oom fast",
        acl: "write fast",
        doc: command_info::REFUND,
    },
    Command {
        name: c"slidingwindow.counts",
        handler: commands::counts,
        flags: c"readonly fast",
        acl: "read fast",
        doc: command_info::COUNTS,
    },
];

/// Registers the ACL category and the commands. Called once by RedisModule_OnLoad.
fn register(ctx: *mut raw::RedisModuleCtx) -> anyhow::Result<()> {
    if let Some(missing) = api::missing() {
        bail!("this server lacks {missing}");
    }
    key::init_strings()?;
    // Redis 7.0 has neither function, and refuses modules that try to set categories:
    // there, operators grant the commands by name (see the README).
    let own_category = match unsafe { raw::RedisModule_AddACLCategory } {
        Some(add) if unsafe { add(ctx, CATEGORY.as_ptr()) } == raw::REDISMODULE_OK as c_int => true,
        Some(_) => bail!("could not add the ACL category {CATEGORY:?}"),
        None => false,
    };
    let create = unsafe { raw::RedisModule_CreateCommand }.context("CreateCommand missing")?;
    for c in &COMMANDS {
        // Classic registration, which every supported server takes; categories and
        // docs are set on the created command.
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
            bail!("could not create {:?}", c.name);
        }
        let get_command = unsafe { raw::RedisModule_GetCommand }.context("GetCommand missing")?;
        let command = unsafe { get_command(ctx, c.name.as_ptr()) };
        if command.is_null() {
            bail!("command {:?} not found after creating it", c.name);
        }
        set_acl_categories(command, c, own_category)?;
        command_info::set(command, c.name, &c.doc)?;
    }
    unsafe {
        // We signal the key ourselves, and only when CHECK writes it: a denied CHECK
        // must not fail other clients' WATCH.
        raw::RedisModule_SetModuleOptions.context("SetModuleOptions missing")?(
            ctx,
            raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int,
        );
    }
    Ok(())
}

fn set_acl_categories(
    command: *mut raw::RedisModuleCommand,
    c: &Command,
    own_category: bool,
) -> anyhow::Result<()> {
    let Some(set) = (unsafe { raw::RedisModule_SetCommandACLCategories }) else {
        return Ok(());
    };
    let categories = if own_category {
        format!("{} {}", c.acl, CATEGORY.to_string_lossy())
    } else {
        c.acl.to_string()
    };
    let text = std::ffi::CString::new(categories)?;
    if unsafe { set(command, text.as_ptr()) } != raw::REDISMODULE_OK as c_int {
        return Err(anyhow!(
            "the server refused ACL categories {text:?} for {:?}",
            c.name
        ));
    }
    Ok(())
}

/// `INFO slidingwindow`: the counters of `stats`, in a section `slidingwindow_stats`.
#[cfg(not(test))]
mod info {
    use crate::stats::snapshot;
    use redis_module::{InfoContext, RedisResult};
    use redis_module_macros::{info_command_handler, InfoSection};

    /// Field names are what INFO shows, prefixed with the module's name.
    #[allow(non_camel_case_types)] // the section is named after the struct
    #[derive(InfoSection)]
    struct stats {
        checks: u64,
        allowed: u64,
        denied: u64,
        peeks: u64,
        counts: u64,
        errors: u64,
        refunds: u64,
        refunded_units: u64,
    }

    #[info_command_handler]
    fn add_info(ctx: &InfoContext, _for_crash_report: bool) -> RedisResult<()> {
        let s = snapshot();
        ctx.build_one_section(stats {
            checks: s.checks,
            allowed: s.allowed,
            denied: s.denied,
            peeks: s.peeks,
            counts: s.counts,
            errors: s.errors,
            refunds: s.refunds,
            refunded_units: s.refunded_units,
        })
    }
}

#[cfg(not(test))]
fn init(ctx: &redis_module::Context, _args: &[redis_module::RedisString]) -> redis_module::Status {
    match register(ctx.ctx) {
        Ok(()) => redis_module::Status::Ok,
        Err(e) => {
            ctx.log_warning(&format!("slidingwindow: {e:#}"));
            redis_module::Status::Err
        }
    }
}

/// MODULE UNLOAD, or a server that unloads modules at shutdown (Valkey 9.1).
#[cfg(not(test))]
fn deinit(_ctx: &redis_module::Context) -> redis_module::Status {
    key::free_strings();
    redis_module::Status::Ok
}

/// The crate's version as `MODULE LIST` reports it: major * 10000 + minor * 100 + patch,
/// so 0.2.0 is 200. Cargo.toml is the one place the version is written.
const MODULE_VERSION: i32 = version_part(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
    + version_part(env!("CARGO_PKG_VERSION_MINOR")) * 100
    + version_part(env!("CARGO_PKG_VERSION_PATCH"));

/// One decimal part of the version, at compile time.
const fn version_part(digits: &str) -> i32 {
    let bytes = digits.as_bytes();
    let mut v = 0;
    let mut i = 0;
    while i < bytes.len() {
        assert!(bytes[i].is_ascii_digit(), "a version part is digits only");
        v = v * 10 + (bytes[i] - b'0') as i32;
        i += 1;
    }
    v
}

// Left out of unit tests: its global allocator needs a running Redis.
#[cfg(not(test))]
redis_module::redis_module! {
    name: "slidingwindow",
    version: MODULE_VERSION,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    init: init,
    deinit: deinit,
    commands: [],
}
