"""The committed form of a measured run: JSON without its raw samples, one line per
entry below a few levels, so that a file stays a few hundred lines and a diff shows what
moved. The raw samples go under target/bench/ (not committed), written by the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Raw samples and profile dumps: under target/, which git ignores.
RAW = Path(__file__).resolve().parent.parent / "target" / "bench"


def without(o: Any, key: str) -> Any:
    """`o` with every entry named `key` left out, at any depth."""
    if isinstance(o, dict):
        return {str(k): without(v, key) for k, v in o.items() if k != key}
    if isinstance(o, (list, tuple)):
        return [without(v, key) for v in o]
    return o


def compact_json(o: Any, depth: int) -> str:
    """JSON of `o`, an entry per line down to `depth` levels, each deeper value on its
    entry's line."""
    return _dump(o, depth, "") + "\n"


def _dump(o: Any, depth: int, indent: str) -> str:
    if depth == 0 or not isinstance(o, (dict, list, tuple)) or not o:
        return json.dumps(o)
    inner = indent + " "
    if isinstance(o, dict):
        items = [f"{inner}{json.dumps(str(k))}: {_dump(v, depth - 1, inner)}"
                 for k, v in o.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    items = [inner + _dump(v, depth - 1, inner) for v in o]
    return "[\n" + ",\n".join(items) + "\n" + indent + "]"


def write_raw(o: Any, name: str) -> Path:
    """The whole of `o`, samples and all, as target/bench/<name>."""
    RAW.mkdir(parents=True, exist_ok=True)
    path = RAW / name
    path.write_text(json.dumps(o, indent=1) + "\n")
    return path
