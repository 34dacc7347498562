"""Rate strings as the `limits`, slowapi and flask-limiter users write them (named `rates`
so as not to be taken for the `limits` package that limits_storage builds on).

    parse_limits("10/second;1000/hour")   -> [Rate(10, 1), Rate(1000, 3600)]
    parse_limits("5 per minute")          -> [Rate(5, 60)]
    parse_limits("100/5 minutes, 2000 per day")

One rate: `<count> (/ | per) [<n>] <unit>`, unit second, minute, hour or day (plural
allowed, any case). Rates are separated by `;`, `,` or `|`.
"""

from __future__ import annotations

import re

from .limit import MAX_LIMITS, Limit

UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
# The old name of MAX_LIMITS (deprecated): parse_limits names the bad string before the
# call; test_multi_limit.py checks on a server that the module accepts this many, not one more.
MAX_RATES = MAX_LIMITS
_SEPARATORS = re.compile(r"[;,|]")
_RATE = re.compile(r"(\d+)\s*(?:/|per\b)\s*(?:(\d+)\s*)?([a-z]+)", re.IGNORECASE)
_HINT = 'write e.g. "10/second", "1000 per hour" or "100/5 minutes"'


Rate = Limit  # the old name of Limit (deprecated: use slidingwindow.Limit)


def _unit_seconds(word: str, item: str, text: str) -> int:
    name = word.lower()
    if name.endswith("s") and name[:-1] in UNITS:
        name = name[:-1]
    if name in UNITS:
        return UNITS[name]
    if name.rstrip("s") in ("month", "year"):
        why = f"{word!r} windows vary in length: use days (e.g. 30 days)"
    else:
        why = f"unknown unit {word!r} (second, minute, hour or day)"
    raise ValueError(f"bad rate {item!r} in {text!r}: {why}")


def parse_rate(item: str, text: str | None = None) -> Rate:
    """One rate; `text` is the whole string, named in errors."""
    whole = item if text is None else text
    match = _RATE.fullmatch(item.strip())
    if match is None:
        raise ValueError(f"bad rate {item.strip()!r} in {whole!r}: {_HINT}")
    count, multiplier, unit = match.groups()
    n = int(multiplier) if multiplier is not None else 1
    if n < 1:
        raise ValueError(f"bad rate {item.strip()!r} in {whole!r}: the window must be >= 1")
    return Rate(int(count), n * _unit_seconds(unit, item.strip(), whole))


def parse_limits(text: str) -> list[Rate]:
    """The rates in `text`, in order. Raises ValueError naming the bad part: an empty string,
    an unknown unit, a missing count, two rates with the same window, more than 8 rates."""
    if not isinstance(text, str):
        raise TypeError(f"rate limits must be a string, got {text!r}")
    items = [item for item in _SEPARATORS.split(text) if item.strip()]
    if not items:
        raise ValueError(f"no rate in {text!r}: {_HINT}")
    rates = [parse_rate(item, text) for item in items]
    seen: dict[int, Rate] = {}
    for rate in rates:
        if rate.window in seen:
            raise ValueError(
                f"two rates with the same window in {text!r}: {seen[rate.window]} and "
                f"{rate}; keep one (the smaller limit is the one that applies)")
        seen[rate.window] = rate
    if len(rates) > MAX_RATES:
        raise ValueError(f"{len(rates)} rates in {text!r}: at most {MAX_RATES} per policy")
    return rates
