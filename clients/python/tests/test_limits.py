"""parse_limits: the rate strings of limits / slowapi / flask-limiter users."""

from __future__ import annotations

import pytest

from slidingwindow import Rate, parse_limits


@pytest.mark.parametrize("text, expected", [
    ("10/second", [Rate(10, 1)]),
    ("10/second;1000/hour", [Rate(10, 1), Rate(1000, 3600)]),
    ("5 per minute", [Rate(5, 60)]),
    ("5 per minutes", [Rate(5, 60)]),
    ("2000 per day", [Rate(2000, 86400)]),
    ("100/5 minutes", [Rate(100, 300)]),
    ("100 per 5 minutes, 3/2 hours", [Rate(100, 300), Rate(3, 7200)]),
    ("10 PER Seconds | 1/Day", [Rate(10, 1), Rate(1, 86400)]),
    ("  10 / second ;  ", [Rate(10, 1)]),  # spaces, a trailing separator
    ("0/hour", [Rate(0, 3600)]),  # a limit of 0 refuses everything, as the module does
])
def test_parses(text: str, expected: list[Rate]) -> None:
    assert parse_limits(text) == expected


@pytest.mark.parametrize("text, message", [
    ("", "no rate in ''"),
    (" ; ", "no rate in"),
    ("10/fortnight", "unknown unit 'fortnight' (second, minute, hour or day)"),
    ("10/second;10/fortnight", "bad rate '10/fortnight' in '10/second;10/fortnight'"),
    ("10/month", "'month' windows vary in length: use days"),
    ("1 per year", "'year' windows vary in length"),
    ("ten/second", "bad rate 'ten/second'"),
    ("-1/second", "bad rate '-1/second'"),
    ("10 persecond", "bad rate '10 persecond'"),
    ("10", "bad rate '10'"),
    ("/second", "bad rate '/second'"),
    ("10/0 minutes", "the window must be >= 1"),
    ("10/minute;20 per 60 seconds", "two rates with the same window"),
    (";".join(f"1/{n} seconds" for n in range(1, 10)), "9 rates in"),
])
def test_errors_name_the_bad_part(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_limits(text)
    assert message in str(caught.value)


def test_errors_show_how_to_write_it() -> None:
    with pytest.raises(ValueError, match='e.g. "10/second", "1000 per hour"'):
        parse_limits("lots")


def test_not_a_string() -> None:
    with pytest.raises(TypeError):
        parse_limits(10)  # type: ignore[arg-type]


def test_rates_print_as_they_read() -> None:
    assert [str(r) for r in parse_limits("10/second;100/5 minutes;2/7200 seconds")] == [
        "10 per second", "100 per 5 minutes", "2 per 2 hours"]
