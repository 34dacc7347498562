"""Where the repository and the built module are (this package is installed editable)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
MODULE = REPO / "target" / "release" / "libredis_slidingwindow.so"


def require_module() -> Path:
    if not MODULE.exists():
        raise RuntimeError(f"{MODULE} is missing: run `cargo build --release` first")
    return MODULE
