"""The reference limiters and the exact counter on small hand-made streams whose answers
are worked out by hand in the comments."""

import numpy as np
import pytest

from .metrics import estimate_error, judge
from .reference import (
    count_before,
    fixed_window,
    fixed_window_counts,
    max_in_window,
    sliding_counter,
    sliding_log,
    window_start,
)

T, F = True, False


def arr(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_window_start_and_count_before_use_the_half_open_window() -> None:
    # identity 0 at 0, 5, 10, 15; identity 1 at 3, 20; span 10: true window (t-10, t]
    ident, t = arr(0, 0, 0, 0, 1, 1), arr(0, 5, 10, 15, 3, 20)
    # t=10 excludes t=0 (0 <= 10-10); t=15 excludes 5; identity 1's t=20 excludes its 3
    assert window_start(ident, t, 10).tolist() == [0, 0, 1, 2, 4, 5]
    ones = np.ones(6, dtype=np.int64)
    assert count_before(ident, t, 10, ones).tolist() == [0, 1, 1, 1, 0, 0]
    # only the weighted (e.g. allowed) requests count: t=5 weighs 0
    w = arr(1, 0, 1, 1, 1, 1)
    assert count_before(ident, t, 10, w).tolist() == [0, 1, 0, 1, 0, 0]


def test_count_before_counts_earlier_requests_of_the_same_millisecond() -> None:
    ident, t = arr(7, 7, 7), arr(4, 4, 4)
    assert count_before(ident, t, 10, np.ones(3, dtype=np.int64)).tolist() == [0, 1, 2]


def test_max_in_window_finds_the_busiest_interval_per_identity() -> None:
    # identity 0: 0,1,2,10,11 -> (0,10] holds 1,2,10 and (1,11] holds 2,10,11: 3 at most
    # identity 1: three at 5, one at 14 -> (4,14] holds all four
    # identity 2: 0 and 10 never share an interval of 10: 1
    ident = arr(0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2)
    t = arr(0, 1, 2, 10, 11, 5, 5, 5, 14, 0, 10)
    ones = np.ones(len(t), dtype=np.int64)
    assert max_in_window(ident, t, 10, ones).tolist() == [3, 4, 1]
    # weights: only identity 1's last two count -> 2
    w = arr(1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1)
    assert max_in_window(ident, t, 10, w).tolist() == [3, 2, 1]
    # a span of 1 is one millisecond: the three at 5 together
    assert max_in_window(ident, t, 1, ones).tolist() == [1, 3, 1]


def test_fixed_window_restarts_at_each_boundary() -> None:
    # limit 2 per window of 10: [0,10) gets 0,1; [10,20) gets 10,11; [20,30) gets 20
    ident = arr(0, 0, 0, 0, 0, 0, 0, 0, 0)
    t = arr(0, 1, 2, 9, 10, 11, 12, 19, 20)
    assert fixed_window(ident, t, 2, 10).tolist() == [T, T, F, F, T, T, F, F, T]


def test_fixed_window_lets_a_double_burst_through_across_a_boundary() -> None:
    # two at 9 (end of window 0) and two at 10 (start of window 1): all four, in 2 ms
    ident, t = arr(0, 0, 0, 0, 1, 1, 1), arr(9, 9, 10, 10, 9, 9, 9)
    assert fixed_window(ident, t, 2, 10).tolist() == [T, T, T, T, T, T, F]


def test_fixed_window_counts_are_the_fixed_windows_own_view() -> None:
    ident, t = arr(0, 0, 0, 0), arr(8, 9, 10, 11)
    allowed = arr(1, 1, 1, 0)
    # before 9: one (8); at 10 the window restarts: 0; before 11: one (10)
    assert fixed_window_counts(ident, t, 10, allowed).tolist() == [0, 1, 0, 1]


def test_sliding_log_is_exact() -> None:
    # limit 2, window 10. 0,1 allowed; 2 and 9 denied ((-8,2] and (-1,9] hold 0 and 1);
    # 10 allowed ((0,10] holds 1 only); 11 allowed ((1,11] holds 10); 12 denied (10, 11)
    ident, t = arr(0, 0, 0, 0, 0, 0, 0), arr(0, 1, 2, 9, 10, 11, 12)
    assert sliding_log(ident.tolist(), t.tolist(), 2, 10).tolist() == [T, T, F, F, T, T, F]


def test_sliding_log_never_lets_more_than_the_limit_into_a_true_window() -> None:
    rng = np.random.default_rng(1)
    ident = np.sort(rng.integers(0, 5, 2000))
    t = np.concatenate([np.sort(rng.integers(0, 500, int((ident == i).sum()))) for i in range(5)])
    allowed = sliding_log(ident.tolist(), t.tolist(), 7, 50)
    assert max_in_window(ident, t, 50, allowed.astype(np.int64)).max() == 7
    # and it denies only when the window is full: the exact judgement agrees everywhere
    before = count_before(ident, t, 50, allowed.astype(np.int64))
    assert np.array_equal(allowed, before < 7)


def test_sliding_counter_end_of_window_burst_then_a_stream() -> None:
    # limit 10, window 100. Ten at 95 (window 0): allowed, counts 1..10.
    # t=100 (window 1, elapsed 0): estimate floor(10*1.0 + 0) = 10: denied, count 10.
    # t=150: weight 0.5: estimates 5,6,7,8,9 allowed (counts 6..10), then 10: denied.
    # t=194: weight 0.06: floor(0.6 + 5) = 5: allowed, count 6.
    ident = [0] * 18
    t = [95] * 10 + [100] + [150] * 6 + [194]
    allowed, count = sliding_counter(ident, t, [(10, 100)])
    assert allowed.tolist() == [T] * 10 + [F] + [T] * 5 + [F] + [T]
    assert count.tolist() == list(range(1, 11)) + [10] + [6, 7, 8, 9, 10] + [10] + [6]
    # the true window (94, 194] holds 10 + 5 + 1 = 16 allowed: 1.6 x the limit
    a = allowed.astype(np.int64)
    assert max_in_window(np.zeros(18, dtype=np.int64), np.array(t), 100, a).tolist() == [16]


def test_sliding_counter_forgets_a_window_two_windows_old() -> None:
    # 3 at 5 (window 0); at 205 (window 2) window 0 is two windows old: estimate 0
    allowed, count = sliding_counter([0] * 4, [5, 5, 5, 205], [(3, 100)])
    assert allowed.tolist() == [T, T, T, T] and count.tolist() == [1, 2, 3, 1]


def test_sliding_counter_several_limits_all_or_nothing() -> None:
    # 5 per 100 and 2 per 10: at 0 the short limit stops the third; at 10 the short
    # window's previous 2 weigh 1.0: denied; at 15 weight 0.5: est 1, allowed, and
    # counted in both windows; the long one then holds 3, so at 50 two more (4, 5) fit
    # the short limit only after weighing: 50 is window 5 of the short one (index 4
    # holds nothing): est 0, 1 -> allowed, allowed; the sixth is denied by the long one
    ident = [0] * 8
    t = [0, 0, 0, 10, 15, 50, 50, 50]
    allowed, count = sliding_counter(ident, t, [(5, 100), (2, 10)])
    assert allowed.tolist() == [T, T, F, F, T, T, T, F]
    # count: the first (long) limit's estimate, +1 when allowed
    assert count.tolist() == [1, 2, 2, 2, 3, 4, 5, 5]


def test_identities_are_independent() -> None:
    ident = [0, 0, 1, 1]
    t = [0, 0, 0, 0]
    assert sliding_log(ident, t, 1, 10).tolist() == [T, F, T, F]
    assert sliding_counter(ident, t, [(1, 10)])[0].tolist() == [T, F, T, F]
    assert fixed_window(arr(*ident), arr(*t), 1, 10).tolist() == [T, F, T, F]


@pytest.mark.parametrize("limit", [1, 3, 10])
def test_an_even_stream_at_the_limit_passes_the_log_and_fixed_window_not_the_counter(
    limit: int,
) -> None:
    # one request every window/limit ms from 0: exactly the limit in every true window
    window = 60
    t = np.arange(0, 10 * window, window // limit, dtype=np.int64)
    ident = np.zeros(len(t), dtype=np.int64)
    assert fixed_window(ident, t, limit, window).all()
    assert sliding_log(ident.tolist(), t.tolist(), limit, window).all()
    # the counter denies the request at t = window: elapsed 0 weighs the previous
    # window's `limit` requests fully (the one at 0 too, though it left the true window)
    allowed = sliding_counter(ident.tolist(), t.tolist(), [(limit, window)])[0]
    assert allowed[:limit].all() and not allowed[limit]


def test_judge_counts_both_kinds_of_mistake_on_a_hand_made_stream() -> None:
    # limit 2, window 10; one identity at 0, 1, 2, 10, 11; a limiter allowed T T T F T
    ident, t = arr(0, 0, 0, 0, 0), arr(0, 1, 2, 10, 11)
    allowed = np.array([T, T, T, F, T])
    j = judge(ident, t, allowed, 2, 10)
    # (a) own history: at 2 it had allowed 0 and 1 already: wrongly allowed. At 10,
    # (0,10] holds its allowed 1, 2: denying is right. At 11, (1,11] holds 2: room.
    assert j["same_history"]["wrongly_allowed"] == 1
    assert j["same_history"]["wrongly_denied"] == 0
    # (b) all requests count: at 2, 10 and 11 three were sent in the true window, so
    # the source is over; allowing 2 and 11 is wrong, denying 10 right
    assert j["cloudflare"]["wrongly_allowed"] == 2
    assert j["cloudflare"]["wrongly_limited"] == 0
    # allowed 0, 1, 2 share (−8, 2]: 3 = 1.5 x the limit; in 1 ms at most 1 = 0.5 x
    assert j["max_in_window"]["worst"] == 1.5
    assert j["max_in_tenth"]["worst"] == 0.5
    assert j["let_over"]["identities"] == 1 and j["identities_exceeded"] == 1


def test_judge_an_identity_under_the_limit_wrongly_denied() -> None:
    # limit 2, window 10: one request at 0 and one at 10; the second is denied although
    # (0,10] holds nothing: wrong in both judgements, and the identity was never over
    j = judge(arr(3, 3), arr(0, 10), np.array([T, F]), 2, 10)
    assert j["same_history"]["wrongly_denied"] == 1
    assert j["same_history"]["identities_wrongly_denied"] == 1
    assert j["cloudflare"]["wrongly_limited"] == 1
    assert j["cloudflare"]["identities_never_over_but_limited"] == 1
    assert j["identities_exceeded"] == 0 and j["max_in_window"]["n"] == 0


def test_estimate_error_is_relative_to_the_exact_count() -> None:
    # exact 0 is skipped; 10 estimated 12 (+20%), 4 estimated 3 (-25%)
    e = estimate_error(arr(5, 12, 3), arr(0, 10, 4), limit=10)
    assert e["mean_relative"] == pytest.approx((0.2 + 0.25) / 2)
    assert e["worst_relative"] == pytest.approx(0.25)
    assert e["mean_relative_near_limit"] == pytest.approx(0.2)  # only exact >= 5
    assert e["worst_over_in_limits"] == pytest.approx(0.5)  # 5 vs 0
