"""Who is asking: the identity a request is counted against.

An authenticated caller is counted by API key or user id; anyone else by IP address.
The address comes from X-Forwarded-For only as far as trusted proxies vouch for it:
the header is read from the RIGHT (the hops our own proxies appended), skipping
addresses inside the trusted networks, and the first address outside them is the
client. Anything further left was written by the client and is ignored, so a client
cannot pick its own identity by sending the header itself.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network
from typing import Iterable, Optional, Union

Address = Union[IPv4Address, IPv6Address]
Network = Union[IPv4Network, IPv6Network]
NetworkLike = Union[str, Network]


def parse_ip(text: str) -> Optional[Address]:
    """The address in `text`, normalised, or None if it is none.

    Accepts what shows up in headers and sockets: spaces, quotes, `[v6]`, `[v6]:port`,
    `v4:port`, zone ids (`fe80::1%eth0`). IPv4-mapped IPv6 (`::ffff:192.0.2.1`, what a
    dual-stack socket reports) becomes the IPv4 address, so both forms count as one.
    """
    s = text.strip().strip('"')
    if s.startswith("["):
        end = s.find("]")
        if end < 0:
            return None
        s = s[1:end]
    elif s.count(":") == 1:
        s = s.partition(":")[0]  # IPv4 with a port; IPv6 has at least two colons
    s = s.partition("%")[0]
    try:
        addr = ip_address(s)
    except ValueError:
        return None
    if isinstance(addr, IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


class TrustedProxies:
    """The networks of the proxies in front of the app (load balancer, ingress...)."""

    def __init__(self, networks: Iterable[NetworkLike] = ()) -> None:
        self.networks: tuple[Network, ...] = tuple(
            ip_network(n, strict=False) if isinstance(n, str) else n for n in networks
        )

    def __contains__(self, addr: object) -> bool:
        if not isinstance(addr, (IPv4Address, IPv6Address)):
            return False
        return any(addr.version == net.version and addr in net for net in self.networks)

    def __repr__(self) -> str:
        return f"TrustedProxies({[str(n) for n in self.networks]!r})"


def _proxies(trusted: Union[TrustedProxies, Iterable[NetworkLike]]) -> TrustedProxies:
    return trusted if isinstance(trusted, TrustedProxies) else TrustedProxies(trusted)


def _hops(forwarded_for: Union[str, Iterable[str], None]) -> list[str]:
    """The X-Forwarded-For hops, left to right, over all header lines in order."""
    if forwarded_for is None:
        return []
    lines = [forwarded_for] if isinstance(forwarded_for, str) else list(forwarded_for)
    return [hop.strip() for line in lines for hop in line.split(",") if hop.strip()]


def client_ip(
    forwarded_for: Union[str, Iterable[str], None],
    peer: Optional[str],
    trusted_proxies: Union[TrustedProxies, Iterable[NetworkLike]] = (),
) -> Optional[Address]:
    """The client's address: the socket peer, unless the peer is a trusted proxy; then
    the right-most X-Forwarded-For hop outside the trusted networks.

    A hop that is no address stops the walk at the last hop vouched for (a trusted proxy:
    its clients share one limit rather than escape it). When every hop is trusted, the
    left-most one is the client (the request came from inside).
    """
    trusted = _proxies(trusted_proxies)
    last = parse_ip(peer) if peer else None
    if last is None or last not in trusted:
        return last
    for hop in reversed(_hops(forwarded_for)):
        addr = parse_ip(hop)
        if addr is None:
            return last
        if addr not in trusted:
            return addr
        last = addr
    return last


def ip_key(addr: Address, ipv6_prefix: int = 64) -> str:
    """The address as counted: IPv4 as is; IPv6 as its /64 by default, since one host
    usually holds a whole /64 and could otherwise rotate through 2^64 identities."""
    if isinstance(addr, IPv6Address) and ipv6_prefix < 128:
        return str(ip_network(f"{addr}/{ipv6_prefix}", strict=False))
    return str(addr)


def client_identity(
    *,
    api_key: Optional[str] = None,
    user_id: Union[str, int, None] = None,
    forwarded_for: Union[str, Iterable[str], None] = None,
    peer: Optional[str] = None,
    trusted_proxies: Union[TrustedProxies, Iterable[NetworkLike]] = (),
    ipv6_prefix: int = 64,
) -> str:
    """`key:<api_key>`, else `user:<user_id>`, else `ip:<address>` (`ip:unknown` without a
    usable peer). The namespaces keep an API key from ever colliding with an address.

    Pass `api_key` / `user_id` only once they are verified: an unchecked API key header
    would let a client mint a fresh identity per request.
    """
    if api_key:
        return f"key:{api_key}"
    if user_id is not None and user_id != "":
        return f"user:{user_id}"
    addr = client_ip(forwarded_for, peer, trusted_proxies)
    return f"ip:{ip_key(addr, ipv6_prefix)}" if addr is not None else "ip:unknown"
