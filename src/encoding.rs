//! A key's state as the bytes of a Redis string, and back.
//!
//! Version 1 layout (typically 9 to 12 bytes):
//!
//! ```text
//! byte 0     0xA1: format version 1. 0xA1 can never start a UTF-8 text, so no
//!            ordinary string value is mistaken for a limiter's state.
//! byte 1     flags: bit 0 set = the window is in milliseconds; other bits are 0.
//! then four unsigned LEB128 varints, shortest form, each <= 2^53 - 1:
//!            window, window index, current count, previous count.
//! ```
//!
//! `decode` accepts exactly what `encode` produces and refuses everything else, so a
//! foreign or damaged value is reported as WRONGTYPE rather than misread.

use crate::window::{State, Unit, MAX_VALUE};

const VERSION_1: u8 = 0xA1;
const FLAG_MILLIS: u8 = 1;
/// Bytes of a varint holding at most MAX_VALUE (53 bits, 7 per byte).
const MAX_VARINT: usize = 8;
pub const MIN_LEN: usize = 2 + 4;
pub const MAX_LEN: usize = 2 + 4 * MAX_VARINT;

/// A fixed buffer: encoding never allocates.
pub struct Encoded {
    buf: [u8; MAX_LEN],
    len: usize,
}

impl Encoded {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

pub fn encode(s: &State) -> Encoded {
    let mut out = Encoded {
        buf: [0; MAX_LEN],
        len: 2,
    };
    out.buf[0] = VERSION_1;
    out.buf[1] = match s.unit {
        Unit::Seconds => 0,
        Unit::Millis => FLAG_MILLIS,
    };
    for mut v in [s.window, s.index, s.current, s.previous] {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.buf[out.len] = byte;
                out.len += 1;
                break;
            }
            out.buf[out.len] = byte | 0x80;
            out.len += 1;
        }
    }
    out
}

/// Why bytes are not a state: only ever reported as WRONGTYPE, but named for tests.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    Length,
    Version,
    Flags,
    Varint,
    Range,
    Trailing,
}

pub fn decode(bytes: &[u8]) -> Result<State, DecodeError> {
    if bytes.len() < MIN_LEN || bytes.len() > MAX_LEN {
        return Err(DecodeError::Length);
    }
    if bytes[0] != VERSION_1 {
        return Err(DecodeError::Version);
    }
    let unit = match bytes[1] {
        0 => Unit::Seconds,
        FLAG_MILLIS => Unit::Millis,
        _ => return Err(DecodeError::Flags),
    };
    let mut rest = &bytes[2..];
    let mut fields = [0u64; 4];
    for field in fields.iter_mut() {
        let (v, used) = read_varint(rest)?;
        *field = v;
        rest = &rest[used..];
    }
    if !rest.is_empty() {
        return Err(DecodeError::Trailing);
    }
    let [window, index, current, previous] = fields;
    // `decide` relies on these bounds for overflow-free arithmetic.
    if window == 0 || window > unit.max_window() || index > MAX_VALUE / window {
        return Err(DecodeError::Range);
    }
    Ok(State {
        unit,
        window,
        index,
        current,
        previous,
    })
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
