//! SLIDINGWINDOW.CHECK and SLIDINGWINDOW.PEEK: read argv, open the key, decode, decide,
//! write and replicate (CHECK, when allowed), reply.
//!
//! The handlers use the raw module API and read argv in place: no per-call allocation
//! on the success path. Every handler runs inside `guarded`, so a panic becomes an
//! ERR reply instead of aborting the server.

use crate::args::{self, ArgError, Parsed};
use crate::encoding::{self, Encoded, EncodedOne, MAX_LEN, MIN_LEN};
use crate::stats;
use crate::window::{self, Decision, State};
use libc::{c_char, c_int, c_longlong};
use redis_module::raw::{self, KeyMode};
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};

type Ctx = *mut raw::RedisModuleCtx;
type Argv = *mut *mut raw::RedisModuleString;

const OK: c_int = raw::REDISMODULE_OK as c_int;
const WRONGTYPE: &[u8] = b"WRONGTYPE Operation against a key holding the wrong kind of value\0";
/// More arguments than any valid call has (key limit window now COST c MS DETAILS = 8
/// after the command name); longer vectors are still parsed, from a heap buffer.
const INLINE_ARGS: usize = 12;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Check,
    Peek,
}

/// The first API function the handlers call that this server does not export, if any.
/// Checked once at load (the module refuses to load otherwise), so `api!` and the
/// crate's `raw::` wrappers, which unwrap these pointers, cannot fail afterwards. Every
/// function this file calls is in the list.
pub fn missing_api() -> Option<&'static str> {
    macro_rules! first_missing {
        ($($name:ident),* $(,)?) => {
            $(
                if unsafe { raw::$name }.is_none() {
                    return Some(stringify!($name));
                }
            )*
        };
    }
    first_missing!(
        RedisModule_StringPtrLen,
        RedisModule_Milliseconds,
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_ValueLength,
        RedisModule_StringDMA,
        RedisModule_StringTruncate,
        RedisModule_CreateString,
        RedisModule_StringSet,
        RedisModule_FreeString,
        RedisModule_SetAbsExpire,
        RedisModule_GetExpire,
        RedisModule_SignalModifiedKey,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_Replicate,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithError,
    );
    None
}

pub extern "C" fn check(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    guarded(ctx, || run(ctx, argv, argc, Mode::Check))
}

pub extern "C" fn peek(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    guarded(ctx, || run(ctx, argv, argc, Mode::Peek))
}

pub extern "C" fn counts(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    guarded(ctx, || run_counts(ctx, argv, argc))
}

fn guarded(ctx: Ctx, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(status) => status,
        Err(_) => {
            stats::error();
            reply_error(
                ctx,
                b"ERR internal error in slidingwindow (please report it)\0",
            )
        }
    }
}

/// The bytes of one argument, borrowed from Redis for the length of the call.
unsafe fn arg<'a>(argv: Argv, i: usize) -> &'a [u8] {
    let mut len = 0;
    let ptr = raw::string_ptr_len(*argv.add(i), &mut len);
    std::slice::from_raw_parts(ptr.cast::<u8>(), len)
}

/// Runs `parse` on the arguments after the key (`argc` >= 2), borrowed in place.
fn parse_args<T>(
    argv: Argv,
    argc: usize,
    parse: impl FnOnce(&[&[u8]]) -> Result<T, ArgError>,
) -> Result<T, ArgError> {
    let n = argc.saturating_sub(2);
    if n <= INLINE_ARGS {
        let mut buf: [&[u8]; INLINE_ARGS] = [&[]; INLINE_ARGS];
        for (i, slot) in buf.iter_mut().take(n).enumerate() {
            *slot = unsafe { arg(argv, i + 2) };
        }
        parse(&buf[..n])
    } else {
        parse(&many_args(argv, argc))
    }
}

/// The arguments after the key when they do not fit on the stack (many LIMITs).
#[cold]
#[inline(never)]
fn many_args<'a>(argv: Argv, argc: usize) -> Vec<&'a [u8]> {
    (2..argc).map(|i| unsafe { arg(argv, i) }).collect()
}

/// Replies with an argument error.
fn reply_arg_error(ctx: Ctx, e: &ArgError) -> c_int {
    stats::error();
    let text = CString::new(e.to_string()).unwrap_or_default();
    reply_error(ctx, text.as_bytes_with_nul())
}

fn run(ctx: Ctx, argv: Argv, argc: c_int, mode: Mode) -> c_int {
    #[cfg(feature = "fault-injection")]
    if argc >= 2 {
        crate::fault::maybe_panic(unsafe { arg(argv, 1) });
    }
    let argc = argc.max(0) as usize;
    let mut parsed = Parsed::default();
    match parse_args(argv, argc, |a| args::parse_into(a, &mut parsed)) {
        Ok(()) if argc >= 4 => {}
        Ok(()) => return reply_arg_error(ctx, &ArgError::Arity),
        Err(e) => return reply_arg_error(ctx, &e),
    }
    // The clock is read once, and only when needed: for an omitted `now`, and for the
    // expiry of an allowed CHECK.
    let mut clock = Clock::default();
    let now_ms = if parsed.now.is_none() { clock.ms() } else { 0 };
    let request = parsed.request(now_ms);
    let open_mode = match mode {
        Mode::Check => KeyMode::READ | KeyMode::WRITE,
        Mode::Peek => KeyMode::READ,
    };
    let mut key = Key::open(ctx, unsafe { *argv.add(1) }, open_mode);
    let mut held = State::default();
    let stored = match key.read(&mut held) {
        Ok(present) => present.then_some(&held),
        Err(()) => {
            stats::error();
            return reply_error(ctx, WRONGTYPE);
        }
    };
    let decision = window::decide(stored, &request);
    if mode == Mode::Check && decision.allowed {
        let mut expire_at = clock.ms() + 2 * request.longest_window_ms();
        let (mut one, mut several);
        let bytes = match decision.next_single() {
            // The common case, one window before and after: no `State` to build, and
            // a buffer for one counter only.
            Some(c) => {
                one = EncodedOne::default();
                encoding::encode_one_into(&c, &mut one);
                one.as_bytes()
            }
            None => {
                several = Encoded::default();
                if encode_next_state(&decision, &mut several) {
                    // Longer windows the call did not name keep their later expiry.
                    expire_at = expire_at.max(key.expire_at(clock.ms()).unwrap_or(0));
                }
                several.as_bytes()
            }
        };
        key.write(bytes, expire_at);
    }
    drop(key);
    stats::record(mode == Mode::Peek, decision.allowed);
    reply(ctx, &decision, parsed.details)
}

/// Encodes the key's next state when it holds several windows; says whether it keeps
/// windows the call did not name. Out of line, off the single-window path.
#[inline(never)]
fn encode_next_state(decision: &Decision, enc: &mut Encoded) -> bool {
    let mut state = State::default();
    decision.next_state_into(&mut state);
    encoding::encode_into(&state, enc);
    state.counters().len() > decision.limit_count()
}

/// SLIDINGWINDOW.COUNTS key window [now] [MS] -> [previous, current, elapsed].
fn run_counts(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    let argc = argc.max(0) as usize;
    let query = match parse_args(argv, argc, args::parse_counts) {
        Ok(q) if argc >= 3 => q,
        Ok(_) => return reply_arg_error(ctx, &ArgError::Arity),
        Err(e) => return reply_arg_error(ctx, &e),
    };
    let now = query
        .now
        .unwrap_or_else(|| Clock::default().ms() / query.unit.millis());
    let mut key = Key::open(ctx, unsafe { *argv.add(1) }, KeyMode::READ);
    let mut held = State::default();
    let stored = match key.read(&mut held) {
        Ok(present) => present.then_some(&held),
        Err(()) => {
            stats::error();
            return reply_error(ctx, WRONGTYPE);
        }
    };
    drop(key);
    let (counts, elapsed) = window::counts(stored, query.unit, query.window, now);
    stats::record_counts();
    let int = |v: u64| raw::reply_with_long_long(ctx, v as c_longlong);
    raw::reply_with_array(ctx, 3);
    int(counts.previous);
    int(counts.current);
    int(elapsed);
    OK
}

/// The server's clock in milliseconds, read at most once per call.
#[derive(Default)]
struct Clock(Option<u64>);

impl Clock {
    fn ms(&mut self) -> u64 {
        *self.0.get_or_insert_with(server_ms)
    }
}

fn server_ms() -> u64 {
    unsafe { api!(RedisModule_Milliseconds)() }.max(0) as u64
}

/// "PXAT", created once at load: RedisModule_Replicate then takes a reference instead
/// of allocating a new string on every allowed CHECK.
static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// Creates the strings the handlers reuse. Called once, at load, before the commands
/// are registered.
pub fn init_strings() -> anyhow::Result<()> {
    let s = unsafe { api!(RedisModule_CreateString)(std::ptr::null_mut(), c"PXAT".as_ptr(), 4) };
    if s.is_null() {
        anyhow::bail!("could not create a string");
    }
    PXAT.store(s, Relaxed);
    Ok(())
}

/// "00" to "99": two digits per division when formatting.
const PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Frees what `init_strings` made. Called when the server unloads the module.
pub fn free_strings() {
    let s = PXAT.swap(std::ptr::null_mut(), Relaxed);
    if !s.is_null() {
        unsafe { api!(RedisModule_FreeString)(std::ptr::null_mut(), s) };
    }
}

/// `v` in decimal, in a stack buffer: no allocation, two digits at a time (this runs
/// on every allowed CHECK, for the replicated expiry).
fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    while v >= 100 {
        let pair = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if v >= 10 {
        let pair = v as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + v as u8;
    }
    &buf[i..]
}

/// An open key, closed on drop.
struct Key {
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    ptr: *mut raw::RedisModuleKey,
    /// The value's length as `read` found it (0 for a missing key), so `write` need
    /// not ask again.
    len: usize,
}

impl Key {
    fn open(ctx: Ctx, name: *mut raw::RedisModuleString, mode: KeyMode) -> Key {
        let ptr = raw::open_key(ctx, name, mode);
        Key {
            ctx,
            name,
            ptr,
            len: 0,
        }
    }

    /// Decodes the state the key holds into `into`: `Ok(false)` when the key is
    /// missing, `Err` when it holds anything that is not a state (another type, or a
    /// string we did not write).
    #[inline(always)]
    fn read(&mut self, into: &mut State) -> Result<bool, ()> {
        let kind = unsafe { api!(RedisModule_KeyType)(self.ptr) } as isize;
        if kind == raw::REDISMODULE_KEYTYPE_EMPTY {
            return Ok(false);
        }
        if kind != raw::REDISMODULE_KEYTYPE_STRING {
            return Err(());
        }
        // Check the length before touching the bytes: a read through StringDMA converts
        // a foreign int-encoded or shared string in place.
        let len = unsafe { api!(RedisModule_ValueLength)(self.ptr) };
        if !(MIN_LEN..=MAX_LEN).contains(&len) {
            return Err(());
        }
        let (ptr, len) = self.dma(KeyMode::READ).ok_or(())?;
        self.len = len;
        let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
        encoding::decode_into(bytes, into)
            .map(|()| true)
            .map_err(|_| ())
    }

    /// When the key expires, in server milliseconds (`None` without an expiry).
    fn expire_at(&self, now_ms: u64) -> Option<u64> {
        let ttl = unsafe { api!(RedisModule_GetExpire)(self.ptr) };
        (ttl >= 0).then(|| now_ms + ttl as u64)
    }

    /// The value's bytes in place (StringDMA): read mode for `read`, write mode to
    /// overwrite a value of the same length.
    fn dma(&self, mode: KeyMode) -> Option<(*mut u8, usize)> {
        let mut len = 0;
        let p = raw::string_dma(self.ptr, &mut len, mode);
        (!p.is_null()).then_some((p.cast::<u8>(), len))
    }

    /// Overwrites the whole value with `bytes`, which must have the value's length.
    fn overwrite(&self, bytes: &[u8]) {
        if let Some((dst, len)) = self.dma(KeyMode::WRITE) {
            if len == bytes.len() {
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, len) };
            }
        }
    }

    /// Stores `bytes` (an encoded state), expiring at `expire_at_ms`, and tells replicas,
    /// the AOF, WATCH and keyspace subscribers, as `SET key bytes PXAT expire_at_ms` would.
    fn write(&self, bytes: &[u8], expire_at_ms: u64) {
        unsafe {
            if self.len == bytes.len() {
                // Same length (the common case): overwrite in place, no allocation.
                self.overwrite(bytes);
            } else if self.len == 0 {
                // A new key: created raw-encoded at its size, then written in place.
                // A compact (embstr) value, as CreateString makes, would be converted
                // to raw by the next call's StringDMA, even a read: an allocation and
                // a copy on every identity's second request.
                api!(RedisModule_StringTruncate)(self.ptr, bytes.len());
                self.overwrite(bytes);
            } else {
                // A count crossed a varint boundary (rare): a fresh, exactly sized
                // string (growing in place would over-allocate).
                let s = api!(RedisModule_CreateString)(
                    self.ctx,
                    bytes.as_ptr().cast::<c_char>(),
                    bytes.len(),
                );
                raw::string_set(self.ptr, s);
                api!(RedisModule_FreeString)(self.ctx, s);
            }
            api!(RedisModule_SetAbsExpire)(self.ptr, expire_at_ms as c_longlong);
            api!(RedisModule_SignalModifiedKey)(self.ctx, self.name);
            api!(RedisModule_NotifyKeyspaceEvent)(
                self.ctx,
                raw::REDISMODULE_NOTIFY_STRING,
                c"set".as_ptr(),
                self.name,
            );
            api!(RedisModule_NotifyKeyspaceEvent)(
                self.ctx,
                raw::REDISMODULE_NOTIFY_GENERIC,
                c"expire".as_ptr(),
                self.name,
            );
            // Effects, not the command: replicas and AOF replay store the same bytes
            // and expiry whatever their own clocks say.
            let mut digits = [0u8; 20];
            let ms = decimal(expire_at_ms, &mut digits);
            api!(RedisModule_Replicate)(
                self.ctx,
                c"SET".as_ptr(),
                c"sbsb".as_ptr(),
                self.name,
                bytes.as_ptr().cast::<c_char>(),
                bytes.len(),
                PXAT.load(Relaxed),
                ms.as_ptr().cast::<c_char>(),
                ms.len(),
            );
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        raw::close_key(self.ptr);
    }
}

/// `[allowed, count]`; with DETAILS `[allowed, count, limit, remaining, retry_after,
/// reset_after]`, the governing limit's figures, and with two or more limits a 7th
/// element: each limit's `[window, limit, count, remaining, retry_after, reset_after]`.
fn reply(ctx: Ctx, d: &Decision, details: bool) -> c_int {
    if !details {
        raw::reply_with_array(ctx, 2);
        raw::reply_with_long_long(ctx, i64::from(d.allowed));
        raw::reply_with_long_long(ctx, d.count() as i64);
        return OK;
    }
    reply_details(ctx, d)
}

/// The DETAILS reply: out of line, so a reply without it stays a few instructions.
#[inline(never)]
fn reply_details(ctx: Ctx, d: &Decision) -> c_int {
    let int = |v: i64| raw::reply_with_long_long(ctx, v);
    let array = |n: usize| raw::reply_with_array(ctx, n as _);
    let g = d.outcome(d.governing());
    let several = d.limit_count() > 1;
    array(if several { 7 } else { 6 });
    int(i64::from(d.allowed));
    int(g.count as i64);
    int(g.limit as i64);
    int(g.remaining as i64);
    if several {
        int(d.retry_after());
        int(d.reset_after() as i64);
    } else {
        // One limit: the summary is that limit's own figures, already worked out.
        int(g.retry_after);
        int(g.reset_after as i64);
    }
    if several {
        array(d.limit_count());
        for i in 0..d.limit_count() {
            let o = d.outcome(i);
            array(6);
            for v in [
                o.window as i64,
                o.limit as i64,
                o.count as i64,
                o.remaining as i64,
                o.retry_after,
                o.reset_after as i64,
            ] {
                int(v);
            }
        }
    }
    OK
}

/// `text` must end with a NUL byte and start with an error code ("ERR ", "WRONGTYPE ").
fn reply_error(ctx: Ctx, text: &[u8]) -> c_int {
    debug_assert_eq!(text.last(), Some(&0));
    raw::reply_with_error(ctx, text.as_ptr().cast());
    OK
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimal_formats_every_magnitude() {
        let mut buf = [0u8; 20];
        for v in [
            0,
            7,
            10,
            99,
            100,
            101,
            1_796_015_107_000,
            u64::MAX,
            u64::MAX / 10,
        ] {
            assert_eq!(super::decimal(v, &mut buf), v.to_string().as_bytes());
        }
    }
}
