"""Where the repository under test and its built module are."""

from __future__ import annotations

import os
from pathlib import Path

MARK = Path("testing") / "python" / "pyproject.toml"


def _repo() -> Path:
    """$SLIDINGWINDOW_REPO, else the checkout holding the working directory, else the one
    holding this file. Not this file's alone: one Python environment shared by several
    checkouts has this package installed (editable) from whichever installed it last."""
    if os.environ.get("SLIDINGWINDOW_REPO"):
        return Path(os.environ["SLIDINGWINDOW_REPO"]).resolve()
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / MARK).is_file():
            return candidate
    return Path(__file__).resolve().parents[4]


REPO = _repo()
MODULE = REPO / "target" / "release" / "libredis_slidingwindow.so"


def require_module() -> Path:
    if not MODULE.exists():
        raise RuntimeError(f"{MODULE} is missing: run `cargo build --release` first")
    return MODULE
