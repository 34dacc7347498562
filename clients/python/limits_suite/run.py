"""Run limits' own strategy tests against the slidingwindow storage (`make test-limits`).

Downloads limits' source distribution once (PyPI, `pip download --no-binary :all:`) into
target/limits-<version>/, then runs its tests/test_strategy.py and
tests/aio/test_strategy.py through limits_plugin.py, which points them at our storage
URIs on servers it starts: by default the four with the module; `--sw-servers` also takes
the servers without it (`redis7-managed`, ..., `redis62`), where the storage runs the
Functions library, and `--sw-clusters cluster-redis7-managed` such a cluster (make
test-limits runs both kinds). Extra arguments go to pytest, for example
`--sw-servers redis7,redis62 -k sliding`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import limits

VERSION = "5.8.0"  # pinned in requirements-test.txt; the tests must match the library
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SDIST_DIR = REPO / "target" / f"limits-{VERSION}"
TEST_FILES = ["tests/test_strategy.py", "tests/aio/test_strategy.py"]


def fetch_sdist() -> Path:
    """limits' source tree, downloaded and unpacked once (cached under target/)."""
    if (SDIST_DIR / "tests" / "utils.py").exists():
        return SDIST_DIR
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:",
             "--no-deps", "-d", tmp, f"limits=={VERSION}"],
            check=True,
        )
        (archive,) = Path(tmp).glob(f"limits-{VERSION}.tar.gz")
        with tarfile.open(archive) as tar:
            tar.extractall(SDIST_DIR.parent, filter="data")
    return SDIST_DIR


def main(argv: list[str]) -> int:
    if limits.__version__ != VERSION:
        sys.exit(f"limits {limits.__version__} is installed; these tests are {VERSION}'s: "
                 f"pip install -r requirements-test.txt")
    root = fetch_sdist()
    env = dict(os.environ)
    # The plugin is loaded by name (`-p limits_plugin`) from this folder; the client and
    # slidingwindow_testing are installed (make deps-python).
    paths = [str(HERE), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    command = [
        sys.executable, "-m", "pytest", "-c", str(HERE / "pytest.ini"), "--rootdir", str(root),
        "--noconftest", "-p", "limits_plugin", "--no-success-flaky-report", *TEST_FILES, *argv,
    ]
    return subprocess.run(command, cwd=root, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
