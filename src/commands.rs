//! The command handlers: CHECK, PEEK, REFUND and COUNTS. Each reads argv in place,
//! parses it (`args`), opens the key (`key`), decides (`window`), writes when CHECK
//! allows or REFUND gives something back, and replies (`reply`).
//!
//! No per-call allocation on the success path. Every handler runs inside `guarded`, so
//! a panic becomes an ERR reply instead of aborting the server.

use crate::args::{self, ArgError, Parsed};
use crate::encoding::{self, Encoded, EncodedOne};
use crate::key::{Expiry, Key};
use crate::reply;
use crate::stats;
use crate::window::{self, Decision, State};
use libc::c_int;
use redis_module::raw::{self, KeyMode};
use std::panic::{catch_unwind, AssertUnwindSafe};

type Ctx = *mut raw::RedisModuleCtx;
type Argv = *mut *mut raw::RedisModuleString;

/// More arguments than any valid call has (key limit window now COST c MS DETAILS = 8
/// after the command name); longer vectors are still parsed, from a heap buffer.
const INLINE_ARGS: usize = 12;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Check,
    Peek,
}

pub extern "C" fn check(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    guarded(ctx, || run(ctx, argv, argc, Mode::Check))
}

pub extern "C" fn peek(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    guarded(ctx, || run(ctx, argv, argc, Mode::Peek))
}

pub extern "C" fn refund(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    guarded(ctx, || run_refund(ctx, argv, argc))
}

pub extern "C" fn counts(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    guarded(ctx, || run_counts(ctx, argv, argc))
}

fn guarded(ctx: Ctx, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(status) => status,
        Err(_) => reply::error(ctx, reply::INTERNAL),
    }
}

/// The bytes of one argument, borrowed from Redis for the length of the call.
unsafe fn arg<'a>(argv: Argv, i: usize) -> &'a [u8] {
    let mut len = 0;
    let ptr = raw::string_ptr_len(*argv.add(i), &mut len);
    std::slice::from_raw_parts(ptr.cast::<u8>(), len)
}

/// Runs `parse` on the arguments after the key, borrowed in place. Every parser needs
/// at least one argument after the key, so a call it accepts has a key (argv[1]).
#[inline(always)]
fn parse_args<T>(
    argv: Argv,
    argc: c_int,
    parse: impl FnOnce(&[&[u8]]) -> Result<T, ArgError>,
) -> Result<T, ArgError> {
    let argc = argc.max(0) as usize;
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

/// Opens the key named by argv[1] and decodes its state into `held`: `Ok(None)` for a
/// missing key, `Err` (already replied WRONGTYPE) for a foreign value. Inlined, as are
/// the other steps of the hot path: called out of line they cost PEEK ~3% more
/// instructions than the one function they were split from (bench/profile_hotpath.py).
#[inline(always)]
fn open_and_read(
    ctx: Ctx,
    argv: Argv,
    mode: KeyMode,
    held: &mut State,
) -> Result<(Key, Option<&State>), c_int> {
    let mut key = Key::open(ctx, unsafe { *argv.add(1) }, mode);
    match key.read(held) {
        Ok(present) => Ok((key, present.then_some(&*held))),
        Err(_) => Err(reply::error(ctx, reply::WRONGTYPE)),
    }
}

/// Parses CHECK's arguments (CHECK, PEEK and REFUND take the same) into `parsed`.
#[inline(always)]
fn parse_limits(argv: Argv, argc: c_int, parsed: &mut Parsed) -> Result<(), ArgError> {
    #[cfg(feature = "fault-injection")]
    if argc >= 2 {
        crate::fault::maybe_panic(unsafe { arg(argv, 1) });
    }
    parse_args(argv, argc, |a| args::parse_into(a, parsed))
}

fn run(ctx: Ctx, argv: Argv, argc: c_int, mode: Mode) -> c_int {
    let mut parsed = Parsed::default();
    if let Err(e) = parse_limits(argv, argc, &mut parsed) {
        return reply::arg_error(ctx, &e);
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
    let mut held = State::default();
    let (key, stored) = match open_and_read(ctx, argv, open_mode, &mut held) {
        Ok(opened) => opened,
        Err(replied) => return replied,
    };
    let decision = window::decide(stored, &request);
    if mode == Mode::Check && decision.allowed {
        write_next_state(
            &key,
            &decision,
            clock.ms() + 2 * request.longest_window_ms(),
        );
    }
    drop(key);
    stats::record(mode == Mode::Peek, decision.allowed);
    reply::decision(ctx, &decision, parsed.details)
}

/// Writes the state an allowed CHECK leaves, expiring at `expire_at` (two of the
/// longest named windows from the server's now) or later when the key keeps longer
/// windows the call did not name.
#[inline(always)]
fn write_next_state(key: &Key, decision: &Decision, expire_at: u64) {
    match decision.next_single() {
        // The common case, one window before and after: no `State` to build, and a
        // buffer for one counter only.
        Some(c) => {
            let mut one = EncodedOne::default();
            encoding::encode_one_into(&c, &mut one);
            key.write(one.as_bytes(), Expiry::At(expire_at));
        }
        None => write_several(key, decision, expire_at),
    }
}

/// `write_next_state` when the key holds several windows. Out of line, off the
/// single-window path.
#[inline(never)]
fn write_several(key: &Key, decision: &Decision, mut expire_at: u64) {
    let mut state = State::default();
    decision.next_state_into(&mut state);
    let mut bytes = Encoded::default();
    encoding::encode_into(&state, &mut bytes);
    if state.counters().len() > decision.limit_count() {
        // Longer windows the call did not name keep their later expiry.
        expire_at = expire_at.max(key.expire_at().unwrap_or(0));
    }
    key.write(bytes.as_bytes(), Expiry::At(expire_at));
}

/// SLIDINGWINDOW.REFUND: gives the cost back in each named window the key holds
/// (`window::refund`), keeping the key's expiry, and answers what PEEK with the
/// same arguments answers afterwards. Nothing to give back: no write at all.
fn run_refund(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    let mut parsed = Parsed::default();
    if let Err(e) = parse_limits(argv, argc, &mut parsed) {
        return reply::arg_error(ctx, &e);
    }
    let now_ms = if parsed.now.is_none() { server_ms() } else { 0 };
    let request = parsed.request(now_ms);
    let mut held = State::default();
    let present = match open_and_read(ctx, argv, KeyMode::READ | KeyMode::WRITE, &mut held) {
        Ok((key, stored)) => stored.is_some().then_some(key),
        Err(replied) => return replied,
    };
    // Refunded where it was read: no second state to build or copy.
    let given = match &present {
        Some(_) => window::refund(&mut held, &request),
        None => 0,
    };
    if let (Some(key), true) = (&present, given > 0) {
        match held.counters() {
            // One window (the common case): a buffer for one counter only.
            [one] => {
                let mut bytes = EncodedOne::default();
                encoding::encode_one_into(one, &mut bytes);
                key.write(bytes.as_bytes(), Expiry::Keep);
            }
            _ => {
                let mut bytes = Encoded::default();
                encoding::encode_into(&held, &mut bytes);
                key.write(bytes.as_bytes(), Expiry::Keep);
            }
        }
    }
    let now_held = present.is_some().then_some(&held);
    drop(present);
    stats::record_refund(given);
    reply::decision(ctx, &window::decide(now_held, &request), parsed.details)
}

/// SLIDINGWINDOW.COUNTS key window [now] [MS] -> [previous, current, elapsed].
fn run_counts(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    let query = match parse_args(argv, argc, args::parse_counts) {
        Ok(q) => q,
        Err(e) => return reply::arg_error(ctx, &e),
    };
    let now = query
        .now
        .unwrap_or_else(|| Clock::default().ms() / query.unit.millis());
    let mut held = State::default();
    let (key, stored) = match open_and_read(ctx, argv, KeyMode::READ, &mut held) {
        Ok(opened) => opened,
        Err(replied) => return replied,
    };
    drop(key);
    let (counts, elapsed) = window::counts(stored, query.unit, query.window, now);
    stats::record_counts();
    reply::counts(ctx, &counts, elapsed)
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
