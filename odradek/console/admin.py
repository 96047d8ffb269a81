"""Transactions, producers, client quotas and ACLs as the console lists them, and the changes it makes to them.

- Transactions: the transaction coordinator's ids (``broker.txns.view()``: ListTransactions and
  DescribeTransactions' data), and the producers with an open transaction in the partitions this broker leads
  (``Log.active_producers``: DescribeProducers' data). In a cluster (``cluster_transactions``), the same over every
  broker: ListTransactions and DescribeTransactions to every live broker, DescribeProducers to each partition's
  leader (``peers.py``); what this broker coordinates or leads is read in memory.
- Hanging transactions: Kafka's rule, the CLI's code (``cli/transactions.open_candidates`` and ``hanging``): an
  open transaction in a partition whose producer last wrote longer ago than ``transaction.max.timeout.ms``, and
  that the coordinator does not know as including that partition.
- Aborting a hanging transaction writes an ABORT marker for the producer whose open transaction starts at the
  given offset, with its epoch and coordinator epoch (0 if the partition has seen none), as
  ``kafka-transactions.sh abort --start-offset`` does, through ``Broker.append_txn_marker`` (WriteTxnMarkers' path);
  in a cluster it counts once every in-sync replica has it, and a partition led by another broker is aborted as
  the tool does it: DescribeProducers then WriteTxnMarkers to its leader.
- Quotas: ``Broker.client_quota_configs``; ACLs: the authorizer's bindings (None when no authorizer is set).
- Changing a quota is one AlterClientQuotas entry through the handler's own ``alter_entity`` (same validation and
  messages, cluster-wide through ``Broker.alter_client_quota``); an entity is named as kafka-configs names it, a
  user and/or a client-id (or an ip), ``<default>`` for the default entity of a type.
- Adding and removing an ACL go through the broker's ``AclStore.create``/``delete``, CreateAcls' and DeleteAcls'
  path (Kafka's validation of a binding; in a cluster ZooKeeper's znodes and change notifications); a removal
  names one binding exactly. Without an authorizer both are refused, as Kafka answers SECURITY_DISABLED.

Invariants: on a single node in-memory state only; the producer scan visits each local partition once per view of
the transactions page (no disk reads). In a cluster the other brokers are asked, each request bounded in time; a
broker that does not answer is a notice, and while a transaction coordinator does not answer no transaction is
called hanging (one it still drives could not be told from one nobody will end).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from odradek.broker.handlers.acls import NO_AUTHORIZER
from odradek.broker.handlers.client_quotas import QuotaOp, alter_entity
from odradek.cli.transactions import OpenTransaction, hanging, open_candidates
from odradek.console.errors import ConsoleError
from odradek.console.peers import Peers
from odradek.protocol.errors import ErrorCode
from odradek.quota import entity as qe
from odradek.quota.entity import describe as describe_entity
from odradek.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

if TYPE_CHECKING:
    from odradek.broker.broker import Broker


@dataclass(frozen=True, slots=True)
class TxnRow:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_ms: int
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class OpenProducer:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    last_timestamp: int


class _TP(NamedTuple):
    topic: str
    partition: int


class _State(NamedTuple):  # the fields of kafka-python's ProducerState that open_candidates reads
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    current_transaction_start_offset: int
    last_timestamp: int


class _Described(NamedTuple):
    topic_partitions: list[_TP]


def transactions(b: Broker) -> list[TxnRow]:
    coord = b.txns.view()
    listed = coord.list_transactions(now=b.clock.milliseconds())
    if listed.error != ErrorCode.NONE:
        return []
    ids = [t.transactional_id for t in listed.transactions]
    rows = []
    for d in coord.describe(ids):
        if d.error != ErrorCode.NONE:
            continue
        rows.append(
            TxnRow(
                d.transactional_id,
                d.producer_id,
                d.producer_epoch,
                d.state,
                d.timeout_ms,
                d.start_ms,
                tuple((t, p) for t, ps in d.topics for p in ps),
            )
        )
    return rows


def open_producers(b: Broker) -> list[OpenProducer]:
    """Producers with an open transaction in a partition this broker leads."""
    out = []
    for part in b.replicas.partitions():
        if not part.is_leader:
            continue
        for p in part.log.active_producers():
            if p.current_txn_start_offset >= 0:
                out.append(
                    OpenProducer(
                        part.topic,
                        part.index,
                        p.producer_id,
                        p.producer_epoch,
                        p.current_txn_start_offset,
                        p.last_timestamp,
                    )
                )
    return sorted(out, key=lambda o: (o.topic, o.partition, o.producer_id))


def hanging_transactions(b: Broker, max_timeout_ms: int | None = None) -> list[OpenTransaction]:
    """Open transactions no coordinator will end (Kafka's find-hanging rule), in partitions led here."""
    timeout = b.config.values["transaction.max.timeout.ms"] if max_timeout_ms is None else max_timeout_ms
    states: dict[Any, list[Any]] = {}
    for part in b.replicas.partitions():
        if part.is_leader:
            producers = [
                _State(
                    p.producer_id, p.producer_epoch, p.coordinator_epoch, p.current_txn_start_offset, p.last_timestamp
                )
                for p in part.log.active_producers()
            ]
            if producers:
                states[_TP(part.topic, part.index)] = producers
    candidates = open_candidates(states, now_ms=b.clock.milliseconds(), max_timeout_ms=int(timeout))
    if not candidates:
        return []
    pids = {c.producer_id for c in candidates}
    coord = b.txns.view()
    listed = coord.list_transactions(producer_id_filter=sorted(pids), now=b.clock.milliseconds())
    tids = {t.producer_id: t.transactional_id for t in listed.transactions}
    descriptions: dict[str, Any] = {}
    for d in coord.describe(sorted(set(tids.values()))):
        descriptions[d.transactional_id] = (
            None if d.error != ErrorCode.NONE else _Described([_TP(t, p) for t, ps in d.topics for p in ps])
        )
    return hanging(candidates, tids, descriptions)


MARKER_TIMEOUT_MS = 30_000


async def abort_transaction(b: Broker, topic: str, partition: int, start_offset: int) -> OpenProducer:
    """End the open transaction that starts at ``start_offset`` in the partition with an ABORT marker; the producer
    it belonged to. ``ConsoleError`` when no open transaction starts there; the partition's ``KafkaError`` if it
    refuses the marker."""
    part = b.replicas.leader_partition(topic, partition)
    found = [p for p in part.log.active_producers() if p.current_txn_start_offset == start_offset]
    if not found:
        raise ConsoleError(f"no open transaction starts at offset {start_offset} in {topic}-{partition}")
    p = found[0]
    done = b.append_txn_marker(topic, partition, p.producer_id, p.producer_epoch, False, max(p.coordinator_epoch, 0))
    if done.replicated:
        [code] = await b.replicas.wait_replicated([(done, done.log.next_offset)], MARKER_TIMEOUT_MS)
        if code != ErrorCode.NONE:
            raise ConsoleError(f"the ABORT marker in {topic}-{partition} was not replicated: {ErrorCode(code).name}")
    return OpenProducer(topic, partition, p.producer_id, p.producer_epoch, start_offset, p.last_timestamp)


@dataclass(frozen=True, slots=True)
class QuotaRow:
    entity: str
    configs: tuple[tuple[str, str], ...]
    names: tuple[tuple[str, str], ...] = ()  # (form field, name) per component: what names the entity in a form


QUOTA_FIELDS = {qe.USER: "user", qe.CLIENT_ID: "client_id", qe.IP: "ip"}  # entity type -> form field
QUOTA_KEYS = (*qe.CLIENT_KEYS, *qe.IP_KEYS)


def quotas(b: Broker) -> list[QuotaRow]:
    rows = [
        QuotaRow(
            describe_entity(e),
            tuple(sorted(c.items())),
            tuple((QUOTA_FIELDS[t], qe.DEFAULT_NAME if n is None else n) for t, n in e),
        )
        for e, c in b.client_quota_configs().items()
    ]
    return sorted(rows, key=lambda r: r.entity)


def quota_components(form: dict[str, str]) -> list[tuple[str, str | None]]:
    """The entity a form names: each of its ``user``, ``client_id`` and ``ip`` fields that is filled in, ``<default>``
    for the type's default entity; ``ConsoleError`` when none is."""
    components = []
    for entity_type, field in QUOTA_FIELDS.items():
        name = form.get(field, "").strip()
        if name:
            components.append((entity_type, None if name == qe.DEFAULT_NAME else name))
    if not components:
        raise ConsoleError(f"name the entity: a user and/or a client-id (or an ip); {qe.DEFAULT_NAME} for the "
                           "default entity")
    return components


async def set_quota(b: Broker, form: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Set ``key`` to ``value`` for the entity the form names (AlterClientQuotas' validation): the entity's
    description and its configs now."""
    components = quota_components(form)
    key = form.get("key", "").strip()
    text = form.get("value", "").strip()
    try:
        value = float(text)
    except ValueError:
        raise ConsoleError(f"{key or 'the quota'} must be a number, got {text!r}") from None
    e, configs = await alter_entity(b, b.client_quota_configs(), components, [QuotaOp(key, value)])
    return describe_entity(e), configs


async def remove_quota(b: Broker, form: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Remove ``key`` from the entity the form names (refused when it is not set there, as kafka-configs refuses)."""
    components = quota_components(form)
    key = form.get("key", "").strip()
    stored = b.client_quota_configs()
    e = qe.entity(components)
    if key in qe.keys_for(e) and key not in stored.get(e, {}):
        raise ConsoleError(f"{key} is not set for {describe_entity(e)}")
    e, configs = await alter_entity(b, stored, components, [QuotaOp(key, 0.0, remove=True)])
    return describe_entity(e), configs


@dataclass(frozen=True, slots=True)
class AclRow:
    resource_type: str
    name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str


def acls(b: Broker) -> list[AclRow] | None:
    """Every ACL binding, or None when the broker has no authorizer."""
    if b.authorizer is None:
        return None
    rows = [
        AclRow(
            x.pattern.resource_type.name,
            x.pattern.name,
            x.pattern.pattern_type.name,
            x.entry.principal,
            x.entry.host,
            x.entry.operation.name,
            x.entry.permission.name,
        )
        for x in b.authorizer.acls()
    ]
    return sorted(rows, key=lambda r: (r.resource_type, r.name, r.principal, r.operation))


ACL_RESOURCE_TYPES = tuple(t.name for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY))
ACL_OPERATIONS = tuple(o.name for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY))
ACL_PERMISSIONS = (AclPermissionType.ALLOW.name, AclPermissionType.DENY.name)
ACL_PATTERN_TYPES = (PatternType.LITERAL.name, PatternType.PREFIXED.name)


def _parse(kind: Any, form: dict[str, str], field: str, what: str, names: tuple[str, ...]) -> Any:
    """The member of ``kind`` a form field names, one of ``names`` (never ANY or MATCH: a removal names one
    binding)."""
    text = form.get(field, "")
    try:
        member = kind.parse(text)
    except ValueError:
        member = None
    if member is None or member.name not in names:
        raise ConsoleError(f"unknown {what} {text!r}: use {', '.join(names)}")
    return member


def acl_binding(form: dict[str, str]) -> AclBinding:
    """The binding a form names (host ``*`` when left empty); what Kafka refuses in it is the store's to say."""
    return AclBinding(
        ResourcePattern(
            _parse(ResourceType, form, "resource_type", "resource type", ACL_RESOURCE_TYPES),
            form.get("name", "").strip(),
            _parse(PatternType, form, "pattern_type", "pattern type", ACL_PATTERN_TYPES),
        ),
        AccessControlEntry(
            form.get("principal", "").strip(),
            form.get("host", "").strip() or "*",
            _parse(AclOperation, form, "operation", "operation", ACL_OPERATIONS),
            _parse(AclPermissionType, form, "permission", "permission", ACL_PERMISSIONS),
        ),
    )


def _store(b: Broker) -> Any:
    if b.acl_store is None:
        raise ConsoleError(f"{NO_AUTHORIZER} (authorizer.class.name): there are no ACLs to change")
    return b.acl_store


async def add_acl(b: Broker, form: dict[str, str]) -> AclBinding:
    """Create the binding the form names (CreateAcls' path); ``ConsoleError`` with Kafka's message if refused."""
    store = _store(b)
    binding = acl_binding(form)
    [error] = await store.create([binding])
    if error is not None:
        raise ConsoleError(error.message)
    return binding


async def remove_acl(b: Broker, form: dict[str, str]) -> AclBinding:
    """Delete exactly the binding the form names (DeleteAcls' path, with a filter that matches only it)."""
    store = _store(b)
    binding = acl_binding(form)
    p, e = binding.pattern, binding.entry
    selector = AclBindingFilter(p.resource_type, p.name, p.pattern_type, e.principal, e.host, e.operation, e.permission)
    [deleted] = await store.delete([selector])
    if not deleted:
        raise ConsoleError(f"no such ACL: {p} {e}")
    for _, error in deleted:
        if error is not None:
            raise ConsoleError(error.message)
    return binding


# -- transactions in a cluster ----------------------------------------------------------------------


@dataclass(slots=True)
class ClusterTransactions:
    """The transactions page's lists over the whole cluster, and a notice per broker that did not answer."""

    transactions: list[TxnRow]
    producers: list[OpenProducer]
    hanging: list[OpenTransaction]
    notices: list[str]


def _local_states(b: Broker) -> dict[_TP, list[_State]]:
    states: dict[_TP, list[_State]] = {}
    for part in b.replicas.partitions():
        if part.is_leader:
            producers = [
                _State(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.current_txn_start_offset,
                       p.last_timestamp)
                for p in part.log.active_producers()
            ]
            if producers:
                states[_TP(part.topic, part.index)] = producers
    return states


def _led_elsewhere(b: Broker) -> dict[int, list[tuple[str, int]]]:
    """The partitions each other live broker leads, from the cluster image."""
    cluster = b.cluster
    out: dict[int, list[tuple[str, int]]] = {}
    if cluster is None:
        return out
    for tp, state in cluster.states.items():
        if state.leader != b.node_id and state.leader in cluster.brokers:
            out.setdefault(state.leader, []).append(tp)
    return out


async def cluster_transactions(b: Broker, peers: Peers) -> ClusterTransactions:
    """Every transactional id of the cluster (ListTransactions and DescribeTransactions to every live broker; this
    one's coordinator read in memory), the open transactions of every partition (DescribeProducers to each
    leader; this broker's led partitions read in memory) and the hanging ones among them (Kafka's rule, as
    ``hanging_transactions``). While a coordinator does not answer, no transaction is called hanging: one it still
    drives could not be told from one nobody will end."""
    others = [x for x in peers.live() if x != peers.node_id]
    (listed, notices), (described, producer_notices) = await asyncio.gather(
        peers.each({x: peers.transactions(x) for x in others}),
        peers.each({x: peers.producers(x, tps) for x, tps in _led_elsewhere(b).items()}),
    )
    rows = transactions(b)
    for found in listed.values():
        rows += [TxnRow(**t) for t in found]
    rows.sort(key=lambda r: r.transactional_id)
    states: dict[Any, list[Any]] = dict(_local_states(b))
    for found_states in described.values():
        for (t, p), producers in found_states.items():
            if producers:
                states[_TP(t, p)] = [
                    _State(int(s.producer_id), int(s.producer_epoch), int(s.coordinator_epoch),
                           int(s.current_txn_start_offset), int(s.last_timestamp))
                    for s in producers
                ]
    open_ones = sorted(
        (
            OpenProducer(tp.topic, tp.partition, s.producer_id, s.producer_epoch, s.current_transaction_start_offset,
                         s.last_timestamp)
            for tp, producers in states.items()
            for s in producers
            if s.current_transaction_start_offset >= 0
        ),
        key=lambda o: (o.topic, o.partition, o.producer_id),
    )
    found_hanging: list[OpenTransaction] = []
    if notices:
        notices.append("hanging transactions are not shown while a transaction coordinator does not answer")
    else:
        timeout = int(b.config.values["transaction.max.timeout.ms"])
        candidates = open_candidates(states, now_ms=b.clock.milliseconds(), max_timeout_ms=timeout)
        tids = {r.producer_id: r.transactional_id for r in rows}
        descriptions = {r.transactional_id: _Described([_TP(t, p) for t, p in r.partitions]) for r in rows}
        found_hanging = hanging(candidates, tids, descriptions)
    return ClusterTransactions(rows, open_ones, found_hanging, notices + producer_notices)


async def abort_transaction_cluster(b: Broker, peers: Peers, topic: str, partition: int,
                                    start_offset: int) -> OpenProducer:
    """``abort_transaction`` for a partition led anywhere in the cluster, routed as ``kafka-transactions.sh abort
    --start-offset``: DescribeProducers to the partition's leader finds the producer whose open transaction starts
    there, then WriteTxnMarkers to that leader writes its ABORT marker (answered once committed)."""
    leader = peers.leader(topic, partition)
    if leader is None:
        raise ConsoleError(f"{topic}-{partition} has no leader now: retry")
    if leader == peers.node_id:
        return await abort_transaction(b, topic, partition, start_offset)
    found = (await peers.producers(leader, [(topic, partition)])).get((topic, partition))
    if found is None:
        raise ConsoleError(f"broker {leader} could not describe the producers of {topic}-{partition}")
    matching = [s for s in found if int(s.current_txn_start_offset) == start_offset]
    if not matching:
        raise ConsoleError(f"no open transaction starts at offset {start_offset} in {topic}-{partition}")
    s = matching[0]
    code = await peers.write_abort_marker(leader, topic, partition, int(s.producer_id), int(s.producer_epoch),
                                          max(int(s.coordinator_epoch), 0))
    if code != ErrorCode.NONE:
        raise ConsoleError(f"broker {leader} refused the ABORT marker in {topic}-{partition}: {code.name}")
    return OpenProducer(topic, partition, int(s.producer_id), int(s.producer_epoch), start_offset,
                        int(s.last_timestamp))
