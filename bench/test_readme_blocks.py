"""Every README's generated figures are what the committed results give (make test)."""

from __future__ import annotations

import re
import subprocess

import readme_blocks
import report


def test_every_block_is_current() -> None:
    stale = readme_blocks.stale()
    assert not stale, (
        "README blocks differ from bench/results: run `python3 bench/readme_blocks.py` "
        "(and `python3 bench/bench.py --update-readme --from bench/results/latest.json`): "
        + "; ".join(stale))


def test_a_changed_figure_is_found() -> None:
    # The check can fail: a block with one figure changed by hand is reported.
    name = "accuracy-run"
    fresh = readme_blocks.BLOCKS[name]()
    begin = f"<!-- figures:{name} (bench/readme_blocks.py writes this block) -->"
    edited = fresh.replace("Whole run:", "Whole run: 1", 1)
    text = f"# x\n{begin}\n{edited}\n{readme_blocks.END}\n"
    _, changed = readme_blocks.rewrite(text, "test")
    assert changed == [name]
    assert readme_blocks.rewrite(f"# x\n{begin}\n{fresh}\n{readme_blocks.END}\n",
                                 "test")[1] == []


def test_every_block_is_used_somewhere() -> None:
    text = "\n".join(p.read_text() for p in readme_blocks.readmes())
    unused = [n for n in readme_blocks.BLOCKS if f"<!-- figures:{n} " not in text]
    assert not unused, f"blocks no README shows: {unused}"


def test_every_readme_in_git_is_checked() -> None:
    # The blocks are looked for in what readmes() finds: every README git tracks, none left out.
    out = subprocess.run(["git", "ls-files", "*README.md"], cwd=readme_blocks.ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    found = {str(p.relative_to(readme_blocks.ROOT)) for p in readme_blocks.readmes()}
    assert out and not set(out) - found, sorted(set(out) - found)


# A measured time or rate written by hand: a number with µs, us per, us/, req/s, x faster.
BY_HAND = re.compile(r"\d[\d,.]*\s?(µs|us/|us per|req/s\b|x faster|x slower)")


def figures_outside_blocks(text: str) -> list[str]:
    """The lines of `text` outside generated blocks that quote a server time or a rate."""
    found, inside = [], False
    for line in text.split("\n"):
        if readme_blocks.BEGIN.match(line) or line.startswith(report.README_BEGIN):
            inside = True
        elif line == readme_blocks.END or line.startswith(report.README_END):
            inside = False
        elif not inside and BY_HAND.search(line):
            found.append(line)
    return found


def test_no_readme_quotes_a_time_or_rate_outside_a_block() -> None:
    stray = {str(p.relative_to(readme_blocks.ROOT)): figures_outside_blocks(p.read_text())
             for p in readme_blocks.readmes()}
    stray = {k: v for k, v in stray.items() if v}
    assert not stray, f"figures outside a generated block (make them a block): {stray}"


def test_a_figure_by_hand_is_found() -> None:
    begin = "<!-- figures:accuracy-run (bench/readme_blocks.py writes this block) -->"
    text = f"# x\n{begin}\n1.52 µs\n{readme_blocks.END}\nours 3326 req/s, 4.4 x faster\n"
    assert figures_outside_blocks(text) == ["ours 3326 req/s, 4.4 x faster"]
