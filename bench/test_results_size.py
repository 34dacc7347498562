"""The measured outputs git keeps stay small (issue 30): the text files tracked under
bench/results and bench/profile hold under 1,500 lines together, none over 600; raw
samples and dumps belong under target/."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOTAL, EACH = 1500, 600


def tracked_text() -> dict[str, int]:
    names = subprocess.run(["git", "ls-files", "bench/results", "bench/profile"], cwd=ROOT,
                           check=True, capture_output=True, text=True).stdout.split()
    lines = {}
    for name in names:
        data = (ROOT / name).read_bytes()
        if b"\0" not in data:  # the charts are the only binaries
            lines[name] = data.count(b"\n")
    return lines


def test_the_committed_results_stay_small() -> None:
    lines = tracked_text()
    assert lines, "no committed results found"
    big = {n: c for n, c in lines.items() if c > EACH}
    assert not big, f"over {EACH} lines: {big}"
    assert sum(lines.values()) < TOTAL, f"{sum(lines.values())} lines in all: {lines}"
