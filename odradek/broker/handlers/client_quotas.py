"""DescribeClientQuotas (v0-1) and AlterClientQuotas (v0-1): the client quotas of users, client-ids, (user,
client-id) pairs and IP addresses, with their defaults (KIP-546).

Describe filters entities by components (Kafka's ``ClientQuotaFilter``): each names an entity type and matches
an exact name (0), the type's default (1) or any name of it, default included (2); ``strict`` keeps only
entities with no other component. Alter applies each entry's ops (set a key, or ``remove`` it) on top of the
entity's stored configs; the entity's result set replaces them, cluster-wide (ZooKeeper's ``/config/users``,
``/config/clients``, ``/config/ips`` in a cluster, the metadata file on a single node), and every broker
applies it at once (``Broker.alter_client_quota``). One entry's validation and change is ``alter_entity``,
which the web console's quota forms call as well.

Authorization, as Kafka's: Describe needs DESCRIBE_CONFIGS on the cluster (else the response's
CLUSTER_AUTHORIZATION_FAILED), Alter ALTER_CONFIGS on it (else every entry's).

Invariants:
- Every client mistake (unknown entity type or key, a key named twice, a value that is not a positive number of
  the key's type, an invalid combination of components) is an error code and message: INVALID_REQUEST for the
  whole Describe, per entry for Alter; an entry in error changes nothing, the others still apply.
- ``validate_only`` changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from odradek.broker.authorization import cluster_error
from odradek.broker.context import RequestContext
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.quota import entity as qe
from odradek.security.acl import AclOperation

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

EXACT, DEFAULT, ANY = 0, 1, 2


async def handle_describe_client_quotas(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if denied := cluster_error(ctx, AclOperation.DESCRIBE_CONFIGS):
        return {"throttle_time": 0, "error_code": denied, "error_message": None, "entries": None}
    try:
        wanted = _filter(request.components)
    except qe.QuotaConfigError as e:
        return {"throttle_time": 0, "error_code": e.code, "error_message": e.message, "entries": None}
    entries = []
    for e, configs in sorted(ctx.broker.client_quota_configs().items(), key=lambda i: repr(i[0])):
        if not _matches(e, wanted, request.strict):
            continue
        entries.append({
            "entity": [{"entity_type": t, "entity_name": n} for t, n in e],
            "values": [{"key": k, "value": float(v)} for k, v in sorted(configs.items())],
        })
    return {"throttle_time": 0, "error_code": ErrorCode.NONE, "error_message": None, "entries": entries}


def _filter(components: Any) -> dict[str, tuple[int, str | None]]:
    wanted: dict[str, tuple[int, str | None]] = {}
    for c in components:
        if c.entity_type not in qe.ENTITY_TYPES:
            raise qe.QuotaConfigError(f"unknown quota entity type {c.entity_type!r}: use "
                                      f"{', '.join(qe.ENTITY_TYPES)}")
        if c.entity_type in wanted:
            raise qe.QuotaConfigError(f"quota entity type {c.entity_type!r} is filtered twice")
        if c.match_type not in (EXACT, DEFAULT, ANY):
            raise qe.QuotaConfigError(f"unknown match type {c.match_type} (0 exact, 1 default, 2 any)")
        if c.match_type == EXACT and c.match is None:
            raise qe.QuotaConfigError(f"an exact match of {c.entity_type} needs a name")
        wanted[c.entity_type] = (c.match_type, c.match)
    if qe.IP in wanted and len(wanted) > 1:
        raise qe.QuotaConfigError("ip quota entities have no other component: filter ips alone")
    return wanted


def _matches(e: qe.Entity, wanted: dict[str, tuple[int, str | None]], strict: bool) -> bool:
    names = dict(e)
    if strict and set(names) != set(wanted):
        return False
    for entity_type, (match_type, match) in wanted.items():
        if entity_type not in names:
            return False
        name = names[entity_type]
        if (match_type == EXACT and name != match) or (match_type == DEFAULT and name is not None):
            return False
    return True


class QuotaOp(NamedTuple):
    """One AlterClientQuotas op: set ``key`` to ``value``, or ``remove`` it (the request's OpData has these)."""

    key: str
    value: float
    remove: bool = False


async def alter_entity(b: Broker, stored: dict[qe.Entity, dict[str, str]],
                       components: Iterable[tuple[str, str | None]], ops: Iterable[Any],
                       validate_only: bool = False) -> tuple[qe.Entity, dict[str, str]]:
    """Apply one AlterClientQuotas entry (``ops``: objects with ``key``, ``value``, ``remove``) on top of the
    entity's ``stored`` configs (updated when applied): the entity and its resulting configs. Every mistake is a
    ``KafkaError`` and changes nothing. The web console's quota forms call this too."""
    e = qe.entity(components)
    configs = dict(stored.get(e, {}))
    seen: set[str] = set()
    for op in ops:
        if op.key in seen:
            raise qe.QuotaConfigError(f"{op.key} is altered twice for {qe.describe(e)}")
        seen.add(op.key)
        if op.remove:
            if op.key not in qe.keys_for(e):
                raise qe.QuotaConfigError(f"{op.key!r} is not a quota config of {qe.describe(e)}: use "
                                          f"{', '.join(qe.keys_for(e))}")
            configs.pop(op.key, None)
        else:
            configs[op.key] = qe.check_value(e, op.key, op.value)
    if not validate_only:
        await b.alter_client_quota(e, configs)
        stored[e] = configs
    return e, configs


async def handle_alter_client_quotas(ctx: RequestContext, request: Any) -> dict[str, Any]:
    b = ctx.broker
    stored = b.client_quota_configs()
    denied = cluster_error(ctx, AclOperation.ALTER_CONFIGS)
    results = []
    for entry in request.entries:
        echo = [{"entity_type": c.entity_type, "entity_name": c.entity_name} for c in entry.entity]
        if denied:
            results.append({"error_code": denied, "error_message": None, "entity": echo})
            continue
        try:
            await alter_entity(b, stored, ((c.entity_type, c.entity_name) for c in entry.entity), entry.ops,
                               request.validate_only)
            results.append({"error_code": ErrorCode.NONE, "error_message": None, "entity": echo})
        except KafkaError as err:
            results.append({"error_code": err.code, "error_message": err.message, "entity": echo})
    return {"throttle_time": 0, "entries": results}
