"""Where the seed's Lua script is, if anywhere: it is not part of the repository.

`$SLIDINGWINDOW_SEED_LUA` when set (and then only there: pointing it at a path that does
not exist means "no script"), else ../shared/seed/sliding_window.lua beside the
repository. What uses it (the seed-parity tests, the benchmark's seed rows) is skipped
without it, except under CI=true, where its absence is a failure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from .paths import REPO

ENV = "SLIDINGWINDOW_SEED_LUA"
BESIDE = REPO.parent / "shared" / "seed" / "sliding_window.lua"


def seed_path() -> Optional[Path]:
    """The seed's script, or None."""
    given = os.environ.get(ENV)
    path = Path(given) if given else BESIDE
    return path if path.is_file() else None


def missing_reason() -> str:
    given = os.environ.get(ENV)
    where = f"{ENV}={given} does not exist" if given else f"{ENV} is unset and {BESIDE} does not exist"
    return f"the seed's Lua script is not available ({where})"


def in_ci() -> bool:
    """CI=true (as GitHub Actions and .ci/run set it): a missing seed script fails."""
    return os.environ.get("CI", "").lower() == "true"
