"""Hosts hfmem never connects to, whoever names them: link-local addresses and the clouds' instance-metadata services.

A Hub or a mirror may redirect a request anywhere (the real Hub sends downloads to its public CDN hosts only). In CI,
with cloud credentials a request away, a redirect to 169.254.169.254 would have hfmem ask the instance-metadata
service; so the host of every request, the first one and each redirect's, is checked before anything connects
(hub/http.py): a literal address, or every address a name resolves to (`2852039166` and `0xa9.0xfe.0xa9.0xfe` are
169.254.169.254 too), in 169.254.0.0/16 or fe80::/10, or one of METADATA_HOSTS / METADATA_ADDRESSES, is refused
with one line naming the host. Loopback (127.0.0.0/8, ::1) and private ranges (10.0.0.0/8, 172.16.0.0/12,
192.168.0.0/16, fc00::/7) stay allowed: mirrors and test servers live there. The check resolves a name once per
process, before the connection resolves it again: a DNS server that answers differently the second time (DNS
rebinding) is not covered.
"""

from __future__ import annotations

import socket
from functools import lru_cache
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

LINK_LOCAL = (ip_network("169.254.0.0/16"), ip_network("fe80::/10"))
"""Where the metadata services of AWS, Azure, GCP, Oracle, DigitalOcean and OpenStack answer (169.254.169.254)."""

METADATA_ADDRESSES = frozenset(ip_address(a) for a in (
    "169.254.169.254",  # AWS, Azure, GCP, Oracle, DigitalOcean, OpenStack
    "fd00:ec2::254",  # AWS's IPv6 endpoint (a unique-local address, so not link-local)
    "100.100.100.200",  # Alibaba Cloud (a carrier-grade NAT address)
    "192.0.0.192",  # Oracle Cloud's older endpoint
))
"""Metadata services outside the link-local ranges, by address."""

METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})
"""Metadata services by name (GCP's; they resolve to 169.254.169.254 only inside the cloud, so refused by name)."""


def refusal(host: str) -> str | None:
    """Why hfmem will not connect to `host` (a URL's host: a name or a literal address), or None when it may."""
    name = host.strip("[]").rstrip(".").lower()
    if name in METADATA_HOSTS:
        return f"{host} is a cloud instance-metadata host"
    try:
        literal = ip_address(name)
    except ValueError:
        for address in resolved(name):
            kind = _kind(address)
            if kind:
                return f"{host} resolves to {address}, {kind}"
        return None
    kind = _kind(literal)
    return f"{host} is {kind}" if kind else None


def _kind(address: IPv4Address | IPv6Address) -> str | None:
    """What a refused address is (link-local, or a metadata service's), or None for one hfmem may connect to."""
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    plain = ip_address(str(address).split("%", 1)[0])  # without an IPv6 zone (fe80::1%eth0)
    if plain in METADATA_ADDRESSES:
        return "a cloud instance-metadata address"
    if any(plain in network for network in LINK_LOCAL):
        return "a link-local address"
    return None


@lru_cache(maxsize=256)
def resolved(name: str) -> tuple[IPv4Address | IPv6Address, ...]:
    """Every address `name` resolves to (as the connection would look it up); none when it does not resolve."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):  # not found: the connection fails on its own, with its own error
        return ()
    return tuple(ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos)
