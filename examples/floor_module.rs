//! The floor of bench/cold_calls.py: `SWFLOOR.WRITE key`, the module API calls that any
//! module command keeping SLIDINGWINDOW.CHECK's contract makes on an allowed call, and
//! nothing of the limiter. It opens the key, reads a state of the real length, writes a
//! constant one over it in place, sets the expiry, signals WATCH, notifies `set` and
//! `expire`, replicates `SET key state PXAT ms` and replies with six integers, as CHECK
//! ... DETAILS does. No parsing, decoding, judging or encoding: a lower bound to read
//! the module's per-call server time against, not a limiter.
//!
//!     cargo build --release --example floor_module   # target/release/examples/libfloor_module.so

use libc::{c_char, c_int, c_longlong};
use redis_module::raw::{self, KeyMode, RedisModuleCtx, RedisModuleString};

/// A one-counter state, 10 bytes (what CHECK stores for one limit).
const STATE: &[u8] = b"\xa1\x00\x90\x1c\xba\xba\x1e\x01\x00\x0a";
/// Two hours: the expiry CHECK sets for a one-hour window.
const EXPIRE_MS: c_longlong = 7_200_000;

/// A module API function; `init` refuses to load on a server that lacks one of them, so
/// the `None` arm is never reached from a command.
macro_rules! api {
    ($name:ident) => {{
        #[allow(unused_unsafe)]
        let f = unsafe { raw::$name };
        match f {
            Some(f) => f,
            None => unreachable!(concat!(stringify!($name), " is checked at load")),
        }
    }};
}

extern "C" fn write(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
) -> c_int {
    if argc != 2 {
        return unsafe { api!(RedisModule_WrongArity)(ctx) };
    }
    unsafe {
        let name = *argv.add(1);
        let key = api!(RedisModule_OpenKey)(ctx, name, (KeyMode::READ | KeyMode::WRITE).bits());
        let key = key.cast::<raw::RedisModuleKey>();
        let mut len = 0;
        if api!(RedisModule_KeyType)(key) == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            api!(RedisModule_StringTruncate)(key, STATE.len());
        } else {
            api!(RedisModule_ValueLength)(key);
            api!(RedisModule_StringDMA)(key, &mut len, KeyMode::READ.bits());
        }
        let dst = api!(RedisModule_StringDMA)(key, &mut len, KeyMode::WRITE.bits());
        if !dst.is_null() && len == STATE.len() {
            std::ptr::copy_nonoverlapping(STATE.as_ptr(), dst.cast::<u8>(), len);
        }
        let at = api!(RedisModule_Milliseconds)() + EXPIRE_MS;
        api!(RedisModule_SetAbsExpire)(key, at);
        api!(RedisModule_SignalModifiedKey)(ctx, name);
        let notify = api!(RedisModule_NotifyKeyspaceEvent);
        notify(
            ctx,
            raw::REDISMODULE_NOTIFY_STRING as c_int,
            c"set".as_ptr(),
            name,
        );
        notify(
            ctx,
            raw::REDISMODULE_NOTIFY_GENERIC as c_int,
            c"expire".as_ptr(),
            name,
        );
        api!(RedisModule_Replicate)(
            ctx,
            c"SET".as_ptr(),
            c"sbcl".as_ptr(),
            name,
            STATE.as_ptr().cast::<c_char>(),
            STATE.len(),
            c"PXAT".as_ptr(),
            at,
        );
        api!(RedisModule_CloseKey)(key);
        api!(RedisModule_ReplyWithArray)(ctx, 6);
        for v in [1, 1, 1_000_000, 999_999, -1, 3600] {
            api!(RedisModule_ReplyWithLongLong)(ctx, v);
        }
    }
    raw::REDISMODULE_OK as c_int
}

fn init(ctx: &redis_module::Context, _args: &[redis_module::RedisString]) -> redis_module::Status {
    let present = unsafe {
        [
            { raw::RedisModule_WrongArity }.is_some(),
            { raw::RedisModule_OpenKey }.is_some(),
            { raw::RedisModule_KeyType }.is_some(),
            { raw::RedisModule_StringTruncate }.is_some(),
            { raw::RedisModule_ValueLength }.is_some(),
            { raw::RedisModule_StringDMA }.is_some(),
            { raw::RedisModule_Milliseconds }.is_some(),
            { raw::RedisModule_SetAbsExpire }.is_some(),
            { raw::RedisModule_SignalModifiedKey }.is_some(),
            { raw::RedisModule_NotifyKeyspaceEvent }.is_some(),
            { raw::RedisModule_Replicate }.is_some(),
            { raw::RedisModule_CloseKey }.is_some(),
            { raw::RedisModule_ReplyWithArray }.is_some(),
            { raw::RedisModule_ReplyWithLongLong }.is_some(),
            { raw::RedisModule_CreateCommand }.is_some(),
        ]
    };
    if present.contains(&false) {
        return redis_module::Status::Err;
    }
    let create = api!(RedisModule_CreateCommand);
    let flags = c"write deny-oom fast";
    let status = unsafe {
        create(
            ctx.ctx,
            c"swfloor.write".as_ptr(),
            Some(write),
            flags.as_ptr(),
            1,
            1,
            1,
        )
    };
    if status == raw::REDISMODULE_OK as c_int {
        redis_module::Status::Ok
    } else {
        redis_module::Status::Err
    }
}

redis_module::redis_module! {
    name: "swfloor",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    init: init,
    commands: [],
}
