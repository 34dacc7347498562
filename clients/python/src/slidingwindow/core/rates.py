"""Rate strings as the `limits`, slowapi and flask-limiter users write them (named `rates`
so as not to be taken for the `limits` package that limits_storage builds on).

    parse_limits("10/second;1000/hour")   -> [Limit(10, 1000), Limit(1000, 3600000)]
    parse_limits("5 per minute")          -> [Limit(5, 60000)]
    parse_limits("100/5 minutes, 2000 per day")

Windows are in MILLISECONDS, and a call given a rate string sends MS: a window of a few
units judged in whole units hardly slides (a 1-second window at 1-second resolution counts
the previous second in full), in milliseconds it does. A rate string carries its own unit,
so a call given one together with `ms=True` is an error. (The same windows from a list
of Limits or (limit, window) pairs mean seconds unless `ms=True`.)

One rate: `<count> (/ | per) [<n>] <unit>`, unit second, minute, hour or day (plural
allowed, any case). Rates are separated by `;`, `,` or `|`. The error messages are the
Node client's, word for word (conformance/rates.json holds both clients to it).
"""

from __future__ import annotations

import re

from .limit import MAX_LIMITS, Limit

UNITS_MS = {"second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}
# The old name of MAX_LIMITS (deprecated): parse_limits names the bad string before the
# call; test_multi_limit.py checks on a server that the module accepts this many, not one more.
MAX_RATES = MAX_LIMITS
_SEPARATORS = re.compile(r"[;,|]")
# ASCII digits and letters only, as the Node client's /i regex reads them (Python's \d and
# an IGNORECASE [a-z] would also take other scripts' digits and the Kelvin sign).
_RATE = re.compile(r"([0-9]+)\s*(?:/|[Pp][Ee][Rr]\b)\s*(?:([0-9]+)\s*)?([A-Za-z]+)")
_HINT = 'write e.g. "10/second", "1000 per hour" or "100/5 minutes"'
MS_WITH_RATE_STRING = "a rate string carries its own unit (ms): give (limit, window) pairs with ms"


Rate = Limit  # the old name of Limit (deprecated: use slidingwindow.Limit)


def describe_ms(limit: int, window_ms: int) -> str:
    """`10 per second`, `100 per 5 minutes`, `3 per 1500 ms`: a window in ms in words."""
    for unit, size in sorted(UNITS_MS.items(), key=lambda u: -u[1]):
        if window_ms % size == 0:
            n = window_ms // size
            return f"{limit} per {unit}" if n == 1 else f"{limit} per {n} {unit}s"
    return f"{limit} per {window_ms} ms"


def _unit_ms(word: str, item: str, text: str) -> int:
    name = word.lower()
    if name.endswith("s") and name[:-1] in UNITS_MS:
        name = name[:-1]
    if name in UNITS_MS:
        return UNITS_MS[name]
    if name.rstrip("s") in ("month", "year"):
        why = f"'{word}' windows vary in length: use days (e.g. 30 days)"
    else:
        why = f"unknown unit '{word}' (second, minute, hour or day)"
    raise ValueError(f"bad rate '{item}' in '{text}': {why}")


def parse_rate(item: str, text: str | None = None) -> Limit:
    """One rate, window in ms; `text` is the whole string, named in errors."""
    item = item.strip()
    whole = item if text is None else text
    match = _RATE.fullmatch(item)
    if match is None:
        raise ValueError(f"bad rate '{item}' in '{whole}': {_HINT}")
    count, multiplier, unit = match.groups()
    n = int(multiplier) if multiplier is not None else 1
    if n < 1:
        raise ValueError(f"bad rate '{item}' in '{whole}': the window must be >= 1")
    return Limit(int(count), n * _unit_ms(unit, item, whole))


def parse_limits(text: str) -> list[Limit]:
    """The rates in `text`, in order, windows in ms. Raises ValueError naming the bad part:
    an empty string, an unknown unit, a missing count, two rates with the same window,
    more than 8 rates."""
    if not isinstance(text, str):
        raise TypeError(f"rate limits must be a string, got {text!r}")
    items = [item.strip() for item in _SEPARATORS.split(text) if item.strip()]
    if not items:
        raise ValueError(f"no rate in '{text}': {_HINT}")
    rates = [parse_rate(item, text) for item in items]
    seen: dict[int, Limit] = {}
    for rate in rates:
        before = seen.get(rate.window)
        if before is not None:
            raise ValueError(
                f"two rates with the same window in '{text}': "
                f"{describe_ms(before.limit, before.window)} and "
                f"{describe_ms(rate.limit, rate.window)}; keep one (the smaller limit is the "
                "one that applies)")
        seen[rate.window] = rate
    if len(rates) > MAX_RATES:
        raise ValueError(f"{len(rates)} rates in '{text}': at most {MAX_RATES} per policy")
    return rates
