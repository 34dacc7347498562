//! One limiter key, open for the length of a call: read its state, store the next one
//! (in place when it can), keep or set its expiry, and tell replicas, the AOF, WATCH
//! and keyspace subscribers exactly what changed. Closed on drop.

use crate::encoding::{self, MAX_LEN, MIN_LEN};
use crate::window::State;
use libc::{c_char, c_int, c_longlong};
use redis_module::raw::{self, KeyMode};
use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};

const OK: c_int = raw::REDISMODULE_OK as c_int;

/// The key holds something that is not a limiter's state: another type, or a string
/// this module did not write. Replied to as WRONGTYPE, with the value left as it was.
#[derive(Debug)]
pub struct WrongType;

/// The expiry a write leaves on the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Expire at this absolute server time, in milliseconds.
    At(u64),
    /// Keep the key's expiry as it is (none, if it has none).
    Keep,
}

/// How `write_raw` stored the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stored {
    /// Over the old value, of the same length: its expiry is still there.
    Overwritten,
    /// Into a value created at the new length (a new key, or the old one deleted).
    Created,
    /// Not at all: `replace` stores it.
    Failed,
}

pub struct Key {
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    ptr: *mut raw::RedisModuleKey,
    /// The value's length as `read` found it (0 for a missing key), so `write` need
    /// not ask again.
    len: usize,
}

impl Key {
    pub fn open(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
        mode: KeyMode,
    ) -> Key {
        Key {
            ctx,
            name,
            ptr: raw::open_key(ctx, name, mode),
            len: 0,
        }
    }

    /// Decodes the key's state into `into`: `Ok(false)` when the key is missing.
    #[inline(always)]
    pub fn read(&mut self, into: &mut State) -> Result<bool, WrongType> {
        let kind = unsafe { api!(RedisModule_KeyType)(self.ptr) } as isize;
        if kind == raw::REDISMODULE_KEYTYPE_EMPTY {
            return Ok(false);
        }
        if kind != raw::REDISMODULE_KEYTYPE_STRING {
            return Err(WrongType);
        }
        // Check the length before touching the bytes: a read through StringDMA converts
        // a foreign int-encoded or shared string in place.
        let len = unsafe { api!(RedisModule_ValueLength)(self.ptr) };
        if !(MIN_LEN..=MAX_LEN).contains(&len) {
            return Err(WrongType);
        }
        let (ptr, len) = self.dma(KeyMode::READ).ok_or(WrongType)?;
        self.len = len;
        let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
        encoding::decode_into(bytes, into).map_err(|_| WrongType)?;
        Ok(true)
    }

    /// When the key expires, in absolute server milliseconds (`None` without expiry).
    pub fn expire_at(&self) -> Option<u64> {
        let at = unsafe { api!(RedisModule_GetAbsExpire)(self.ptr) };
        (at >= 0).then_some(at as u64)
    }

    /// Stores `bytes` (an encoded state) with `expiry`, and tells replicas, the AOF,
    /// WATCH and keyspace subscribers, as `SET key bytes [PXAT ms]` would.
    pub fn write(&self, bytes: &[u8], expiry: Expiry) {
        let expire_at = match expiry {
            Expiry::At(ms) => Some(ms),
            Expiry::Keep => self.expire_at(),
        };
        let stored = self.write_raw(bytes);
        if stored == Stored::Failed {
            self.replace(bytes);
        }
        unsafe {
            // `Keep` written over the same value left the expiry as it was; a value
            // created afresh has none and gets it back.
            match expire_at {
                Some(ms) if stored != Stored::Overwritten || expiry != Expiry::Keep => {
                    api!(RedisModule_SetAbsExpire)(self.ptr, ms as c_longlong);
                }
                _ => {}
            }
            api!(RedisModule_SignalModifiedKey)(self.ctx, self.name);
            self.notify(raw::REDISMODULE_NOTIFY_STRING, c"set");
            if let Expiry::At(_) = expiry {
                self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire");
            }
        }
        self.replicate(bytes, expire_at);
    }

    /// Writes `bytes` into a raw-encoded value of exactly their length, without an
    /// extra allocation: over the value when it has their length (the common case),
    /// else into a value created at their size (a new key, or a count that crossed a
    /// varint boundary or a window that rolled over).
    ///
    /// Created at its size, not as the compact (embstr) value CreateString makes: the
    /// next call's StringDMA, even a read, would convert that to raw, an allocation and
    /// a copy (~700 instructions) on the call after every length change.
    fn write_raw(&self, bytes: &[u8]) -> Stored {
        let stored = if self.len == bytes.len() {
            Stored::Overwritten
        } else {
            unsafe {
                // A value of another length goes; its expiry with it (`write` sets it),
                // and its LFU counter, kept here: under an lfu maxmemory-policy a value
                // created afresh starts as cold as a new key, so a busy identity's key
                // would be among the first evicted after each window it rolls over.
                let mut freq: c_longlong = -1; // -1: not an lfu policy
                if self.len != 0 {
                    api!(RedisModule_GetLFU)(self.ptr, &mut freq);
                    if api!(RedisModule_DeleteKey)(self.ptr) != OK {
                        return Stored::Failed;
                    }
                }
                if api!(RedisModule_StringTruncate)(self.ptr, bytes.len()) != OK {
                    return Stored::Failed;
                }
                if freq >= 0 {
                    api!(RedisModule_SetLFU)(self.ptr, freq);
                }
            }
            Stored::Created
        };
        match self.dma(KeyMode::WRITE) {
            Some((dst, len)) if len == bytes.len() && !self.in_place_refused() => {
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, len) };
                stored
            }
            _ => Stored::Failed,
        }
    }

    /// Replaces the value with a fresh string: only when `write_raw` could not write it
    /// (never seen; the fault-injection build forces it for one key, to test it). The
    /// expiry is dropped by the replacement; `write` sets it again.
    #[cold]
    #[inline(never)]
    fn replace(&self, bytes: &[u8]) {
        unsafe {
            let s = api!(RedisModule_CreateString)(
                self.ctx,
                bytes.as_ptr().cast::<c_char>(),
                bytes.len(),
            );
            raw::string_set(self.ptr, s);
            api!(RedisModule_FreeString)(self.ctx, s);
        }
    }

    /// Only in the fault-injection build: the key `fault::NO_IN_PLACE_KEY` is never
    /// written in place, so tests can show the other path keeps every copy alike.
    fn in_place_refused(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        {
            let mut len = 0;
            let p = raw::string_ptr_len(self.name, &mut len);
            let name = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
            crate::fault::refuses_in_place(name)
        }
        #[cfg(not(feature = "fault-injection"))]
        false
    }

    fn notify(&self, class: c_int, event: &std::ffi::CStr) {
        unsafe {
            api!(RedisModule_NotifyKeyspaceEvent)(self.ctx, class, event.as_ptr(), self.name);
        }
    }

    /// Effects, not the command: replicas and AOF replay store the same bytes and
    /// expiry whatever their own clocks say.
    fn replicate(&self, bytes: &[u8], expire_at: Option<u64>) {
        let replicate = api!(RedisModule_Replicate);
        let value = bytes.as_ptr().cast::<c_char>();
        unsafe {
            match expire_at {
                Some(ms) => {
                    let mut digits = itoa::Buffer::new();
                    let ms = digits.format(ms);
                    replicate(
                        self.ctx,
                        c"SET".as_ptr(),
                        c"sbsb".as_ptr(),
                        self.name,
                        value,
                        bytes.len(),
                        PXAT.load(Relaxed),
                        ms.as_ptr().cast::<c_char>(),
                        ms.len(),
                    );
                }
                None => {
                    replicate(
                        self.ctx,
                        c"SET".as_ptr(),
                        c"sb".as_ptr(),
                        self.name,
                        value,
                        bytes.len(),
                    );
                }
            }
        }
    }

    /// The value's bytes in place (StringDMA): read mode for `read`, write mode to
    /// overwrite a value of the same length.
    fn dma(&self, mode: KeyMode) -> Option<(*mut u8, usize)> {
        let mut len = 0;
        let p = raw::string_dma(self.ptr, &mut len, mode);
        (!p.is_null()).then_some((p.cast::<u8>(), len))
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        raw::close_key(self.ptr);
    }
}

/// "PXAT", created once at load: RedisModule_Replicate then takes a reference instead
/// of allocating a new string on every write.
static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// Creates the strings writes reuse. Called once, at load, before the commands are
/// registered.
pub fn init_strings() -> anyhow::Result<()> {
    let s = unsafe { api!(RedisModule_CreateString)(std::ptr::null_mut(), c"PXAT".as_ptr(), 4) };
    if s.is_null() {
        anyhow::bail!("could not create a string");
    }
    PXAT.store(s, Relaxed);
    Ok(())
}

/// Frees what `init_strings` made. Called when the server unloads the module.
pub fn free_strings() {
    let s = PXAT.swap(std::ptr::null_mut(), Relaxed);
    if !s.is_null() {
        unsafe { api!(RedisModule_FreeString)(std::ptr::null_mut(), s) };
    }
}
