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

pub fn encode(s: &State) -> Encoded {
    let mut out = Encoded {
        buf: [0; MAX_LEN],
        len: 0,
    };
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
    out
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

pub fn decode(bytes: &[u8]) -> Result<State, DecodeError> {
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
    let mut counters = [Counter {
        unit: Unit::Seconds,
        window: 1,
        index: 0,
        current: 0,
        previous: 0,
    }; MAX_WINDOWS];
    for c in counters.iter_mut().take(n) {
        let (counter, used) = read_counter(rest)?;
        *c = counter;
        rest = &rest[used..];
    }
    if !rest.is_empty() {
        return Err(DecodeError::Trailing);
    }
    State::from_sorted(&counters[..n]).ok_or(DecodeError::Order)
}

/// One counter (flags and four varints), and the bytes it took.
fn read_counter(bytes: &[u8]) -> Result<(Counter, usize), DecodeError> {
    let unit = match bytes.first() {
        Some(0) => Unit::Seconds,
        Some(&FLAG_MILLIS) => Unit::Millis,
        Some(_) => return Err(DecodeError::Flags),
        None => return Err(DecodeError::Varint),
    };
    let mut at = 1;
    let mut fields = [0u64; 4];
    for field in fields.iter_mut() {
        let (v, used) = read_varint(&bytes[at..])?;
        *field = v;
        at += used;
    }
    let [window, index, current, previous] = fields;
    // `decide` relies on these bounds for overflow-free arithmetic.
    if window == 0 || window > unit.max_window() || index > MAX_VALUE / window {
        return Err(DecodeError::Range);
    }
    let counter = Counter {
        unit,
        window,
        index,
        current,
        previous,
    };
    Ok((counter, at))
}

/// One shortest-form varint <= MAX_VALUE, and the bytes it took.
fn read_varint(bytes: &[u8]) -> Result<(u64, usize), DecodeError> {
    let mut v: u64 = 0;
    for (i, &b) in bytes.iter().take(MAX_VARINT).enumerate() {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            // A zero last byte after the first is an overlong form: refuse it, so each
            // state has exactly one encoding.
            if (i > 0 && b == 0) || v > MAX_VALUE {
                return Err(DecodeError::Varint);
            }
            return Ok((v, i + 1));
        }
    }
    Err(DecodeError::Varint)
}

#[cfg(test)]
#[path = "encoding_tests.rs"]
mod tests;
