from __future__ import annotations

import ipaddress
from typing import Iterable, List, Optional, Sequence, Union

_Net = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
_Addr = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]


def _is_port(p: str) -> bool:
    """A decimal port, 0 to 65535, as Guard's forward-auth reads one."""
    return p.isascii() and p.isdigit() and int(p) <= 65535


def parse_hop(s: str) -> Optional[_Addr]:
    """An address as proxies write it (bare, with a port, bracketed); IPv4-mapped IPv6 as IPv4; None when none."""
    s = s.strip()
    if not s or s.lower() == "unknown":
        return None
    host = s
    if s.startswith("["):
        end = s.find("]")
        rest = s[end + 1:] if end >= 0 else "x"
        if end < 0 or (rest and not (rest[0] == ":" and _is_port(rest[1:]))):
            return None
        host = s[1:end]
    elif s.count(":") == 1:
        host, port = s.split(":")
        if not _is_port(port):
            return None
    host = host.split("%")[0]
    try:
        a = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        return a.ipv4_mapped
    return a


class IPExtractor:
    """Finds the client address of a request that may have come through reverse proxies.

    X-Forwarded-For and X-Real-IP are believed only when the peer is a
    trusted proxy; then the client is the rightmost X-Forwarded-For entry
    that is not a trusted proxy (entries with a port count as their address;
    "unknown", empty and malformed entries are skipped), else X-Real-IP
    (its last value when repeated), else the peer. With no proxies it
    answers the peer. Guard's forward-auth and the Go SDK follow the same
    rule.
    """

    def __init__(self, trusted_proxies: Iterable[str] = ()) -> None:
        self._trusted: List[_Net] = []
        for p in trusted_proxies:
            try:
                net = ipaddress.ip_network(p.strip(), strict=False)
            except ValueError:
                raise ValueError(f"guard: trusted proxy {p!r} is not an IP address or CIDR prefix") from None
            if isinstance(net, ipaddress.IPv6Network) and net.network_address.ipv4_mapped is not None and net.prefixlen >= 96:
                net = ipaddress.ip_network(f"{net.network_address.ipv4_mapped}/{net.prefixlen - 96}")
            self._trusted.append(net)

    def _is_trusted(self, a: _Addr) -> bool:
        return any(a.version == n.version and a in n for n in self._trusted)

    def client_ip(self, peer: str, forwarded_for: Sequence[str] = (), real_ip: str = "") -> str:
        """The client address in canonical text, or "" when even the peer is unknown.

        ``peer`` is the TCP peer (with or without a port); ``forwarded_for``
        every X-Forwarded-For header value, in order.
        """
        p = parse_hop(peer)
        if p is None:
            return ""
        if not self._is_trusted(p):
            return str(p)
        leftmost: Optional[_Addr] = None
        hops = ",".join(forwarded_for).split(",") if forwarded_for else []
        for hop in reversed(hops):
            a = parse_hop(hop)
            if a is None:
                continue
            if not self._is_trusted(a):
                return str(a)
            leftmost = a
        if leftmost is not None:
            return str(leftmost)
        r = parse_hop(real_ip)
        return str(r if r is not None else p)
