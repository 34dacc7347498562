"""Every README's generated figures are what the committed results give (make test)."""

from __future__ import annotations

import readme_blocks


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
