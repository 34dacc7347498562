"""parse_limits: the rate strings of limits / slowapi / flask-limiter users. The accepted
forms and every error message are conformance/rates.json (test_conformance_rates.py);
here what the vectors cannot say."""

from __future__ import annotations

import pytest

from slidingwindow import Limit, parse_limits
from slidingwindow.core.rates import describe_ms


def test_windows_are_in_ms() -> None:
    assert parse_limits("10/second;1000/hour") == [Limit(10, 1000), Limit(1000, 3_600_000)]


def test_not_a_string() -> None:
    with pytest.raises(TypeError):
        parse_limits(10)  # type: ignore[arg-type]


def test_rates_print_as_they_read() -> None:
    # Windows in ms (rate strings are sent with MS); describe_ms names them in words.
    assert [describe_ms(r.limit, r.window)
            for r in parse_limits("10/second;100/5 minutes;2/7200 seconds")] == [
        "10 per second", "100 per 5 minutes", "2 per 2 hours"]
    assert describe_ms(3, 1500) == "3 per 1500 ms"
