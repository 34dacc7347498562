"""An example app in a child process on a free loopback port, as its README runs it."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

import httpx

from .ports import free_port


class AppProcess:
    """`command` (with `{port}` in it) run with `env` added; ready when /health answers."""

    def __init__(self, command: list[str], **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [part.replace("{port}", str(self.port)) for part in command],
            env={**os.environ, **env}, stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{command[:4]} did not start: {self.output()}")
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
