"""What the other brokers of a cluster coordinate and lead, read and changed through Kafka requests to them, as Kafka
UI or AKHQ do through the admin API: ListGroups, DescribeGroups, OffsetFetch, OffsetCommit, ListOffsets,
ListTransactions, DescribeTransactions, DescribeProducers and WriteTxnMarkers; and the records, offsets and sizes of
partitions led elsewhere, for the topic pages: Fetch, ListOffsets and DescribeLogDirs to the partition's leader.

The console has its own ``ConnectionPool`` (``odradek/client/pool.py``, the broker's inter-broker client: the
inter-broker listener, its security, addresses from the live cluster image), created on first use and closed with
the HTTP application. It is not the broker's ``pool``: a console request then never waits behind a replica
fetcher's long-poll Fetch on a shared pipelined connection, and a console request that times out (which closes its
connection) never fails the fetcher's requests in flight.

Where a group or a transactional id is coordinated is found as FindCoordinator finds it, from this broker's image of
the cluster: the leader of the key's partition of ``__consumer_offsets`` / ``__transaction_state``. A partition's end
offset is its leader's high watermark: this broker's replica when it leads the partition, else ListOffsets (latest,
read_uncommitted) to the leader. Records of a partition led elsewhere are read with Fetch (v12, by topic name) to
its leader, at most ``FETCH_MAX_BYTES`` a request, at the isolation level asked for; the live tail long-polls with
Fetch on a pool of its own (``tail_pool``), closed with the tail, so its waits never delay a page's requests.

Invariants:
- every request is bounded in time (``REQUEST_TIMEOUT_MS`` per request; connecting by ``CONNECT_TIMEOUT_MS`` plus
  the pool's reconnect backoff, at most 1.2 s; the whole by ``DEADLINE_MS`` plus the request's timeout, should the
  pool's own bounds ever fail): a broker that does not answer becomes a
  ``PeerError`` whose message the page shows as a notice, never a hang or a 500;
- requests to different brokers are sent concurrently; requests are never retried (a page is reloaded instead);
- what this broker coordinates or leads is read from its in-memory state, never requested from itself;
- the console checks the user's ACLs before asking (``access.py``); the peers see the inter-broker principal.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from odradek.broker.listener_security import inter_broker_security
from odradek.client.connection import BrokerConnectionError
from odradek.client.pool import BrokerNotAvailableError, ConnectionPool
from odradek.console.errors import ConsoleError
from odradek.coordinator.group.records import partition_for
from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

T = TypeVar("T")
TP = tuple[str, int]

REQUEST_TIMEOUT_MS = 5_000
CONNECT_TIMEOUT_MS = 3_000
DEADLINE_MS = 10_000  # one request's worst case: backoff + connect + request, with room
LATEST = -1
EARLIEST = -2
FETCH_VERSION = 12  # the last Fetch naming topics (v13+ name them by id)
FETCH_MAX_BYTES = 1 << 20  # as the local browser reads (messages.READ_CHUNK)

# a coordinator moving or loading: the page says so (reload to retry) rather than showing the group as unknown
_MOVING = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)

_API_NAMES = {
    apis.LIST_GROUPS: "ListGroups",
    apis.DESCRIBE_GROUPS: "DescribeGroups",
    apis.OFFSET_FETCH: "OffsetFetch",
    apis.OFFSET_COMMIT: "OffsetCommit",
    apis.LIST_OFFSETS: "ListOffsets",
    apis.LIST_TRANSACTIONS: "ListTransactions",
    apis.DESCRIBE_TRANSACTIONS: "DescribeTransactions",
    apis.DESCRIBE_PRODUCERS: "DescribeProducers",
    apis.WRITE_TXN_MARKERS: "WriteTxnMarkers",
    apis.FETCH: "Fetch",
    apis.DESCRIBE_LOG_DIRS: "DescribeLogDirs",
}


@dataclass(frozen=True, slots=True)
class Fetched:
    """One partition's part of a Fetch answer: its batches (whole, possibly starting before the offset asked for),
    the leader's offsets, and with read_committed the aborted transactions ``(producer_id, first_offset)`` over the
    batches returned. ``out_of_range``: the offset asked for is outside ``[log_start_offset, high_watermark]``."""

    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...] = ()
    out_of_range: bool = False


class PeerError(ConsoleError):
    """Broker ``broker_id`` did not answer a request (down, unreachable, too slow) or could not serve it: shown as
    the console shows its own refusals, never a 500."""

    def __init__(self, broker_id: int, message: str) -> None:
        super().__init__(message)
        self.broker_id = broker_id


class Peers:
    """The console's client of the other brokers of the cluster of ``broker`` (see the module's notes)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._pool: ConnectionPool | None = None

    @property
    def clustered(self) -> bool:
        """True when this broker is in a cluster: the group and transaction pages then ask the other brokers."""
        return self.broker.cluster is not None

    def _new_pool(self) -> ConnectionPool:
        b = self.broker
        cluster = b.cluster
        assert cluster is not None
        return ConnectionPool(
            client_id=f"odradek-console-{b.node_id}",
            resolve=cluster.address_of,
            connect_timeout_ms=CONNECT_TIMEOUT_MS,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            security=inter_broker_security(b.config),
        )

    def _connections(self) -> ConnectionPool:
        if self._pool is None:
            self._pool = self._new_pool()
        return self._pool

    def tail_pool(self) -> ConnectionPool:
        """A pool of its own for one live tail's long polls; the caller closes it."""
        return self._new_pool()

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    # -- where things are --------------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self.broker.node_id

    def live(self) -> list[int]:
        """The live brokers' ids (this one included), from the cluster image."""
        cluster = self.broker.cluster
        return sorted(cluster.brokers) if cluster is not None else [self.node_id]

    def leader(self, topic: str, partition: int) -> int | None:
        cluster = self.broker.cluster
        if cluster is None:
            return self.node_id
        state = cluster.states.get((topic, partition))
        if state is None or state.leader < 0 or state.leader not in cluster.brokers:
            return None
        return state.leader

    def coordinator(self, internal_topic: str, key: str) -> int | None:
        """The broker coordinating ``key`` (a group id or a transactional id), as FindCoordinator finds it; None
        while the internal topic does not exist or the key's partition has no live leader."""
        topic = self.broker.registry.get(internal_topic)
        if topic is None or not key:
            return None
        return self.leader(internal_topic, partition_for(key, topic.partitions))

    # -- requests ----------------------------------------------------------------------------------------

    async def send(self, broker_id: int, api_key: int, request: dict[str, Any], *, version: int | None = None,
                   timeout_ms: int = REQUEST_TIMEOUT_MS, pool: ConnectionPool | None = None) -> Any:
        """One request to ``broker_id`` (through ``pool``, else the console's), bounded in time; ``PeerError``
        when it is not answered."""
        what = _API_NAMES.get(api_key, f"api {api_key}")
        connections = pool if pool is not None else self._connections()
        try:
            return await asyncio.wait_for(
                connections.send(broker_id, api_key, request, version=version, timeout_ms=timeout_ms),
                (DEADLINE_MS + timeout_ms) / 1000,
            )
        except (BrokerConnectionError, BrokerNotAvailableError, KafkaError, OSError) as e:
            raise PeerError(broker_id, f"broker {broker_id} did not answer {what}: {e}") from None
        except TimeoutError:
            raise PeerError(broker_id, f"broker {broker_id} did not answer {what} in time") from None

    async def each(self, calls: dict[int, Awaitable[T]]) -> tuple[dict[int, T], list[str]]:
        """Await ``calls`` (one per broker) concurrently: the answers, and a notice per broker that failed."""
        keys = list(calls)
        results = await asyncio.gather(*calls.values(), return_exceptions=True)
        out: dict[int, T] = {}
        notices: list[str] = []
        for k, r in zip(keys, results, strict=True):
            if isinstance(r, PeerError):
                notices.append(r.message)
            elif isinstance(r, BaseException):
                raise r
            else:
                out[k] = r
        return out, notices

    # -- groups -----------------------------------------------------------------------------------------

    async def list_groups(self, broker_id: int) -> list[dict[str, str]]:
        r = await self.send(broker_id, apis.LIST_GROUPS, {})
        code = ErrorCode(int(r.error_code))
        if code != ErrorCode.NONE:
            raise PeerError(broker_id, f"broker {broker_id} answered ListGroups with {code.name}")
        return [
            {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": getattr(g, "group_state", "")}
            for g in r.groups
        ]

    async def describe_groups(self, broker_id: int, group_ids: list[str]) -> dict[str, dict[str, Any]]:
        """DescribeGroups' answer per group, in the shape of the coordinator's ``describe``."""
        r = await self.send(broker_id, apis.DESCRIBE_GROUPS,
                            {"groups": group_ids, "include_authorized_operations": False})
        out = {}
        for g in r.groups:
            code = ErrorCode(int(g.error_code))
            if code in _MOVING:
                raise PeerError(broker_id, f"broker {broker_id} could not describe group '{g.group_id}': "
                                           f"{code.name} (retry)")
            out[g.group_id] = {
                "error_code": code,
                "group_id": g.group_id,
                "group_state": g.group_state,
                "protocol_type": g.protocol_type,
                "protocol_data": g.protocol_data,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_assignment": m.member_assignment,
                    }
                    for m in g.members
                ],
            }
        return out

    async def fetch_offsets(self, broker_id: int, group_ids: list[str]) -> dict[str, dict[TP, int]]:
        """Each group's committed offsets (OffsetFetch v8, every group in one request); a group the coordinator
        could not answer for (moving, loading) is a ``PeerError``."""
        if not group_ids:
            return {}
        r = await self.send(broker_id, apis.OFFSET_FETCH,
                            {"groups": [{"group_id": g, "topics": None} for g in group_ids], "require_stable": False},
                            version=8)
        out: dict[str, dict[TP, int]] = {}
        for g in r.groups:
            code = ErrorCode(int(g.error_code))
            if code in _MOVING:
                raise PeerError(broker_id, f"broker {broker_id} could not fetch the offsets of group "
                                           f"'{g.group_id}': {code.name} (retry)")
            offsets: dict[TP, int] = {}
            if code == ErrorCode.NONE:
                for t in g.topics:
                    for p in t.partitions:
                        if int(p.error_code) == 0 and p.committed_offset >= 0:
                            offsets[(t.name, p.partition_index)] = int(p.committed_offset)
            out[g.group_id] = offsets
        return out

    async def commit_offsets(self, broker_id: int, group_id: str, offsets: dict[TP, int]) -> dict[TP, ErrorCode]:
        """An admin commit (generation -1, no member) of ``offsets`` to the group's coordinator."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (t, p), off in sorted(offsets.items()):
            topics.setdefault(t, []).append(
                {"partition_index": p, "committed_offset": off, "committed_leader_epoch": -1,
                 "committed_metadata": ""})
        r = await self.send(broker_id, apis.OFFSET_COMMIT, {
            "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time_ms": -1, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        return {(t.name, p.partition_index): ErrorCode(int(p.error_code)) for t in r.topics for p in t.partitions}

    # -- offsets ----------------------------------------------------------------------------------------

    async def list_offsets(self, wanted: dict[TP, int]) -> tuple[dict[TP, int], list[str]]:
        """ListOffsets for each partition at its timestamp spec (``LATEST``, ``EARLIEST`` or a timestamp), from
        its leader: this broker's log when it leads it. The offsets found (-1 where a timestamp finds none) and a
        notice per leader that did not answer or partition without a leader."""
        b = self.broker
        out: dict[TP, int] = {}
        notices: list[str] = []
        remote: dict[int, dict[TP, int]] = {}
        by_time: dict[TP, Any] = {}
        for tp, spec in wanted.items():
            leader = self.leader(*tp)
            if leader is None:
                notices.append(f"{tp[0]}-{tp[1]} has no leader: its offsets are unknown")
            elif leader == self.node_id:
                part = b.replicas.get(*tp)
                if part is None or not part.is_leader:
                    notices.append(f"{tp[0]}-{tp[1]}: this broker is not its leader yet")
                elif spec == LATEST:
                    out[tp] = part.log.high_watermark
                elif spec == EARLIEST:
                    out[tp] = part.log.log_start_offset
                else:
                    by_time[tp] = part.log
            else:
                remote.setdefault(leader, {})[tp] = spec
        if by_time:
            from odradek.console.messages import offset_for_timestamp

            def read() -> dict[TP, int]:
                return {tp: offset_for_timestamp(lg, wanted[tp]) for tp, lg in by_time.items()}

            out.update(await asyncio.to_thread(read))
        answers, failed = await self.each({leader: self._list_offsets(leader, tps) for leader, tps in remote.items()})
        for found in answers.values():
            out.update(found)
        return out, notices + failed

    async def _list_offsets(self, broker_id: int, wanted: dict[TP, int]) -> dict[TP, int]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (t, p), spec in sorted(wanted.items()):
            topics.setdefault(t, []).append({"partition_index": p, "current_leader_epoch": -1, "timestamp": spec})
        r = await self.send(broker_id, apis.LIST_OFFSETS, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        out: dict[TP, int] = {}
        for t in r.topics:
            for p in t.partitions:
                if int(p.error_code) == 0:
                    out[(t.name, p.partition_index)] = int(p.offset)
        return out

    async def offset_ranges(self, tps: Iterable[TP]) -> tuple[dict[TP, tuple[int, int]], list[str]]:
        """Each partition's (log start offset, high watermark) from its leader (ListOffsets EARLIEST and LATEST,
        both at once); the notices of ``list_offsets``."""
        wanted = list(tps)
        (starts, n1), (ends, n2) = await asyncio.gather(
            self.list_offsets(dict.fromkeys(wanted, EARLIEST)), self.list_offsets(dict.fromkeys(wanted, LATEST)))
        out = {tp: (starts[tp], ends[tp]) for tp in wanted if tp in starts and tp in ends}
        return out, list(dict.fromkeys(n1 + n2))

    async def log_sizes(self, by_leader: dict[int, list[TP]]) -> tuple[dict[TP, int], list[str]]:
        """The size of each partition's log on the broker it is listed under (DescribeLogDirs, one request per
        broker); a notice per broker that did not answer."""
        answers, notices = await self.each({bid: self._log_sizes(bid, tps) for bid, tps in by_leader.items()})
        out: dict[TP, int] = {}
        for found in answers.values():
            out.update(found)
        return out, notices

    async def _log_sizes(self, broker_id: int, tps: list[TP]) -> dict[TP, int]:
        topics: dict[str, list[int]] = {}
        for t, p in sorted(tps):
            topics.setdefault(t, []).append(p)
        r = await self.send(broker_id, apis.DESCRIBE_LOG_DIRS,
                            {"topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}, version=1)
        out: dict[TP, int] = {}
        for d in r.results:
            for t in d.topics:
                for p in t.partitions:
                    if not p.is_future_key:
                        out[(t.name, p.partition_index)] = int(p.partition_size)
        return out

    # -- records ----------------------------------------------------------------------------------------

    async def fetch(self, broker_id: int, topic: str, partition: int, offset: int, *, committed: bool = False,
                    max_bytes: int = FETCH_MAX_BYTES, max_wait_ms: int = 0,
                    pool: ConnectionPool | None = None) -> Fetched:
        """One Fetch of ``topic``-``partition`` from ``offset`` to its leader ``broker_id`` (a consumer's: replica
        id -1, read_committed or read_uncommitted, at most ``max_bytes``, waiting up to ``max_wait_ms`` for
        data). ``PeerError`` when it is not answered or answered with an error other than OFFSET_OUT_OF_RANGE."""
        r = await self.send(broker_id, apis.FETCH, {
            "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": max_bytes,
            "isolation_level": 1 if committed else 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": []}, version=FETCH_VERSION, timeout_ms=REQUEST_TIMEOUT_MS + max_wait_ms,
            pool=pool)
        code = ErrorCode(int(r.error_code))
        if code != ErrorCode.NONE:
            raise PeerError(broker_id, f"broker {broker_id} answered Fetch with {code.name}")
        for t in r.responses:
            for pd in t.partitions:
                if pd.partition_index != partition:
                    continue
                code = ErrorCode(int(pd.error_code))
                if code not in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
                    raise PeerError(broker_id, f"broker {broker_id} answered Fetch of {topic}-{partition} with "
                                               f"{code.name}")
                return Fetched(
                    bytes(pd.records or b""), int(pd.high_watermark), int(pd.last_stable_offset),
                    int(pd.log_start_offset),
                    tuple((int(a.producer_id), int(a.first_offset)) for a in pd.aborted_transactions or ()),
                    code == ErrorCode.OFFSET_OUT_OF_RANGE)
        raise PeerError(broker_id, f"broker {broker_id} answered Fetch without {topic}-{partition}")

    # -- transactions -------------------------------------------------------------------------------------

    async def transactions(self, broker_id: int) -> list[dict[str, Any]]:
        """ListTransactions then DescribeTransactions of what ``broker_id`` coordinates: one dict per id."""
        r = await self.send(broker_id, apis.LIST_TRANSACTIONS, {}, version=0)
        code = ErrorCode(int(r.error_code))
        if code != ErrorCode.NONE:
            raise PeerError(broker_id, f"broker {broker_id} answered ListTransactions with {code.name}")
        ids = [t.transactional_id for t in r.transaction_states]
        if not ids:
            return []
        d = await self.send(broker_id, apis.DESCRIBE_TRANSACTIONS, {"transactional_ids": ids})
        out = []
        for s in d.transaction_states:
            if int(s.error_code) != 0:
                continue
            out.append({
                "transactional_id": s.transactional_id,
                "producer_id": int(s.producer_id),
                "producer_epoch": int(s.producer_epoch),
                "state": s.transaction_state,
                "timeout_ms": _ms(s.transaction_timeout),
                "start_ms": _ms(s.transaction_start_time),
                "partitions": tuple((t.topic, int(p)) for t in s.topics for p in t.partitions),
            })
        return out

    async def producers(self, broker_id: int, partitions: Iterable[TP]) -> dict[TP, list[Any]]:
        """DescribeProducers: the active producers of each partition ``broker_id`` leads (kio ``ProducerState``s)."""
        topics: dict[str, list[int]] = {}
        for t, p in sorted(partitions):
            topics.setdefault(t, []).append(p)
        if not topics:
            return {}
        r = await self.send(broker_id, apis.DESCRIBE_PRODUCERS,
                            {"topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
        return {
            (t.name, p.partition_index): list(p.active_producers)
            for t in r.topics
            for p in t.partitions
            if int(p.error_code) == 0
        }

    async def write_abort_marker(self, broker_id: int, topic: str, partition: int, producer_id: int,
                                 producer_epoch: int, coordinator_epoch: int) -> ErrorCode:
        """WriteTxnMarkers with one ABORT marker, as the admin client's ``abortTransaction`` sends it."""
        r = await self.send(broker_id, apis.WRITE_TXN_MARKERS, {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
            "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": topic, "partition_indexes": [partition]}]}]}, version=1, timeout_ms=15_000)
        for m in r.markers:
            for t in m.topics:
                for p in t.partitions:
                    return ErrorCode(int(p.error_code))
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _ms(value: Any) -> int:
    """Milliseconds of a kio ``timedelta`` or ``datetime`` (an epoch time; -1 when unset, which the wire carries as
    the epoch itself: kio cannot encode a negative time)."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        ms = int(value.timestamp() * 1000)
        return ms if ms > 0 else -1
    return int(value) if value is not None else -1
