"""`uvicorn app:app` in a child process, as the README runs it, on a free loopback port."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from servers import free_port

HERE = Path(__file__).resolve().parent


class Gateway:
    """`uvicorn app:app` as the README runs it, on a free loopback port."""

    def __init__(self, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app:app", "--app-dir", str(HERE),
             "--host", "127.0.0.1", "--port", str(self.port), "--no-proxy-headers",
             "--log-level", "warning"],
            env={**os.environ, **env}, stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"uvicorn did not start: {self.output()}")
            time.sleep(0.05)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
