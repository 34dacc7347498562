//! A call's arguments: which limits, in which unit, at what cost, at what time.

use crate::backend::{Op, Wire};
use crate::error::Error;
use crate::rates::{parse_limits, Limit, MAX_LIMITS};

/// The arguments of one `check`, `peek` or `refund`: one or several limits, the unit
/// (seconds unless [`ms`](Call::ms)), the cost, and an explicit `now` (default: the
/// server's clock).
///
/// ```
/// use slidingwindow_client::Call;
/// let per_minute = Call::new(100, 60);                       // 100 per 60 s
/// let burst = Call::new(10, 1).and_limit(1000, 3600).cost(2); // two limits, cost 2
/// let fine = Call::new(5, 500).ms();                          // 5 per 500 ms
/// let parsed = Call::rates("10/second;1000/hour").unwrap();   // windows in ms, sent with MS
/// let fixed = Call::new(100, 60).now(1_780_000_000);          // the caller's clock
/// # let _ = (per_minute, burst, fine, parsed, fixed);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub(crate) limits: Vec<Limit>,
    pub(crate) ms: bool,
    pub(crate) cost: u64,
    pub(crate) now: Option<u64>,
    rate_string: bool,
    conflict: bool,
}

impl Call {
    /// `limit` requests per sliding `window` seconds (milliseconds after [`ms`](Call::ms)).
    pub fn new(limit: u64, window: u64) -> Call {
        Call::limits([Limit::new(limit, window)])
    }

    /// Several limits, all or nothing, in call order (windows in seconds unless `ms`).
    pub fn limits(limits: impl IntoIterator<Item = Limit>) -> Call {
        Call {
            limits: limits.into_iter().collect(),
            ms: false,
            cost: 1,
            now: None,
            rate_string: false,
            conflict: false,
        }
    }

    /// The limits of a rate string (`"10/second;1000/hour"`): windows in milliseconds,
    /// sent with `MS`. Adding [`ms`](Call::ms) to it is an error ("a rate string carries
    /// its own unit").
    pub fn rates(text: &str) -> Result<Call, Error> {
        let mut c = Call::limits(parse_limits(text)?);
        c.ms = true;
        c.rate_string = true;
        Ok(c)
    }

    /// One more limit (`LIMIT limit window`), in the call's unit.
    pub fn and_limit(mut self, limit: u64, window: u64) -> Call {
        self.limits.push(Limit::new(limit, window));
        self
    }

    /// Every window and `now` are in milliseconds.
    pub fn ms(mut self) -> Call {
        if self.rate_string {
            self.conflict = true;
        }
        self.ms = true;
        self
    }

    /// How much this request counts (default 1).
    pub fn cost(mut self, cost: u64) -> Call {
        self.cost = cost;
        self
    }

    /// The current time in the call's unit (default: the server's clock).
    pub fn now(mut self, now: u64) -> Call {
        self.now = Some(now);
        self
    }

    /// The limits, in call order.
    pub fn limit_list(&self) -> &[Limit] {
        &self.limits
    }

    /// Whether the windows are in milliseconds.
    pub fn is_ms(&self) -> bool {
        self.ms
    }

    /// The cost.
    pub fn cost_value(&self) -> u64 {
        self.cost
    }

    /// The explicit `now`, if any.
    pub fn now_value(&self) -> Option<u64> {
        self.now
    }

    /// The checks made before any I/O (the ranges are the server's job).
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.conflict {
            return Err(Error::InvalidArgument(
                "a rate string carries its own unit (ms): give (limit, window) pairs with ms"
                    .into(),
            ));
        }
        if self.limits.is_empty() {
            return Err(Error::InvalidArgument("no limit given".into()));
        }
        if self.limits.len() > MAX_LIMITS {
            return Err(Error::InvalidArgument(format!(
                "{} limits: at most {MAX_LIMITS} per call",
                self.limits.len()
            )));
        }
        if self.cost == 0 {
            return Err(Error::InvalidArgument("cost must be at least 1".into()));
        }
        Ok(())
    }

    /// The module's argument vector for `op` on `key` (always with `DETAILS`).
    pub(crate) fn wire(&self, op: Op, key: String) -> Wire {
        let first = self.limits[0];
        let mut args = vec![first.limit.to_string(), first.window.to_string()];
        if let Some(now) = self.now {
            args.push(now.to_string());
        }
        for l in &self.limits[1..] {
            args.extend([
                "LIMIT".to_string(),
                l.limit.to_string(),
                l.window.to_string(),
            ]);
        }
        if self.cost != 1 {
            args.extend(["COST".to_string(), self.cost.to_string()]);
        }
        if self.ms {
            args.push("MS".into());
        }
        args.push("DETAILS".into());
        Wire { op, key, args }
    }

    pub(crate) fn windows(&self) -> Vec<u64> {
        self.limits.iter().map(|l| l.window).collect()
    }
}

impl From<Limit> for Call {
    fn from(l: Limit) -> Call {
        Call::limits([l])
    }
}
