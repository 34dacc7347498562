//! Test entry points: by-value forms of the functions the handlers call into buffers
//! they hold, and state constructors. Unit tests only; the handlers never use them.

use crate::args::{parse_into, ArgError, Parsed};
use crate::encoding::{decode_into, encode_into, DecodeError, Encoded};
use crate::window::{Counter, Decision, State};

/// `args::parse_into` on a fresh `Parsed`.
pub fn parse(args: &[&[u8]]) -> Result<Parsed, ArgError> {
    let mut parsed = Parsed::default();
    parse_into(args, &mut parsed).map(|()| parsed)
}

/// `encoding::encode_into` into a fresh buffer.
pub fn encode(s: &State) -> Encoded {
    let mut out = Encoded::default();
    encode_into(s, &mut out);
    out
}

/// `encoding::decode_into` into a fresh state.
pub fn decode(bytes: &[u8]) -> Result<State, DecodeError> {
    let mut s = State::default();
    decode_into(bytes, &mut s).map(|()| s)
}

/// `Decision::next_state_into` into a fresh state.
pub fn next_state(d: &Decision) -> State {
    let mut out = State::default();
    d.next_state_into(&mut out);
    out
}

/// A state of one counter.
pub fn single(c: Counter) -> State {
    from_sorted(&[c]).unwrap_or_else(|| unreachable!("one counter is always a state"))
}

/// A state from counters already in order; `None` unless there are 1 to `MAX_WINDOWS`
/// of them, strictly increasing by `(unit, window)`.
pub fn from_sorted(list: &[Counter]) -> Option<State> {
    let mut s = State::default();
    let all = list.iter().all(|&c| s.push(c));
    (all && !s.counters().is_empty()).then_some(s)
}
