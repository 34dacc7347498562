"""The three limiters as commands on the real server, encoded in bulk.

Each limiter turns a chunk of requests (identity, time in ms, unique sequence number)
into RESP bytes and reads back `Replies` (allowed, count, retry_after). Commands are
built from fixed-width templates whose integer fields are zero-padded digits, so a
chunk of 20,000 commands is a numpy array filled column by column, not 20,000 Python
string formats.

- `ModuleCounter`: SLIDINGWINDOW.CHECK sw:<id> limit window <now> [LIMIT l w]... MS
  [DETAILS]: the module, the sliding window counter.
- `FixedWindow`: INCR fw:<id>:<now // window>, and PEXPIRE of that key when INCR
  answered 1, as the usual client does (sent with a later chunk: the key's name carries
  its window, so the expiry is housekeeping, never a decision).
- `SlidingLog`: one sorted set per identity, through a Lua script (atomic):
  ZREMRANGEBYSCORE the entries at or before now - window, ZCARD, and ZADD when there is
  room. Denied requests are not logged.

Times sent to the server are T0 + t: 13 digits, no leading zero, and T0 a whole number
of hours, so window boundaries fall where the in-process references put them (at
multiples of the window from t = 0) for any window that divides an hour.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.resp import array_header, bulk_header

from .reference import fixed_window, sliding_counter, sliding_log

T0 = 1_000_000_800_000  # ms added to every simulated time: 277,778 hours (2001-09-09)
ID_DIGITS, NOW_DIGITS, SEQ_DIGITS, WIN_DIGITS = 7, 13, 10, 9

Piece = str | tuple[str, int]  # literal text, or (field name, digits)


class Template:
    """One command of fixed length; fields are zero-padded decimal integers."""

    def __init__(self, *args: str | Sequence[Piece]) -> None:
        out = bytearray(array_header(len(args)))
        self.fields: list[tuple[str, int, int]] = []  # (name, offset, digits)
        for arg in args:
            pieces: Sequence[Piece] = [arg] if isinstance(arg, str) else arg
            size = sum(len(p) if isinstance(p, str) else p[1] for p in pieces)
            out += bulk_header(size)
            for p in pieces:
                if isinstance(p, str):
                    out += p.encode()
                else:
                    self.fields.append((p[0], len(out), p[1]))
                    out += b"0" * p[1]
            out += b"\r\n"
        self.row = np.frombuffer(bytes(out), dtype=np.uint8)

    def rows(self, **values: np.ndarray) -> np.ndarray:
        """(n, length) uint8: one encoded command per row."""
        n = len(next(iter(values.values()))) if values else 0
        rows = np.tile(self.row, (n, 1))
        for name, off, digits in self.fields:
            v = np.asarray(values[name], dtype=np.int64)
            if n and (v.min() < 0 or v.max() >= 10**digits):
                raise ValueError(f"{name} does not fit in {digits} digits")
            for k in range(digits):
                rows[:, off + k] = 48 + (v // 10 ** (digits - 1 - k)) % 10
        return rows


def ints(lines: list[bytes], index: np.ndarray) -> np.ndarray:
    """The integer replies at `index` among reply lines (each `:<n>`)."""
    picked = np.array(lines)[index]  # fixed-width bytes, e.g. b":57"
    width = picked.dtype.itemsize
    digits = np.ascontiguousarray(picked.view(np.uint8).reshape(-1, width)[:, 1:])
    return digits.view(f"S{width - 1}").ravel().astype(np.int64)


def pack(blocks: Sequence[np.ndarray]) -> bytes:
    return b"".join(b.tobytes() for b in blocks)


@dataclass
class Replies:
    allowed: np.ndarray  # bool
    count: np.ndarray  # int64: the reply's count
    retry: np.ndarray | None = None  # int64: retry_after in ms (-1: allowed), when asked

    @staticmethod
    def concat(parts: Sequence[Replies]) -> Replies:
        retry = None
        if parts and parts[0].retry is not None:
            retry = np.concatenate([p.retry for p in parts if p.retry is not None])
        return Replies(np.concatenate([p.allowed for p in parts]),
                       np.concatenate([p.count for p in parts]), retry)


def check_window(*windows: int) -> None:
    for w in windows:
        if T0 % w:
            raise ValueError(f"window {w} ms does not divide T0: boundaries would shift")


class Limiter:
    """Encodes chunks and decodes their replies, in order (one chunk may be in flight)."""

    label = ""
    key = ""  # short name used in results
    stats: Sequence[str] = ()  # commandstats entries that make up one request

    def chunk(self, ident: np.ndarray, t: np.ndarray, seq: np.ndarray) -> tuple[bytes, int]:
        raise NotImplementedError

    def replies(self, lines: list[bytes]) -> Replies:
        raise NotImplementedError

    def retry_after(self, t: np.ndarray, replies: Replies) -> np.ndarray:
        """A denied request's wait in ms, as a client of this limiter learns it."""
        assert replies.retry is not None, "ask for retry_after (DETAILS) to use it"
        return replies.retry

    def setup(self, r: object) -> None:
        """Anything to do on the server before the first chunk (e.g. SCRIPT LOAD)."""

    def reference(self, ident: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The in-process reference's (allowed, count) on a stream sorted by (identity,
        time); count None when the reply's count is not compared."""
        raise NotImplementedError

    def finish(self) -> tuple[bytes, int]:
        """Commands still owed after the last chunk (their replies go to `replies`)."""
        return b"", 0


class ModuleCounter(Limiter):
    def __init__(self, limit: int, window: int, extra: Sequence[tuple[int, int]] = (),
                 details: bool = False, prefix: str = "sw", label: str = "",
                 key: str = "module", cost: int = 1) -> None:
        check_window(window, *(w for _, w in extra))
        opts: list[str] = []
        for lim, win in extra:
            opts += ["LIMIT", str(lim), str(win)]
        if cost != 1:
            opts += ["COST", str(cost)]
        opts.append("MS")
        if details:
            opts.append("DETAILS")
        self.template = Template("SLIDINGWINDOW.CHECK", [f"{prefix}:", ("id", ID_DIGITS)],
                                 str(limit), str(window), [("now", NOW_DIGITS)], *opts)
        n_limits = 1 + len(extra)
        # [allowed, count] = 3 lines; DETAILS: *6 + 6 = 7, and with several limits a 7th
        # element: *k then k x (*6 + 6 lines)
        self.lines = 7 + (1 + 7 * n_limits if n_limits > 1 else 0) if details else 3
        self.details = details
        self.limits = [(limit, window), *extra]
        self.label = label or "sliding window counter (module)"
        self.key = key
        self.stats = ("slidingwindow.check",)

    def chunk(self, ident: np.ndarray, t: np.ndarray, seq: np.ndarray) -> tuple[bytes, int]:
        rows = self.template.rows(id=ident, now=t + T0)
        return rows.tobytes(), self.lines * len(ident)

    def reference(self, ident: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        allowed, count = sliding_counter(ident.tolist(), t.tolist(), self.limits)
        # with several limits the reply's count is the governing limit's, not the first's
        return allowed, count if len(self.limits) == 1 else None

    def replies(self, lines: list[bytes]) -> Replies:
        base = np.arange(0, len(lines), self.lines)
        allowed = ints(lines, base + 1) == 1
        retry = ints(lines, base + 5) if self.details else None
        return Replies(allowed, ints(lines, base + 2), retry)


class FixedWindow(Limiter):
    def __init__(self, limit: int, window: int, step: int = 1) -> None:
        """`step` > 1: INCRBY step (filling keys for the memory measurement)."""
        check_window(window)
        self.limit, self.window, self.step = limit, window, step
        key: list[Piece] = ["fw:", ("id", ID_DIGITS), ":", ("win", WIN_DIGITS)]
        self.incr = Template("INCR", key) if step == 1 else Template("INCRBY", key, str(step))
        self.expire = Template("PEXPIRE", key, str(window))
        self.label, self.key = "fixed window (INCR + EXPIRE)", "fixed"
        self.stats = ("incr", "pexpire")
        self.to_expire: list[np.ndarray] = []  # (id, win) pairs INCR created the key for
        # per chunk in flight: its leading PEXPIREs, and its requests' (id, win)
        self.in_flight: deque[tuple[int, np.ndarray, np.ndarray]] = deque()

    def owed_expires(self) -> np.ndarray:
        """PEXPIRE rows for the keys INCR answered 1 for since the last call."""
        pend = np.concatenate(self.to_expire) if self.to_expire else np.zeros((0, 2), int)
        self.to_expire = []
        return self.expire.rows(id=pend[:, 0], win=pend[:, 1])

    def chunk(self, ident: np.ndarray, t: np.ndarray, seq: np.ndarray) -> tuple[bytes, int]:
        expires = self.owed_expires()
        win = (t + T0) // self.window
        self.in_flight.append((len(expires), ident, win))
        return pack([expires, self.incr.rows(id=ident, win=win)]), len(expires) + len(ident)

    def reference(self, ident: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        return fixed_window(ident, t, self.limit, self.window), None

    def retry_after(self, t: np.ndarray, replies: Replies) -> np.ndarray:
        # the client's usual answer (or the key's PTTL): the next window's start
        return np.asarray((t // self.window + 1) * self.window - t, dtype=np.int64)

    def finish(self) -> tuple[bytes, int]:
        none = np.zeros(0, dtype=np.int64)
        return self.chunk(none, none, none) if self.to_expire else (b"", 0)

    def replies(self, lines: list[bytes]) -> Replies:
        n_exp, ident, win = self.in_flight.popleft()
        counts = ints(lines, np.arange(n_exp, len(lines)))
        first = counts == self.step  # the key was just created
        if first.any():
            self.to_expire.append(np.stack([ident[first], win[first]], axis=1))
        return Replies(counts <= self.limit, counts)


SLIDING_LOG_LUA = """
-- Sliding log: a sorted set of the allowed requests' times (ms) per identity.
-- KEYS[1] log; ARGV: now, window, limit, member [, 1: also return retry_after]
local key, now = KEYS[1], tonumber(ARGV[1])
local window, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local n = redis.call('ZCARD', key)
if n < limit then
  redis.call('ZADD', key, ARGV[1], ARGV[4])
  redis.call('PEXPIRE', key, window)
  if ARGV[5] then return {1, n + 1, -1} end
  return {1, n + 1}
end
if ARGV[5] then
  -- the oldest entry leaves the window (now - window, now] at its time + window
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, n, tonumber(oldest[2]) + window - now}
end
return {0, n}
"""


class SlidingLog(Limiter):
    def __init__(self, limit: int, window: int, retry: bool = False) -> None:
        check_window(window)
        self.limit, self.window, self.retry = limit, window, retry
        self.label, self.key = "sliding log (sorted set, Lua)", "log"
        self.stats = ("evalsha",)
        self.lines = 4 if retry else 3
        self.args: list[str | list[Piece]] = [
            "1", ["sl:", ("id", ID_DIGITS)], [("now", NOW_DIGITS)], str(window), str(limit),
            [("seq", SEQ_DIGITS)], *(["1"] if retry else [])]
        self.template: Template | None = None

    def setup(self, r: object) -> None:
        sha = r.script_load(SLIDING_LOG_LUA)  # type: ignore[attr-defined]
        self.template = Template("EVALSHA", sha, *self.args)

    def reference(self, ident: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        return sliding_log(ident.tolist(), t.tolist(), self.limit, self.window), None

    def chunk(self, ident: np.ndarray, t: np.ndarray, seq: np.ndarray) -> tuple[bytes, int]:
        assert self.template is not None, "setup() loads the script first"
        rows = self.template.rows(id=ident, now=t + T0, seq=seq)
        return rows.tobytes(), self.lines * len(ident)

    def replies(self, lines: list[bytes]) -> Replies:
        base = np.arange(0, len(lines), self.lines)
        retry = ints(lines, base + 3) if self.retry else None
        return Replies(ints(lines, base + 1) == 1, ints(lines, base + 2), retry)
