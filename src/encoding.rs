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

/// A fixed buffer: encoding never allocates.
pub struct Encoded {
    buf: [u8; MAX_LEN],
    len: usize,
}

impl Default for Encoded {
    fn default() -> Encoded {
        Encoded {
            buf: [0; MAX_LEN],
            len: 0,
        }
    }
}

impl Encoded {
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

#[cfg(test)]
pub fn encode(s: &State) -> Encoded {
    let mut out = Encoded::default();
    encode_into(s, &mut out);
    out
}

/// `s`'s bytes, into a buffer the caller holds (no copy of the result).
pub fn encode_into(s: &State, out: &mut Encoded) {
    out.len = 0;
    match s.counters() {
        [one] => {
            out.push(VERSION_1);
            out.push_counter(one);
        }
        many => {
            out.push(VERSION_2);
            out.push(many.len() as u8);
            for c in many {
                out.push_counter(c);
            }
        }
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

#[cfg(test)]
pub fn decode(bytes: &[u8]) -> Result<State, DecodeError> {
    let mut s = State::default();
    decode_into(bytes, &mut s).map(|()| s)
}

/// `decode`, into a state the caller holds (no copy of the result).
pub fn decode_into(bytes: &[u8], out: &mut State) -> Result<(), DecodeError> {
    out.clear();
    if bytes.len() < MIN_LEN || bytes.len() > MAX_LEN {
        return Err(DecodeError::Length);
    }
    let (n, mut rest) = match bytes[0] {
        VERSION_1 => (1, &bytes[1..]),
        VERSION_2 => match bytes[1] as usize {
            n @ 2..=MAX_WINDOWS => (n, &bytes[2..]),
            _ => return Err(DecodeError::Count),
        },
        _ => return Err(DecodeError::Version),
    };
    for _ in 0..n {
        let counter = read_counter(&mut rest)?;
        if !out.push(counter) {
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
#[path = "encoding_tests.rs"]
mod tests;
