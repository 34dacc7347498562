"""Identity: normalised addresses, X-Forwarded-For read from the right, namespaces.
(Through the middlewares and HTTP: test_middleware.py.)"""

from __future__ import annotations

from ipaddress import ip_address

import pytest
from slidingwindow import client_identity, client_ip, parse_ip

PROXY = "10.0.0.5"
TRUSTED = ["10.0.0.0/8", "fd00::/8"]


@pytest.mark.parametrize("text, expected", [
    ("192.0.2.1", "192.0.2.1"),
    (" 192.0.2.1 ", "192.0.2.1"),
    ("192.0.2.1:5678", "192.0.2.1"),
    ("::ffff:192.0.2.1", "192.0.2.1"),  # IPv4-mapped: what a dual-stack socket reports
    ("[::ffff:c000:201]:443", "192.0.2.1"),
    ("2001:DB8:0:0::1", "2001:db8::1"),
    ("[2001:db8::1]", "2001:db8::1"),
    ('"[2001:db8::1]:8080"', "2001:db8::1"),
    ("fe80::1%eth0", "fe80::1"),
    ("unknown", None),
    ("", None),
    ("[2001:db8::1", None),
    ("1.2.3", None),
])
def test_parse_ip(text: str, expected: str | None) -> None:
    got = parse_ip(text)
    assert (str(got) if got else None) == expected


def test_untrusted_peer_ignores_the_header() -> None:
    assert client_ip("1.1.1.1", "203.0.113.7", TRUSTED) == ip_address("203.0.113.7")
    assert client_ip("1.1.1.1", "203.0.113.7") == ip_address("203.0.113.7")  # none trusted


def test_read_from_the_right_skipping_trusted_hops() -> None:
    # client-supplied junk, the real client, then two of our proxies
    header = "6.6.6.6, 198.51.100.9, 10.1.1.1, 10.2.2.2"
    assert client_ip(header, PROXY, TRUSTED) == ip_address("198.51.100.9")
    # the same hops split over several header lines, in order
    assert client_ip(["6.6.6.6, 198.51.100.9", "10.1.1.1", "10.2.2.2"], PROXY,
                     TRUSTED) == ip_address("198.51.100.9")
    # IPv6 trusted proxies and a mapped client address
    assert client_ip("::ffff:198.51.100.9, fd00::2", "fd00::1", TRUSTED) == ip_address(
        "198.51.100.9")


def test_odd_chains() -> None:
    # Garbage right of the trusted hops: stop at the last hop we can vouch for.
    assert client_ip("198.51.100.9, garbage", PROXY, TRUSTED) == ip_address(PROXY)
    # Every hop trusted: the request came from inside; the left-most one.
    assert client_ip("10.9.9.9, 10.1.1.1", PROXY, TRUSTED) == ip_address("10.9.9.9")
    # No header behind a trusted proxy: the proxy itself.
    assert client_ip(None, PROXY, TRUSTED) == ip_address(PROXY)
    assert client_ip("1.1.1.1", None, TRUSTED) is None  # no peer (e.g. a unix socket)


def test_namespaces_never_collide() -> None:
    assert client_identity(api_key="k1", peer="203.0.113.7") == "key:k1"
    assert client_identity(user_id=42, peer="203.0.113.7") == "user:42"
    assert client_identity(peer="203.0.113.7") == "ip:203.0.113.7"
    assert client_identity(peer="::ffff:203.0.113.7") == "ip:203.0.113.7"
    # An API key that looks like an address still lives in another namespace.
    assert client_identity(api_key="203.0.113.7") != client_identity(peer="203.0.113.7")
    assert client_identity(api_key="", user_id="", peer=None) == "ip:unknown"


def test_ipv6_counted_by_prefix() -> None:
    a = client_identity(peer="2001:db8:1:2:aaaa::1")
    b = client_identity(peer="2001:db8:1:2:bbbb::9")
    assert a == b == "ip:2001:db8:1:2::/64"
    assert client_identity(peer="2001:db8:1:2:aaaa::1", ipv6_prefix=128) == "ip:2001:db8:1:2:aaaa::1"
