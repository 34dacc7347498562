"""The benchmarks' one raw RESP client: pre-encoded commands, replies counted, not parsed.

Used by bench/*.py (imported as `resp`) and bench/accuracy (as `bench.resp`).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

Arg = bytes | str | int
T = TypeVar("T")


def array_header(n: int) -> bytes:
    return b"*%d\r\n" % n


def bulk_header(size: int) -> bytes:
    return b"$%d\r\n" % size


def resp(*args: Arg) -> bytes:
    """One command in RESP."""
    out = [array_header(len(args))]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(bulk_header(len(b)) + b + b"\r\n")
    return b"".join(out)


def show_cmd(args: Iterable[Arg]) -> str:
    return " ".join(x.decode() if isinstance(x, bytes) else str(x) for x in args)


def batches_of(cmds: list[bytes], size: int) -> Iterator[bytes]:
    for k in range(0, len(cmds), size):
        yield b"".join(cmds[k:k + size])


def count_cmds(batch: bytes) -> int:
    """Commands in a batch: each starts with "*<argc>\\r\\n" at the start or right after
    a CRLF, and no benchmark argument contains "\\r\\n*"."""
    return batch.count(b"\r\n*") + 1


def classify(data: bytes, allowed_pat: bytes | None,
             denied_pat: bytes | None) -> tuple[int | None, int | None, int]:
    """(allowed, denied, errors) counted in concatenated replies."""
    errors = data.count(b"\n-") + (1 if data[:1] == b"-" else 0)
    if allowed_pat is None or denied_pat is None:
        return None, None, errors
    return data.count(allowed_pat), data.count(denied_pat), errors


class Conn:
    """A raw RESP connection: send pre-encoded commands, count reply lines.

    Each case knows how many CRLF-terminated lines one reply has (`*2 :1 :5` is 3), which
    is enough to know when a batch is complete; the received bytes can be kept, and
    classified with bytes.count afterwards.
    """

    def __init__(self, port: int, db: int = 0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(120)
        self.prev_cr = False
        self.surplus = 0
        if db:
            self.call(resp("SELECT", db), 1)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read_lines(self, need: int, sink: list[bytes] | None) -> None:
        # With batches in flight (pump), one recv may hold the start of the next batch's
        # replies: the lines beyond `need` are carried over to the next read.
        got = self.surplus
        recv = self.sock.recv
        while got < need:
            d = recv(1 << 20)
            if not d:
                raise ConnectionError("server closed the connection")
            got += d.count(b"\r\n")
            if self.prev_cr and d[:1] == b"\n":
                got += 1
            self.prev_cr = d[-1:] == b"\r"
            if sink is not None:
                sink.append(d)
        self.surplus = got - need

    def call(self, payload: bytes, lines: int, sink: list[bytes] | None = None) -> None:
        self.sock.sendall(payload)
        self.read_lines(lines, sink)

    def _in_flight(self, batches: Iterable[tuple[bytes, int]],
                   read: Callable[[int], T]) -> Iterator[T]:
        # Each batch's replies are read only after the next batch is sent, so the server
        # never waits on the client.
        pending = None
        for payload, lines in batches:
            self.sock.sendall(payload)
            if pending is not None:
                yield read(pending)
            pending = lines
        if pending is not None:
            yield read(pending)

    def pump(self, batches: Iterable[tuple[bytes, int]], sink: list[bytes] | None = None) -> None:
        """Send (payload, reply_lines) batches, one in flight ahead of the one being read
        (bulk loading); the replies go to `sink`."""
        for _ in self._in_flight(batches, lambda need: self.read_lines(need, sink)):
            pass

    def replies(self, batches: Iterable[tuple[bytes, int]]) -> Iterator[list[bytes]]:
        """As `pump`, yielding each batch's reply lines (without their CRLFs); an error
        reply raises, as a run that gets one is wrong."""
        rest = b""

        def take(need: int) -> list[bytes]:
            nonlocal rest
            sink = [rest]
            self.read_lines(need, sink)
            data = b"".join(sink)
            if data[:1] == b"-" or b"\r\n-" in data:
                at = 0 if data[:1] == b"-" else data.index(b"\r\n-") + 2
                raise RuntimeError(f"server error: {data[at:at + 200].decode(errors='replace')}")
            *lines, rest = data.split(b"\r\n", need)
            return lines

        return self._in_flight(batches, take)

    def load(self, cmds: list[bytes], lines_each: int, step: int = 500) -> bytes:
        """Bulk-send commands of one reply shape; the concatenated replies."""
        sink: list[bytes] = []
        self.pump(((b"".join(cmds[k:k + step]), lines_each * len(cmds[k:k + step]))
                   for k in range(0, len(cmds), step)), sink)
        return b"".join(sink)

    def probe(self, payload: bytes, wait: float = 0.3) -> bytes:
        """The raw reply to one command whose reply shape is unknown."""
        self.sock.sendall(payload)
        self.sock.settimeout(wait)
        buf = b""
        try:
            while True:
                d = self.sock.recv(65536)
                if not d:
                    break
                buf += d
        except socket.timeout:
            pass
        self.sock.settimeout(120)
        return buf
