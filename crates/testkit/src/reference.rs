//! The reference the module is tested against, for one limit or several: built from the
//! seed's own arithmetic and sharing no code with `window`. Used by the unit tests
//! (crates/core) and by the integration tests against real servers (tests/).
//!
//! For each (unit, window) a key has seen, it keeps one count per window number, and
//! judges a limit exactly as the seed's Lua script would on that window's pair of
//! counters (a clock behind the newest window written is taken to its start). A request
//! is counted in every named window only when every limit allows it. The documented
//! forgetting rule is modelled too: a write forgets the windows it does not name whose
//! newest counts are two windows old at the call's time. Retry and reset times are
//! found by scanning time forward one unit at a time, so keep windows small.

use std::collections::HashMap;

/// Milliseconds in a unit: 1 for MS calls, 1000 for seconds.
fn unit_ms(millis: bool) -> u64 {
    if millis {
        1
    } else {
        1000
    }
}

#[derive(Clone, Default)]
pub struct RefKey {
    /// (millis, window) -> (newest window number written, count per window number)
    windows: HashMap<(bool, u64), (u64, HashMap<u64, u64>)>,
}

/// One limit's figures, as the 7th element of a DETAILS reply lists them:
/// `[window, limit, count, remaining, retry_after, reset_after]`.
pub type RefOutcome = [i64; 6];

/// A reference answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefReply {
    pub allowed: bool,
    pub outcomes: Vec<RefOutcome>,
    pub governing: usize,
    pub retry_after: i64,
    pub reset_after: i64,
}

impl RefReply {
    /// The reply's integers without the 7th element: `[allowed, count]`, or with
    /// `details`, `[allowed, count, limit, remaining, retry_after, reset_after]`.
    pub fn head(&self, details: bool) -> Vec<i64> {
        let g = &self.outcomes[self.governing];
        let mut v = vec![i64::from(self.allowed), g[2]];
        if details {
            v.extend([g[1], g[3], self.retry_after, self.reset_after]);
        }
        v
    }
}

impl RefKey {
    /// The seed's estimate for (unit, window) at `t`.
    pub fn estimate(&self, millis: bool, window: u64, t: u64) -> u64 {
        let Some((newest, counts)) = self.windows.get(&(millis, window)) else {
            return 0;
        };
        // The seed script's own lines, in doubles, at the judged time.
        let now = t.max(newest * window) as f64;
        let window_size = window as f64;
        let k = (now / window_size).floor() as u64;
        let current_count = *counts.get(&k).unwrap_or(&0) as f64;
        let prev_count = match k {
            0 => 0.0,
            _ => *counts.get(&(k - 1)).unwrap_or(&0) as f64,
        };
        let current_window_start = (now / window_size).floor() * window_size;
        let time_into_current = now - current_window_start;
        let prev_weight = (window_size - time_into_current) / window_size;
        (prev_count * prev_weight + current_count).floor() as u64
    }

    /// `[previous, current, elapsed]` as SLIDINGWINDOW.COUNTS reports them.
    pub fn counts(&self, millis: bool, window: u64, t: u64) -> [u64; 3] {
        let Some((newest, counts)) = self.windows.get(&(millis, window)) else {
            return [0, 0, t % window];
        };
        let t = t.max(newest * window);
        let k = t / window;
        let get = |i: u64| *counts.get(&i).unwrap_or(&0);
        let prev = if k == 0 { 0 } else { get(k - 1) };
        [prev, get(k), t % window]
    }

    /// The (unit, window) pairs held, for checks on what a key keeps.
    pub fn held(&self) -> usize {
        self.windows.len()
    }

    /// Decides a call of `limits` (`(limit, window)` pairs with distinct windows), and
    /// counts it when every limit allows it.
    pub fn call(&mut self, limits: &[(u64, u64)], millis: bool, now: u64, cost: u64) -> RefReply {
        let est: Vec<u64> = limits
            .iter()
            .map(|&(_, w)| self.estimate(millis, w, now))
            .collect();
        let allows = |i: usize| est[i] + cost <= limits[i].0;
        let allowed = (0..limits.len()).all(allows);
        let before = self.clone();
        if allowed {
            self.count(limits, millis, now, cost);
        }
        let after = if allowed { &*self } else { &before };
        let outcomes: Vec<RefOutcome> = (0..limits.len())
            .map(|i| {
                let (limit, w) = limits[i];
                let newest = after.windows.get(&(millis, w)).map_or(0, |x| x.0);
                let horizon = now.max(newest * w) + 3 * w;
                let retry_after = if allows(i) || cost > limit {
                    -1
                } else {
                    let ok = |t: u64| before.estimate(millis, w, t) + cost <= limit;
                    (scan(now, horizon, ok) - now) as i64
                };
                let zero = |t: u64| after.estimate(millis, w, t) == 0;
                let reset_after = (scan(now, horizon, zero) - now) as i64;
                let count = if allowed { est[i] + cost } else { est[i] };
                [
                    w as i64,
                    limit as i64,
                    count as i64,
                    limit.saturating_sub(count) as i64,
                    retry_after,
                    reset_after,
                ]
            })
            .collect();
        let denying: Vec<usize> = (0..limits.len()).filter(|&i| !allows(i)).collect();
        let retry_after = if allowed || denying.iter().any(|&i| cost > limits[i].0) {
            -1
        } else {
            denying.iter().map(|&i| outcomes[i][4]).max().unwrap_or(-1)
        };
        let reset_after = outcomes.iter().map(|o| o[5]).max().unwrap_or(0);
        let governing = if allowed {
            let least = outcomes.iter().map(|o| o[3]).min().unwrap_or(0);
            outcomes.iter().position(|o| o[3] == least).unwrap_or(0)
        } else {
            let wait = |i: usize| match outcomes[i][4] {
                -1 => i64::MAX,
                r => r,
            };
            let longest = denying.iter().map(|&i| wait(i)).max().unwrap_or(0);
            denying
                .iter()
                .copied()
                .find(|&i| wait(i) == longest)
                .unwrap_or(0)
        };
        RefReply {
            allowed,
            outcomes,
            governing,
            retry_after,
            reset_after,
        }
    }

    /// A REFUND of `cost` in each of `windows` the key holds: taken from the count of the
    /// window the call is judged in (`now`, or the newest window written when `now` is
    /// behind it), then from the window before, none below 0; a window with something
    /// given back is then newest at the judged window. Nothing is forgotten. Returns the
    /// units given back in all.
    pub fn refund(&mut self, windows: &[u64], millis: bool, now: u64, cost: u64) -> u64 {
        let mut given = 0;
        for &w in windows {
            let Some((newest, counts)) = self.windows.get_mut(&(millis, w)) else {
                continue;
            };
            let k = (now / w).max(*newest);
            let mut left = cost;
            for i in [Some(k), k.checked_sub(1)].into_iter().flatten() {
                let held = counts.entry(i).or_insert(0);
                let taken = left.min(*held);
                *held -= taken;
                left -= taken;
            }
            if left < cost {
                *newest = k;
                given += cost - left;
            }
        }
        given
    }

    /// Counts `cost` in every named window, and forgets the other windows whose newest
    /// counts are two windows old at `now`.
    fn count(&mut self, limits: &[(u64, u64)], millis: bool, now: u64, cost: u64) {
        let now_ms = now * unit_ms(millis);
        self.windows.retain(|&(m, w), (newest, _)| {
            let named = m == millis && limits.iter().any(|&(_, lw)| lw == w);
            named || (*newest + 2) * w * unit_ms(m) > now_ms
        });
        for &(_, w) in limits {
            let entry = self.windows.entry((millis, w)).or_default();
            let k = (now / w).max(entry.0);
            entry.0 = k;
            *entry.1.entry(k).or_insert(0) += cost;
        }
    }
}

/// The first `t` in `from..=to` with `ok(t)`.
fn scan(from: u64, to: u64, ok: impl Fn(u64) -> bool) -> u64 {
    (from..=to)
        .find(|&t| ok(t))
        .unwrap_or_else(|| panic!("nothing in {from}..={to}"))
}
