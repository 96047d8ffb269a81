"""Connection limits (Kafka's KIP-402 and KIP-612): how many connections the broker holds, per IP address and in
all, and how fast it accepts new ones. Pure: no sockets, no asyncio; time comes from an injected clock.

A new connection is refused when
- the broker already holds ``max.connections`` connections, or
- its IP address already holds its limit: the ``max.connections.per.ip.overrides`` entry for that address if
  there is one, else ``max.connections.per.ip`` (a limit of 0 refuses every connection from that address), or
- accepting it would take the rate of accepted connections above ``max.connection.creation.rate`` per second,
  measured as Kafka measures quotas: over ``quota.window.num`` sliding samples of ``quota.window.size.seconds``
  (``odradek.quota.rate.WindowedRate``; at least ``quota.window.num - 1`` samples' time, so a burst of up to
  ``rate * (quota.window.num - 1) * quota.window.size.seconds`` connections is accepted after a quiet period).

One deliberate difference from Kafka: Kafka's acceptor blocks while the broker is at ``max.connections`` or over
its creation rate, and accepts the connection later; here the caller closes a refused connection at once (with
the reason ``admit`` returns, for its log line), so a flood of connections costs the broker nothing but accepts
and closes.

Overrides name an IP address or a host name (``host:count,host2:count``, split at the last colon as Kafka does,
so ``::1:5`` is IPv6 loopback with 5). A host name is resolved to its addresses once, at construction; a name
that does not resolve is logged and ignored. An address written literally wins over one a host name resolves
to. Addresses are compared in canonical form (``::ffff:10.0.0.1`` is ``10.0.0.1``, as Java's ``InetAddress``).

The ``connection_creation_rate`` client quota of an ip entity (or of the default ip entity), set with
AlterClientQuotas, limits the rate of one address the same way (KIP-612's per-IP quota; the broker passes the
quotas in with ``set_ip_quotas``).

With a single listener, every limit applies to every connection (Kafka exempts the inter-broker listener from
the broker-wide limits only when there are several listeners).

Invariants:
- ``admit`` returns ``None`` exactly when it counted the connection (in its IP's count, in the total and in the
  creation rate); a refused connection changes nothing, and never counts toward the rate (Kafka likewise
  un-records a throttled connection).
- ``release`` is called once for each admitted connection, when it closes, and only for those; counts are never
  negative (releasing an address with no admitted connection raises ``ValueError``).
- The total is the sum of the per-IP counts; addresses with no connection are not kept.
- Not thread-safe: one event loop owns it.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable, Mapping
from typing import Any

from odradek.clock import Clock
from odradek.quota.rate import WindowedRate

log = logging.getLogger(__name__)

MAX_CONNECTIONS = "max.connections"
MAX_PER_IP = "max.connections.per.ip"
PER_IP_OVERRIDES = "max.connections.per.ip.overrides"
MAX_CREATION_RATE = "max.connection.creation.rate"
WINDOW_NUM = "quota.window.num"
WINDOW_SIZE_SECONDS = "quota.window.size.seconds"

Resolver = Callable[[str], list[str]]


def parse_per_ip_overrides(text: str) -> dict[str, int]:
    """``host:count,host2:count`` (Kafka's ``max.connections.per.ip.overrides``) as ``{host: count}``.

    Whitespace around entries, hosts and counts is ignored; an empty text is no override. Raises ``ValueError``
    naming the key for an entry without a colon, an empty host, a count that is not a non-negative integer, or a
    host given twice."""
    out: dict[str, int] = {}
    if not text.strip():
        return out
    for raw in text.split(","):
        entry = raw.strip()
        host, colon, count_text = entry.rpartition(":")
        host, count_text = host.strip(), count_text.strip()
        if not colon or not host:
            raise ValueError(f"{PER_IP_OVERRIDES}: {entry!r} is not host:count (in {text!r})")
        try:
            count = int(count_text)
        except ValueError:
            raise ValueError(
                f"{PER_IP_OVERRIDES}: the count of {host!r} is {count_text!r}, not an integer (in {text!r})"
            ) from None
        if count < 0:
            raise ValueError(f"{PER_IP_OVERRIDES}: the count of {host!r} is {count}, below 0 (in {text!r})")
        if host in out:
            raise ValueError(f"{PER_IP_OVERRIDES}: {host!r} is given twice (in {text!r})")
        out[host] = count
    return out


def canonical_ip(address: str) -> str | None:
    """The canonical text of an IP address (IPv4-mapped IPv6 as IPv4, zone dropped), or None for a host name."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def resolve_host(host: str) -> list[str]:
    """Every address ``host`` resolves to (``socket.getaddrinfo``); raises ``OSError`` if it does not resolve."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class ConnectionLimits:
    """The connection counts of one broker and its limits; ``admit`` on accept, ``release`` on close."""

    def __init__(self, *, max_connections: int, max_per_ip: int, per_ip_overrides: Mapping[str, int],
                 max_creation_rate: int, clock: Clock, windows: int = 11, window_ms: int = 1000,
                 resolve: Resolver = resolve_host) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.max_creation_rate = max_creation_rate
        self._windows = windows
        self._window_ms = window_ms
        self._overrides = _resolve_overrides(per_ip_overrides, resolve)
        self._clock = clock
        self._rate = WindowedRate(clock, windows=windows, window_ms=window_ms)
        self._counts: dict[str, int] = {}
        self._total = 0
        self._ip_quotas: dict[str | None, float] = {}  # connection_creation_rate by address (None: the default)
        self._ip_rates: dict[str, WindowedRate] = {}  # accepted connections per address with an ip quota

    def set_ip_quotas(self, quotas: Mapping[str | None, float]) -> None:
        """The ``connection_creation_rate`` client quotas of ip entities (KIP-612), by address; None is the
        default ip entity. Applied to new connections from now on."""
        self._ip_quotas = {(None if ip is None else _key(ip)): rate for ip, rate in quotas.items()}

    @classmethod
    def from_config(cls, values: Mapping[str, Any], clock: Clock, *,
                    resolve: Resolver = resolve_host) -> ConnectionLimits:
        """The limits a broker's config values set. Raises ``ValueError`` naming the key for a malformed
        ``max.connections.per.ip.overrides``, or for ``max.connections.per.ip=0`` without overrides (as Kafka)."""
        overrides = parse_per_ip_overrides(values[PER_IP_OVERRIDES] or "")
        max_per_ip = int(values[MAX_PER_IP])
        if max_per_ip == 0 and not overrides:
            raise ValueError(f"{MAX_PER_IP} can be set to zero only if {PER_IP_OVERRIDES} is set "
                             "(else the broker would refuse every connection)")
        return cls(
            max_connections=int(values[MAX_CONNECTIONS]),
            max_per_ip=max_per_ip,
            per_ip_overrides=overrides,
            max_creation_rate=int(values[MAX_CREATION_RATE]),
            clock=clock,
            windows=int(values[WINDOW_NUM]),
            window_ms=int(values[WINDOW_SIZE_SECONDS]) * 1000,
            resolve=resolve,
        )

    @property
    def total(self) -> int:
        """Admitted connections not yet released."""
        return self._total

    def count(self, ip: str) -> int:
        """Admitted connections from ``ip`` not yet released."""
        return self._counts.get(_key(ip), 0)

    def limit_for(self, ip: str) -> int:
        """The most connections ``ip`` may hold: its override, else ``max.connections.per.ip``."""
        return self._overrides.get(_key(ip), self.max_per_ip)

    @property
    def overrides(self) -> Mapping[str, int]:
        """The per-IP limits by canonical address, host names resolved."""
        return dict(self._overrides)

    def creation_rate(self) -> float:
        """Accepted connections per second over the live samples."""
        return self._rate.rate()

    def admit(self, ip: str) -> str | None:
        """Count a new connection from ``ip`` and return None, or return why it is refused (a sentence naming
        the limit's key and value, for the log line) and count nothing."""
        key = _key(ip)
        if self._total >= self.max_connections:
            return f"the broker already holds {MAX_CONNECTIONS}={self.max_connections} connections"
        held = self._counts.get(key, 0)
        override = self._overrides.get(key)
        if override is not None and held >= override:
            return f"{ip} already holds {held} connections, its limit ({PER_IP_OVERRIDES} gives it {override})"
        if override is None and held >= self.max_per_ip:
            return f"{ip} already holds {held} connections, its limit ({MAX_PER_IP}={self.max_per_ip})"
        total, elapsed_ms = self._rate.measure()
        if (total + 1) * 1000 > self.max_creation_rate * elapsed_ms:
            return (f"accepting it would exceed {MAX_CREATION_RATE}={self.max_creation_rate} new connections per "
                    f"second (measured over {WINDOW_NUM}={self._windows} samples of "
                    f"{WINDOW_SIZE_SECONDS}={self._window_ms // 1000})")
        ip_quota = self._ip_quotas.get(key, self._ip_quotas.get(None)) if self._ip_quotas else None
        if ip_quota is not None:
            ip_rate = self._ip_rates.get(key)
            if ip_rate is None:
                if len(self._ip_rates) >= 10_000:  # bounded: a flood of addresses only resets their rates
                    self._ip_rates.clear()
                ip_rate = self._ip_rates[key] = WindowedRate(self._clock, windows=self._windows,
                                                             window_ms=self._window_ms)
            total, elapsed_ms = ip_rate.measure()
            if (total + 1) * 1000 > ip_quota * elapsed_ms:
                return (f"accepting it would exceed {ip}'s connection_creation_rate quota of {ip_quota:g} new "
                        "connections per second")
            ip_rate.record(1)
        self._rate.record(1)
        self._counts[key] = held + 1
        self._total += 1
        return None

    def release(self, ip: str) -> None:
        """An admitted connection from ``ip`` closed."""
        key = _key(ip)
        held = self._counts.get(key, 0)
        if held <= 0:
            raise ValueError(f"released a connection from {ip} that holds none: release only admitted ones, once")
        if held == 1:
            del self._counts[key]
        else:
            self._counts[key] = held - 1
        self._total -= 1


def _key(ip: str) -> str:
    return canonical_ip(ip) or ip


def _resolve_overrides(overrides: Mapping[str, int], resolve: Resolver) -> dict[str, int]:
    """Overrides by canonical address: literal addresses first, then the addresses of host names (a literal
    address, or an earlier host name, keeps its limit)."""
    out: dict[str, int] = {}
    names: list[tuple[str, int]] = []
    for host, count in overrides.items():
        ip = canonical_ip(host)
        if ip is None:
            names.append((host, count))
        else:
            out[ip] = count
    for host, count in names:
        try:
            addresses = resolve(host)
        except OSError as e:
            log.warning("%s: ignoring %s:%d, the host name does not resolve: %s", PER_IP_OVERRIDES, host, count, e)
            continue
        for address in addresses:
            ip = canonical_ip(address)
            if ip is not None:
                out.setdefault(ip, count)
    return out
