"""The example gateways as their READMEs run them: `uvicorn app:app` (ASGI, this folder)
and `flask run` (WSGI, examples/wsgi-gateway), each on a free loopback port."""

from __future__ import annotations

import sys
from pathlib import Path

from slidingwindow_testing.app_process import AppProcess

HERE = Path(__file__).resolve().parent
WSGI_APP = HERE.parent / "wsgi-gateway" / "app.py"

COMMANDS = {
    "asgi": [sys.executable, "-m", "uvicorn", "app:app", "--app-dir", str(HERE),
             "--host", "127.0.0.1", "--port", "{port}", "--no-proxy-headers",
             "--log-level", "warning"],
    "wsgi": [sys.executable, "-m", "flask", "--app", str(WSGI_APP), "run",
             "--host", "127.0.0.1", "--port", "{port}", "--no-reload", "--no-debugger"],
}


class Gateway(AppProcess):
    def __init__(self, flavor: str = "asgi", **env: str) -> None:
        super().__init__(COMMANDS[flavor], **env)
