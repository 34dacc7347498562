//! A key's state as the bytes of a Redis string, and back.
//!
//! Version 1, one window (typically 9 to 12 bytes; every key written by release 0.1):
//!
//! ```text
//! byte 0     0xA1: format version 1. 0xA1 can never start a UTF-8 text, so no
//!            ordinary string value is mistaken for a limiter's state.
//! byte 1     flags: bit 0 set = the window is in milliseconds; other bits are 0.
//! then four unsigned LEB128 varints, shortest form, each <= 2^53 - 1:
//!            window, window index, current count, previous count.
//! ```
//!
//! Version 2, two to eight windows:
//!
//! ```text
//! byte 0     0xA2: format version 2.
//! byte 1     n, the number of windows, 2 to 8.
//! then n counters, each laid out as version 1 after its version byte: a flags byte
//!            and four varints. Counters are sorted by (unit, window), seconds first,
//!            with no two alike.
//! ```
//!
//! A key with one window is always written as version 1, so it stays as small as
//! before and a release that only knows version 1 still reads it. `decode` accepts
//! exactly what `encode` produces and refuses everything else, so a foreign or damaged
//! value is reported as WRONGTYPE rather than misread.

use crate::window::{Counter, State, Unit, MAX_VALUE, MAX_WINDOWS};

const VERSION_1: u8 = 0xA1;
const VERSION_2: u8 = 0xA2;
const FLAG_MILLIS: u8 = 1;
/// Bytes of a varint holding at most MAX_VALUE (53 bits, 7 per byte).
const MAX_VARINT: usize = 8;
/// A counter's bytes at most: flags and four varints.
const MAX_COUNTER: usize = 1 + 4 * MAX_VARINT;
pub const MIN_LEN: usize = 2 + 4;
pub const MAX_LEN: usize = 2 + MAX_WINDOWS * MAX_COUNTER;
/// A version 1 state's bytes at most: the version byte and one counter.
const ONE_LEN: usize = 1 + MAX_COUNTER;

/// A fixed buffer of `N` bytes: encoding never allocates. `Encoded` holds any state;
/// `EncodedOne` one counter, and is all the single-window path initialises.
pub struct Encoded<const N: usize = MAX_LEN> {
    buf: [u8; N],
    len: usize,
}

pub type EncodedOne = Encoded<ONE_LEN>;

impl<const N: usize> Default for Encoded<N> {
    fn default() -> Encoded<N> {
        Encoded {
            buf: [0; N],
            len: 0,
        }
    }
}

impl<const N: usize> Encoded<N> {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn push(&mut self, byte: u8) {
        self.buf[self.len] = byte;
        self.len += 1;
    }

    fn push_counter(&mut self, c: &Counter) {
        self.push(match c.unit {
            Unit::Seconds => 0,
            Unit::Millis => FLAG_MILLIS,
        });
        for mut v in [c.window, c.index, c.current, c.previous] {
            while v >= 0x80 {
                self.push((v & 0x7f) as u8 | 0x80);
                v >>= 7;
            }
            self.push(v as u8);
        }
    }
}

/// Writes `s`'s bytes (version 1 for one counter, 2 for several) into a buffer the
/// caller holds (no copy of the result).
pub fn encode_into(s: &State, out: &mut Encoded) {
    match s.counters() {
        [one] => encode_one_into(one, out),
        many => encode_several(many, out),
    }
}

/// A state of one counter (version 1), from the counter itself.
pub fn encode_one_into<const N: usize>(c: &Counter, out: &mut Encoded<N>) {
    const { assert!(N >= ONE_LEN) };
    out.len = 0;
    out.push(VERSION_1);
    out.push_counter(c);
}

/// Version 2: out of line, off the single-window path.
#[inline(never)]
fn encode_several(many: &[Counter], out: &mut Encoded) {
    out.len = 0;
    out.push(VERSION_2);
    out.push(many.len() as u8);
    for c in many {
        out.push_counter(c);
    }
}

/// Why bytes are not a state: only ever reported as WRONGTYPE, but named for tests.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    Length,
    Version,
    Count,
    Flags,
    Varint,
    Range,
    Order,
    Trailing,
}

/// Decodes `bytes` into a state the caller holds (no copy of the result): exactly what
/// `encode_into` writes is accepted, anything else refused, and `out` is then empty.
#[inline(always)]
pub fn decode_into(bytes: &[u8], out: &mut State) -> Result<(), DecodeError> {
    out.clear();
    if bytes.len() < MIN_LEN || bytes.len() > MAX_LEN {
        return Err(DecodeError::Length);
    }
    match bytes[0] {
        VERSION_1 => {
            let mut rest = &bytes[1..];
            let counter = read_counter(&mut rest)?;
            if !rest.is_empty() {
                return Err(DecodeError::Trailing);
            }
            out.push(counter);
            Ok(())
        }
        VERSION_2 => decode_several(bytes, out),
        _ => Err(DecodeError::Version),
    }
}

/// Version 2: out of line, off the single-window path.
#[inline(never)]
fn decode_several(bytes: &[u8], out: &mut State) -> Result<(), DecodeError> {
    let n = match bytes[1] as usize {
        n @ 2..=MAX_WINDOWS => n,
        _ => return Err(DecodeError::Count),
    };
    let mut rest = &bytes[2..];
    for _ in 0..n {
        let counter = read_counter(&mut rest)?;
        if !out.push(counter) {
            out.clear();
            return Err(DecodeError::Order);
        }
    }
    if !rest.is_empty() {
        out.clear();
        return Err(DecodeError::Trailing);
    }
    Ok(())
}

/// One counter (flags and four varints), taken from the front of `bytes`.
#[inline(always)]
fn read_counter(bytes: &mut &[u8]) -> Result<Counter, DecodeError> {
    let (&flags, rest) = bytes.split_first().ok_or(DecodeError::Varint)?;
    let unit = match flags {
        0 => Unit::Seconds,
        FLAG_MILLIS => Unit::Millis,
        _ => return Err(DecodeError::Flags),
    };
    *bytes = rest;
    let window = read_varint(bytes)?;
    let index = read_varint(bytes)?;
    let current = read_varint(bytes)?;
    let previous = read_varint(bytes)?;
    // `decide` relies on these bounds for overflow-free arithmetic.
    if window == 0 || window > unit.max_window() || index > MAX_VALUE / window {
        return Err(DecodeError::Range);
    }
    Ok(Counter {
        unit,
        window,
        index,
        current,
        previous,
    })
}

/// One shortest-form varint <= MAX_VALUE, taken from the front of `bytes`.
#[inline(always)]
fn read_varint(bytes: &mut &[u8]) -> Result<u64, DecodeError> {
    let b = *bytes;
    let mut v: u64 = 0;
    let mut i = 0;
    // A plain indexed loop: this runs four times per window on every call.
    while i < b.len() && i < MAX_VARINT {
        let byte = b[i];
        v |= u64::from(byte & 0x7f) << (7 * i);
        i += 1;
        if byte & 0x80 == 0 {
            // A zero last byte after the first is an overlong form: refuse it, so each
            // state has exactly one encoding.
            if (i > 1 && byte == 0) || v > MAX_VALUE {
                return Err(DecodeError::Varint);
            }
            *bytes = &b[i..];
            return Ok(v);
        }
    }
    Err(DecodeError::Varint)
}

#[cfg(test)]
#[path = "unit_tests/encoding.rs"]
mod tests;
