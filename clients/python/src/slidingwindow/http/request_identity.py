"""Who a request counts against: an API key the app accepts, a user, or the client address."""

from __future__ import annotations

from typing import Awaitable, Callable, Iterable, Optional, Union

from .request import Request, read
from .identity import NetworkLike, TrustedProxies, client_identity

IdentityFn = Callable[[Request], Union[str, Awaitable[str]]]
ApiKeyFn = Callable[[Request], Optional[str]]


def header_api_key(header: str, is_valid: Callable[[str], bool]) -> ApiKeyFn:
    """An API-key reader for ScopeIdentity: the header's value if `is_valid` says so.

    Only a key the app accepts becomes an identity; an unknown key is counted by address,
    so a client cannot dodge its limit by inventing keys.
    """
    name = header.lower().encode("latin-1")

    def api_key(request: Request) -> Optional[str]:
        values = read(request).header_values(name)
        return values[0] if len(values) == 1 and is_valid(values[0]) else None

    return api_key


class ScopeIdentity:
    """The default identity, for ASGI scopes and WSGI environs alike: `key:<api key>` when
    `api_key` returns one, `user:<id>` for an authenticated user (unless `users=False`),
    else `ip:<client address>` (see identity.client_ip for how X-Forwarded-For and
    `trusted_proxies` are used)."""

    def __init__(
        self,
        trusted_proxies: Iterable[NetworkLike] = (),
        *,
        api_key: Optional[ApiKeyFn] = None,
        ipv6_prefix: int = 64,
        users: bool = True,
    ) -> None:
        self.trusted = TrustedProxies(trusted_proxies)
        self.api_key = api_key
        self.ipv6_prefix = ipv6_prefix
        self.users = users

    def __call__(self, request: Request) -> str:
        reader = read(request)
        return client_identity(
            api_key=self.api_key(request) if self.api_key else None,
            user_id=reader.user() if self.users else None,
            forwarded_for=reader.header_values(b"x-forwarded-for"),
            peer=reader.peer(),
            trusted_proxies=self.trusted,
            ipv6_prefix=self.ipv6_prefix,
        )


def by_ip(trusted_proxies: Iterable[NetworkLike] = (), ipv6_prefix: int = 64) -> ScopeIdentity:
    """An identity by client address only, ignoring API keys and users (for a login route)."""
    return ScopeIdentity(trusted_proxies, ipv6_prefix=ipv6_prefix, users=False)
