"""Where kperf may fetch a tree from: the schemes and hosts an operator allows, public addresses only.

A tree URL comes from whoever submits, and fetching it makes the server
open a connection wherever the URL points. Unchecked, a submission could
make kperf probe its own network (the database, a cloud metadata service,
an internal git server) and learn from the error what is listening there.
So a fetch goes only to the schemes of KPERF_TREE_SCHEMES, and only to a
host the operator listed in KPERF_TREE_HOSTS or, with its `*` entry, to a
host whose every address is public. The check runs on the addresses the
name resolves to, and git is then pinned to exactly those addresses
(kperf.core.builds.gitops), so a DNS answer that changes between the check and
the connection (DNS rebinding) cannot send it elsewhere.

Standard library only (the settings use the parsers): no Django import
except in policy_from_settings.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Callable, Union

from django.conf import settings

from kperf.conf import ConfigError

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
Resolver = Callable[[str, int], list[IPAddress]]

# Every scheme kperf can fetch over, in the order messages list them.
SCHEMES = ("https", "http", "git", "ssh")
DEFAULT_SCHEMES = ["https"]
DEFAULT_PORTS = {"https": 443, "http": 80, "git": 9418, "ssh": 22}
# The KPERF_TREE_HOSTS entry that admits any host whose addresses are all public.
ANY_PUBLIC_HOST = "*"
DEFAULT_HOSTS = [ANY_PUBLIC_HOST]


class Unreachable(Exception):
    """The host may not be fetched from, for a reason only the server log may tell (what it resolves to)."""


def _nets(*pairs: tuple[str, str]) -> list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]]:
    return [(ipaddress.ip_network(net), why) for net, why in pairs]


# Written out rather than taken from ipaddress.is_private/is_global, whose
# lists changed between Python releases (3.11.10, 3.12.4): what kperf refuses
# should not depend on the patch level of the interpreter.
_V4_INTERNAL = _nets(
    ("0.0.0.0/8", "unspecified"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared address space, carrier-grade NAT"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "reserved for IETF protocol assignments"),
    ("192.0.2.0/24", "reserved for documentation"),
    ("192.88.99.0/24", "reserved for 6to4 relays"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "reserved for benchmarking"),
    ("198.51.100.0/24", "reserved for documentation"),
    ("203.0.113.0/24", "reserved for documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
)
_V6_INTERNAL = _nets(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "reserved, discard-only"),
    ("2001::/23", "reserved for IETF protocol assignments"),
    ("2001:db8::/32", "reserved for documentation"),
    ("3fff::/20", "reserved for documentation"),
    ("fc00::/7", "unique local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
)
_V6_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def address_problem(ip: IPAddress) -> str:
    """Why kperf will not connect to `ip` unless an operator listed its host; "" for a public address.

    IPv6 forms that carry an IPv4 address (mapped, NAT64, 6to4) are judged by
    that address: ::ffff:127.0.0.1 reaches the loopback as surely as 127.0.0.1.
    """
    if isinstance(ip, ipaddress.IPv4Address):
        for net, why in _V4_INTERNAL:
            if ip in net:
                return why
        return ""
    embedded = ip.ipv4_mapped
    if embedded is None:
        embedded = ip.sixtofour
    if embedded is None and ip in _NAT64:
        embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if embedded is not None:
        inner = address_problem(embedded)
        return f"{inner}, as an IPv4 address inside IPv6" if inner else ""
    for net6, why in _V6_INTERNAL:
        if ip in net6:
            return why
    # Everything outside 2000::/3 is unassigned or special (IPv4-compatible ::/96 among them).
    return "" if ip in _V6_GLOBAL_UNICAST else "reserved"


def ip_literal(host: str) -> IPAddress | None:
    """The address a URL's host names directly (brackets allowed), or None for a host name."""
    try:
        return ipaddress.ip_address(host[1:-1] if host.startswith("[") and host.endswith("]") else host)
    except ValueError:
        return None


def canonical_host(host: str) -> str:
    """A host as rules compare it: lower case, no trailing dot, an address in its shortest form."""
    ip = ip_literal(host)
    return str(ip) if ip is not None else host.lower().rstrip(".")


@dataclass(frozen=True)
class HostRule:
    """One KPERF_TREE_HOSTS entry: a host name, `*.domain`, or an address; on one port or any."""

    host: str
    port: int | None = None

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        host = canonical_host(host)
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host


def parse_schemes(name: str, values: Iterable[str]) -> list[str]:
    schemes = [v.strip().lower().removesuffix("://") for v in values if v.strip()]
    for scheme in schemes:
        if scheme not in SCHEMES:
            raise ConfigError(
                f"{name} names {scheme!r}, which kperf cannot fetch trees over: choose from {', '.join(SCHEMES)}"
            )
    return schemes


def _parse_rule(name: str, entry: str) -> HostRule:
    hint = f"{name}: {entry!r} is not a host, host:port, [IPv6]:port or *.domain"
    port: int | None = None
    host = entry
    if "://" in entry or "/" in entry:
        raise ConfigError(f"{name}: {entry!r} is a URL; list the host alone (git.example.org or git.example.org:8443)")
    if entry.startswith("["):
        close = entry.find("]")
        if close < 0:
            raise ConfigError(hint)
        host, rest = entry[: close + 1], entry[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ConfigError(hint)
            port_text = rest[1:]
        else:
            port_text = ""
        if ip_literal(host) is None:
            raise ConfigError(hint)
    elif entry.count(":") == 1:
        host, port_text = entry.split(":")
    elif ip_literal(entry) is not None:
        port_text = ""  # a bare IPv6 address: no port
    elif ":" in entry:
        raise ConfigError(hint + " (write an IPv6 address with a port as [address]:port)")
    else:
        port_text = ""
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(f"{name}: the port of {entry!r} is not a number from 1 to 65535")
        port = int(port_text)
    bare = host.removeprefix("*.")
    if ip_literal(host) is None and (
        not bare or not all(c.isascii() and (c.isalnum() or c in ".-") for c in bare) or bare.startswith((".", "-"))
    ):
        raise ConfigError(hint)
    return HostRule(canonical_host(host) if not host.startswith("*.") else host.lower().rstrip("."), port)


def parse_hosts(name: str, values: Iterable[str]) -> tuple[tuple[HostRule, ...], bool]:
    """The listed hosts of KPERF_TREE_HOSTS, and whether `*` (any public host) is among the entries."""
    entries = [v.strip() for v in values if v.strip()]
    rules = tuple(_parse_rule(name, e) for e in entries if e != ANY_PUBLIC_HOST)
    return rules, ANY_PUBLIC_HOST in entries


def system_resolve(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to here, in the order the system prefers them."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise Unreachable(f"{host} does not resolve: {e}") from None
    found: list[IPAddress] = []
    for *_, sockaddr in infos:
        # A link-local IPv6 answer carries its interface ("fe80::1%eth0").
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if ip not in found:
            found.append(ip)
    return found


@dataclass(frozen=True)
class TreePolicy:
    """What the operator allows (KPERF_TREE_SCHEMES, KPERF_TREE_HOSTS, KPERF_ALLOW_LOCAL_TREES)."""

    schemes: tuple[str, ...] = tuple(DEFAULT_SCHEMES)
    rules: tuple[HostRule, ...] = ()
    any_public_host: bool = True
    allow_local: bool = False
    # How names become addresses; tests replace it to play a DNS server that changes its answer.
    resolve: Resolver = field(default=system_resolve, compare=False)

    @classmethod
    def build(
        cls,
        schemes: Iterable[str] = DEFAULT_SCHEMES,
        hosts: Iterable[str] = DEFAULT_HOSTS,
        allow_local: bool = False,
        resolve: Resolver = system_resolve,
    ) -> TreePolicy:
        rules, any_public = parse_hosts("KPERF_TREE_HOSTS", hosts)
        ordered = tuple(s for s in SCHEMES if s in parse_schemes("KPERF_TREE_SCHEMES", schemes))
        return cls(ordered, rules, any_public, allow_local, resolve)

    def listed(self, host: str, port: int) -> bool:
        return any(rule.matches(host, port) for rule in self.rules)

    def host_refusal(self, host: str, port: int) -> str:
        """Why `host` may not be fetched from, judged without DNS; "" when it may be tried."""
        if self.listed(host, port):
            return ""
        if not self.any_public_host:
            return (
                f"the host {host} is not one this service fetches trees from: ask an operator to add it to "
                "KPERF_TREE_HOSTS"
            )
        ip = ip_literal(host)
        problem = address_problem(ip) if ip is not None else ""
        if problem:
            return (
                f"the host {host} is an internal address ({problem}), and kperf fetches only from public ones: "
                "give the tree's public URL (an operator can allow an internal git server in KPERF_TREE_HOSTS)"
            )
        return ""

    def addresses(self, host: str, port: int) -> list[IPAddress]:
        """The addresses git may connect to for `host`: all checked; Unreachable says why not (for the log)."""
        ip = ip_literal(host)
        found = [ip] if ip is not None else self.resolve(host.rstrip("."), port)
        if not found:
            raise Unreachable(f"{host} resolves to no address")
        if self.listed(host, port):
            return found
        if not self.any_public_host:
            raise Unreachable(f"{host}:{port} is not in KPERF_TREE_HOSTS")
        bad = [f"{a} ({address_problem(a)})" for a in found if address_problem(a)]
        if bad:
            raise Unreachable(
                f"{host} resolves to internal addresses, and is not in KPERF_TREE_HOSTS: {', '.join(bad)}"
            )
        return found


def policy_from_settings() -> TreePolicy:
    return TreePolicy.build(settings.KPERF_TREE_SCHEMES, settings.KPERF_TREE_HOSTS, settings.KPERF_ALLOW_LOCAL_TREES)
