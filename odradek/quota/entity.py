"""Client quota entities and their configs, as AlterClientQuotas / DescribeClientQuotas name them (KIP-546).

An entity is a combination of components ``(type, name)``: ``(user)``, ``(client-id)``, ``(user, client-id)`` or
``(ip)``; a name of None is the type's default entity (Kafka's ``<default>``). ``Entity`` is the canonical tuple
of components in that type order, so two spellings of one entity are equal and hash alike.

Keys and their types are Kafka's (``QuotaConfigs``): the byte rates are whole numbers (LONG), the request
percentage and the mutation rate are DOUBLEs, and an IP's connection creation rate is an INT.

Invariants:
- ``entity`` accepts exactly the combinations above, each type at most once; anything else raises
  ``QuotaConfigError`` (INVALID_REQUEST) saying what is accepted.
- ``check_value`` accepts only a key valid for the entity, with a positive value of the key's type, and returns
  the value's canonical string (what the stores keep; ``float`` reads it back).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping

from odradek.protocol.errors import ErrorCode, KafkaError

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
DEFAULT_NAME = "<default>"  # how ZooKeeper paths and people name a default entity

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

CLIENT_KEYS: Mapping[str, type] = {
    PRODUCER_BYTE_RATE: int, CONSUMER_BYTE_RATE: int, REQUEST_PERCENTAGE: float, CONTROLLER_MUTATION_RATE: float,
}
IP_KEYS: Mapping[str, type] = {CONNECTION_CREATION_RATE: int}

Component = tuple[str, "str | None"]
Entity = tuple[Component, ...]
_ORDER = {t: i for i, t in enumerate(ENTITY_TYPES)}
_VALID_SHAPES = frozenset({(USER,), (CLIENT_ID,), (USER, CLIENT_ID), (IP,)})


class QuotaConfigError(KafkaError):
    code = ErrorCode.INVALID_REQUEST


def entity(components: Iterable[tuple[str, str | None]]) -> Entity:
    """The canonical entity of ``components``; ``QuotaConfigError`` for an invalid combination."""
    comps = list(components)
    types = [t for t, _ in comps]
    unknown = [t for t in types if t not in _ORDER]
    if unknown:
        raise QuotaConfigError(f"unknown quota entity type {unknown[0]!r}: use {', '.join(ENTITY_TYPES)}")
    repeated = [t for i, t in enumerate(types) if t in types[:i]]
    if repeated:
        raise QuotaConfigError(f"quota entity type {repeated[0]!r} is named twice in one entity")
    out = tuple(sorted(((t, n) for t, n in comps), key=lambda c: _ORDER[c[0]]))
    if tuple(t for t, _ in out) not in _VALID_SHAPES:
        raise QuotaConfigError("a quota entity is a user, a client-id, a user with a client-id, or an ip; got "
                               + (", ".join(types) or "no component"))
    for t, n in out:
        if n is not None and n == "" and t != CLIENT_ID:
            raise QuotaConfigError(f"an empty {t} name is not allowed (a null name is the default {t})")
        if t == IP and n is not None:
            try:
                ipaddress.ip_address(n)
            except ValueError:
                raise QuotaConfigError(f"{n!r} is not an IP address (an ip quota entity is named by its address)"
                                       ) from None
    return out


def keys_for(e: Entity) -> Mapping[str, type]:
    return IP_KEYS if e[0][0] == IP else CLIENT_KEYS


def check_value(e: Entity, key: str, value: float) -> str:
    """The stored form of ``key=value`` for entity ``e``; ``QuotaConfigError`` if either is not valid."""
    keys = keys_for(e)
    kind = keys.get(key)
    if kind is None:
        raise QuotaConfigError(f"{key!r} is not a quota config of {describe(e)}: use {', '.join(keys)}")
    if not isinstance(value, int | float) or math.isnan(value) or math.isinf(value) or value <= 0:
        raise QuotaConfigError(f"{key} must be a positive number, got {value!r}")
    if kind is int:
        if abs(value - round(value)) > 1e-6:
            raise QuotaConfigError(f"{key} must be a whole number, got {value!r}")
        return str(round(value))
    return repr(float(value))


def describe(e: Entity) -> str:
    """``user 'alice', client-id 'app'`` / ``the default client-id``."""
    return ", ".join(f"the default {t}" if n is None else f"{t} {n!r}" for t, n in e)
