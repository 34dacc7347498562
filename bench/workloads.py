"""What is measured: the commands (cases), the keys each run touches, and the Zipf stream.

Every case runs in a database of its own. The kinds of keys (`Case.keys`):

* warm: a keyspace of `keyspace` ids, written before measuring (steady state); each run
  draws random ids from it.
* new: the same warm keyspace as background, but each run uses ids never written
  before, so every call finds no key and creates one; the keys are deleted after the
  run (not timed), so the database does not grow from run to run.
* aged: the warm background, and ids written AGE_WINDOWS windows before `now` (still
  present: the module's expiry follows the server clock), so every call finds a key whose
  counts have aged out. Each run's ids are written during the previous round, so other
  cases' runs have pushed them out of the cache by the time they are measured; they are
  deleted after the run.
* stream: identities drawn from a Zipf-like distribution over STREAM_IDS ids, the
  server's clock (the seed's script gets the client's clock, as its Python does), a
  realistic limit: keys are created, aged and expired as traffic makes them.
"""

from __future__ import annotations

import bisect
import itertools
import random
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from resp import Arg

WINDOW = 3600  # seconds; long enough that nothing written by a run expires during it
VALUE = b"v" * 10  # SET's value: the size of the module's state (~10 bytes)
# The allowed path's limit: far above any key's count in a run (every reply is checked),
# of a realistic width (DETAILS formats it); raised by allowed_limit() when needed.
ALLOWED_LIMIT = 10_000
AGE_WINDOWS = 4  # aged keys were last written this many windows before `now`
DENIED_PREFILL_COST = 10  # denied keys hold 10 + 10: still denied an hour later
STREAM_IDS = 1_000_000
STREAM_EXPONENT = 1.0  # P(rank k) ~ 1 / k^s: a few heavy identities, a long tail
STREAM_LIMIT, STREAM_WINDOW = 100, 60  # per identity: 100 requests a minute
RB_RANDOM = "__rand_int__"  # redis-benchmark's placeholder: 12 random digits
RB_MAX_KEYSPACE = 2**31 - 1  # redis-benchmark draws random() % keyspace

Cmd = Callable[[str, int], list[Arg]]  # (id, the client's clock in seconds) -> args


def ident(i: int) -> str:
    # The text redis-benchmark substitutes for __rand_int__: both drivers hit the same keys.
    return "%012d" % i


def three_limits(limit: int) -> tuple[Arg, ...]:
    """The options that add a 60 s and a 1 s limit to a 3600 s one (issue 11)."""
    return ("LIMIT", limit, 60, "LIMIT", limit, 1)


@dataclass
class Case:
    """One benchmarked command on a database of its own."""

    key: str
    label: str
    cmd: Cmd
    stat: str  # its INFO commandstats name
    lines: int | None  # reply lines (None: learnt by probing, for --extra-command)
    keys: str = "warm"  # warm | new | aged | stream
    clock: bool = False  # True: no `now` argument, the server's clock
    expect: str | None = None  # allowed | denied | None (a mix: the stream)
    # Writes a key's state at a time; None: cmd, whose `now` is fixed (one prefill time).
    prefill: Cmd | None = None
    prefill_lines: int = 3
    prefill_at: Sequence[int] = ()  # the times the background keyspace is written at
    allowed_pat: bytes | None = None
    denied_pat: bytes | None = None
    counted_by: str | None = None  # "module": INFO slidingwindow; "seed": the script's INCRs
    plain: bool = True  # also measured under plain conditions (redis-benchmark)
    note: str = ""
    db: int = 0
    sample_reply: str | None = field(default=None, repr=False)

    def writes(self) -> Cmd:
        return self.prefill or self.cmd


A2, D2 = b"*2\r\n:1\r\n", b"*2\r\n:0\r\n"  # [1, n] and [0, n]
A6, D6 = b"*6\r\n:1\r\n", b"*6\r\n:0\r\n"  # the same with DETAILS
# [1, 1]: allowed with no live count before the call. The only allowed reply the new and
# aged cases accept, so each of their calls is shown to have found no key or stale counts.
A11 = b"*2\r\n:1\r\n:1\r\n"


def calls_per_key(cfg: dict[str, int]) -> float:
    """An upper bound on the mean calls one warm key gets in a full run."""
    driver = cfg["repeats"] * (cfg["n32"] + cfg["n1"]) + cfg["lat_n"] + 2
    plain = cfg["plain_runs"] * cfg["plain_n"]
    return (driver + plain) / cfg["keyspace"]


def allowed_limit(cfg: dict[str, int]) -> int:
    limit = ALLOWED_LIMIT
    while limit < 4 * calls_per_key(cfg) + 100:
        limit *= 10
    return limit


SEED_CASES = ("seed", "stream_seed")  # left out when the seed's script is not available


def make_cases(sha: str | None, now: int, extra_commands: Sequence[str] = (),
               limit: int = ALLOWED_LIMIT) -> list[Case]:
    """The cases, in table order. `now` is the explicit time of the warm and new cases."""
    px = (now + 2 * WINDOW) * 1000

    def sw(cmd: str, prefix: str, lim: int, t: int | None, *opt: Arg) -> Cmd:
        tail = [] if t is None else [t]
        return lambda i, _t: [cmd, f"{prefix}:{i}", lim, WINDOW, *tail, *opt]

    def check(prefix: str, lim: int = limit, t: int | None = now, *opt: Arg) -> Cmd:
        return sw("SLIDINGWINDOW.CHECK", prefix, lim, t, *opt)

    def warm_at(prefix: str, *opt: Arg) -> Cmd:
        return lambda i, t: ["SLIDINGWINDOW.CHECK", f"{prefix}:{i}", limit, WINDOW, t, *opt]

    def set_px(prefix: str) -> Cmd:
        return lambda i, _t: ["SET", f"{prefix}:{i}", VALUE, "PXAT", px]

    steady = (now - WINDOW, now)  # one request in the previous window, one in this one

    def module_case(key: str, label: str, cmd: Cmd, prefix: str, *opt: Arg, keys: str = "warm",
                    clock: bool = False, expect: str = "allowed", stat: str = "slidingwindow.check",
                    lines: int = 3, pats: tuple[bytes, bytes] = (A2, D2)) -> Case:
        """A module command over keys written at `steady` (with `opt`) under `prefix`."""
        return Case(key, label, cmd, stat, lines, keys=keys, clock=clock, expect=expect,
                    prefill=warm_at(prefix, *opt), prefill_at=steady, allowed_pat=pats[0],
                    denied_pat=pats[1], counted_by="module" if stat.endswith("check") else None)

    def allowed(key: str, label: str, prefix: str, keys: str, clock: bool) -> Case:
        return module_case(key, label, check(prefix, t=None if clock else now), prefix,
                           keys=keys, clock=clock, pats=(A2 if keys == "warm" else A11, D2))

    def seed(i: str, t: int, lim: int = limit, window: int = WINDOW, prefix: str = "rate"
             ) -> list[Arg]:
        w = t // window
        return ["EVALSHA", sha, 2, f"{prefix}:{i}:{w}", f"{prefix}:{i}:{w - 1}", lim, window, t]

    cases = [
        Case("incr", "INCR", lambda i, _t: ["INCR", f"incr:{i}"], "incr", 1, prefill_at=[now]),
        Case("set", "SET", lambda i, _t: ["SET", f"set:{i}", VALUE], "set", 1, prefill_at=[now]),
        Case("setpxat", "SET PXAT, existing keys", set_px("setpx"), "set", 1,
             prefill_at=[now]),
        Case("setpxat_new", "SET PXAT, new keys", set_px("setpxn"), "set", 1, keys="new",
             prefill_at=[now]),
        # The floor for a read: find a key with a TTL, read its 10-byte value.
        Case("get", "GET (value with TTL)", lambda i, _t: ["GET", f"getpx:{i}"], "get", 2,
             prefill=set_px("getpx"), prefill_lines=1, prefill_at=[now]),
        allowed("check", "CHECK, warm keys, now", "sw", "warm", False),
        allowed("check_clock", "CHECK, warm keys, server clock", "swc", "warm", True),
        allowed("check_new", "CHECK, new keys, now", "swn", "new", False),
        allowed("check_new_clock", "CHECK, new keys, server clock", "swnc", "new", True),
        allowed("check_aged", "CHECK, aged-out keys, now", "swa", "aged", False),
        allowed("check_aged_clock", "CHECK, aged-out keys, server clock", "swac", "aged", True),
        # Every key holds 10 in the previous window and 10 in this one, so with limit 1
        # every call is denied (and writes nothing).
        module_case("denied", "CHECK denied, now", check("swd", 1), "swd", "COST",
                    DENIED_PREFILL_COST, expect="denied"),
        module_case("denied_clock", "CHECK denied, server clock", check("swdc", 1, None), "swdc",
                    "COST", DENIED_PREFILL_COST, clock=True, expect="denied"),
        module_case("peek", "PEEK, now", sw("SLIDINGWINDOW.PEEK", "swp", limit, now), "swp",
                    stat="slidingwindow.peek"),
        module_case("peek_clock", "PEEK, server clock",
                    sw("SLIDINGWINDOW.PEEK", "swpc", limit, None), "swpc", clock=True,
                    stat="slidingwindow.peek"),
        # Issue 20: REFUND cost 1 on keys holding a quarter of the limit in each of the
        # previous and this window (more than a run's calls per key), so every call
        # gives one back and writes.
        module_case("refund", "REFUND, warm keys, now",
                    sw("SLIDINGWINDOW.REFUND", "swr", limit, now), "swr", "COST", limit // 4,
                    stat="slidingwindow.refund"),
        # The allowed CHECK that REFUND is judged against: on keys holding what the
        # refund case's keys hold (two-byte counts, replies of four digits).
        module_case("check_held", "CHECK, warm keys holding a quarter of the limit, now",
                    check("swh", limit, now), "swh", "COST", limit // 4),
        module_case("details", "CHECK DETAILS, warm keys, now",
                    check("swx", limit, now, "DETAILS"), "swx", lines=7, pats=(A6, D6)),
        # Issue 11: the same call with two more limits, in one key holding three windows.
        module_case("check3", "CHECK, 3 limits (3600 s, 60 s, 1 s), warm keys, now",
                    check("sw3", limit, now, *three_limits(limit)), "sw3",
                    *three_limits(limit)),
        Case("seed", "seed script, warm keys", lambda i, _t: seed(i, now), "evalsha", 3,
             expect="allowed", prefill_at=steady, prefill=lambda i, t: seed(i, t),
             allowed_pat=A2, denied_pat=D2, counted_by="seed",
             note="redis-benchmark draws the two ids of the seed's keys independently; the "
                  "Python driver uses the seed's exact naming"),
        Case("stream_check", "CHECK, Zipf stream, server clock",
             lambda i, _t: ["SLIDINGWINDOW.CHECK", f"zipf:{i}", STREAM_LIMIT, STREAM_WINDOW],
             "slidingwindow.check", 3, keys="stream", clock=True, allowed_pat=A2,
             denied_pat=D2, counted_by="module", plain=False),
        # Issue 21: the same stream through the Functions library (lua/slidingwindow.lua),
        # loaded beside the module: the same answers and key bytes, in Lua.
        Case("stream_lua", "Functions library (FCALL), Zipf stream, server clock",
             lambda i, _t: ["FCALL", "slidingwindow_check", 1, f"zlua:{i}", STREAM_LIMIT,
                            STREAM_WINDOW],
             "fcall", 3, keys="stream", clock=True, allowed_pat=A2, denied_pat=D2,
             plain=False),
        Case("stream_seed", "seed script, Zipf stream",
             lambda i, t: seed(i, t, STREAM_LIMIT, STREAM_WINDOW, "zrate"), "evalsha", 3,
             keys="stream", allowed_pat=A2, denied_pat=D2, counted_by="seed", plain=False,
             note="the seed's own key naming; `now` from the client's clock, as the seed's "
                  "Python passes it"),
    ]
    if sha is None:
        cases = [c for c in cases if c.key not in SEED_CASES]
    for j, text in enumerate(extra_commands):
        cases.append(extra_case(j, text, now))
    for db, c in enumerate(cases, start=1):
        c.db = db
    return cases


def extra_case(j: int, text: str, now: int) -> Case:
    """--extra-command: {key} becomes a key, {now} / {now_ms} the client's clock."""
    words = shlex.split(text)

    def cmd(i: str, t: int) -> list[Arg]:
        return [x.replace("{key}", f"x{j}:{i}").replace("{now_ms}", str(t * 1000))
                .replace("{now}", str(t)) for x in words]

    return Case(f"extra{j}", f"extra: {text}", cmd, words[0].lower(), None, prefill_at=[now])


class Zipf:
    """Ranks 1..n with P(k) ~ 1/k^s, each rank mapped to a fixed random identity."""

    def __init__(self, n: int = STREAM_IDS, s: float = STREAM_EXPONENT, seed: int = 1) -> None:
        self.cum = list(itertools.accumulate(1.0 / k**s for k in range(1, n + 1)))
        self.ids = list(range(n))
        random.Random(seed).shuffle(self.ids)

    def draw(self, rng: random.Random, count: int) -> list[int]:
        total = self.cum[-1]
        cum, ids, rnd = self.cum, self.ids, rng.random
        return [ids[bisect.bisect_left(cum, rnd() * total)] for _ in range(count)]


class Ids:
    """The ids of one measured run, by the kind of keys; the same draws for every case of
    a kind in a round (SET PXAT and CHECK on the same ids)."""

    def __init__(self, keyspace: int, seed: int, zipf: Zipf | None) -> None:
        self.keyspace, self.seed, self.zipf = keyspace, seed, zipf

    def fresh(self, slot: int, n: int, n_max: int) -> list[int]:
        # Never written before: above the warm keyspace, a range of their own per slot.
        base = self.keyspace + slot * n_max
        return list(range(base, base + n))

    def for_run(self, keys: str, slot: int, n: int, n_max: int) -> list[int]:
        rng = random.Random(self.seed * 1_000_003 + slot)
        if keys == "warm":
            return [rng.randrange(self.keyspace) for _ in range(n)]
        if keys in ("new", "aged"):
            ids = self.fresh(slot, n, n_max)
            rng.shuffle(ids)
            return ids
        if keys == "stream" and self.zipf is not None:
            return self.zipf.draw(rng, n)
        raise ValueError(keys)
