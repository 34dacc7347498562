"""The few things the middlewares read from a request, from an ASGI scope or a WSGI environ.

`read(request)` tells the two apart once; everything after asks the reader it returns, so
both middlewares count the same identities and send the same headers.
"""

from __future__ import annotations

from typing import Any, MutableMapping, Optional, Protocol

# An ASGI scope or a WSGI environ.
Request = MutableMapping[str, Any]


class RequestReader(Protocol):
    def header_values(self, name: bytes) -> list[str]:
        """Every value of header `name` (lower case), in order."""

    def method_and_path(self) -> tuple[str, str]: ...

    def peer(self) -> Optional[str]: ...

    def user(self) -> Optional[str]:
        """The authenticated user, if any."""


class ScopeReader:
    """An ASGI scope."""

    def __init__(self, scope: Request) -> None:
        self.scope = scope

    def header_values(self, name: bytes) -> list[str]:
        return [v.decode("latin-1") for k, v in self.scope.get("headers", ()) if k.lower() == name]

    def method_and_path(self) -> tuple[str, str]:
        return str(self.scope.get("method", "GET")), str(self.scope["path"])

    def peer(self) -> Optional[str]:
        client = self.scope.get("client")
        return str(client[0]) if client else None

    def user(self) -> Optional[str]:
        """Starlette's AuthenticationMiddleware puts the user in the scope."""
        scope_user = self.scope.get("user")
        if scope_user is None or not getattr(scope_user, "is_authenticated", False):
            return None
        for attribute in ("identity", "display_name"):
            try:
                value = getattr(scope_user, attribute)
            except NotImplementedError:  # starlette's BaseUser.identity
                continue
            if value:
                return str(value)
        return None


class EnvironReader:
    """A WSGI environ."""

    def __init__(self, environ: Request) -> None:
        self.environ = environ

    def header_values(self, name: bytes) -> list[str]:
        # A WSGI server joins repeated lines into one value with commas (PEP 3333).
        value = self.environ.get("HTTP_" + name.decode("latin-1").upper().replace("-", "_"))
        return [value] if value is not None else []

    def method_and_path(self) -> tuple[str, str]:
        """PATH_INFO: the path inside the app, as routes see it."""
        return (str(self.environ.get("REQUEST_METHOD", "GET")),
                str(self.environ.get("PATH_INFO", "") or "/"))

    def peer(self) -> Optional[str]:
        addr = self.environ.get("REMOTE_ADDR")
        return str(addr) if addr else None

    def user(self) -> Optional[str]:
        """REMOTE_USER, set by the server or an auth middleware."""
        user = self.environ.get("REMOTE_USER")
        return str(user) if user else None


def read(request: Request) -> RequestReader:
    return EnvironReader(request) if "wsgi.version" in request else ScopeReader(request)
