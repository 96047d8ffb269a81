"""Topics as the console lists and changes them: a paginated list, one topic's partitions and configs, and
create / delete / add partitions / alter configs.

Changes go through the broker's own admin paths, the ones the Kafka handlers call: ``Broker.create_topic``,
``delete_topic`` (refused when ``delete.topic.enable`` is false, as DeleteTopics is), ``add_partitions``, and
``alter_topic_configs`` with the overrides computed by IncrementalAlterConfigs' ``apply_incremental`` (SET and
DELETE). In a cluster each waits, bounded, until this broker sees the change, as CreateTopics/DeleteTopics do.
Configs are shown as DescribeConfigs describes them (``topic_config_entries``: effective value and source).

In a cluster a topic's page shows each partition's figures as its leader has them (``leaders_figures``): start and
end offsets by ListOffsets to the leader (in memory for what this broker leads), the size of this broker's replica
when it hosts one, else the leader's by DescribeLogDirs; a leader that does not answer leaves its partitions'
figures empty, with a notice. The list page's figures (messages, size) are gathered the same way for the topics
on the page (``leaders_rows``); in single-node mode both read the local logs in memory.

Invariants: a list page costs O(topics) for sorting and filtering names plus O(partitions shown) for the figures
of the topics on that page; nothing reads a log file (sizes are the segments' in-memory sizes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

from odradek.broker.handlers.admin_configs import (
    DEFAULT_CONFIG,
    DELETE,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    SET,
    STATIC_BROKER_CONFIG,
    apply_incremental,
    topic_config_entries,
)
from odradek.console import cluster_view
from odradek.console.errors import ConsoleError
from odradek.console.paging import Listing, page_of
from odradek.protocol.errors import UnknownTopicError

if TYPE_CHECKING:
    from odradek.broker.broker import Broker
    from odradek.cluster.metadata import Topic
    from odradek.console.cluster_view import PartitionInfo
    from odradek.console.peers import Peers

PAGE_SIZE = 50
WAIT_MS = 30_000
SOURCES = {
    DYNAMIC_TOPIC_CONFIG: "topic override",
    DYNAMIC_BROKER_CONFIG: "dynamic broker config",
    DYNAMIC_DEFAULT_BROKER_CONFIG: "dynamic cluster default",
    STATIC_BROKER_CONFIG: "server.properties",
    DEFAULT_CONFIG: "default",
}


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    internal: bool
    partitions: int
    replication: int
    messages: int | None
    size: int | None
    offline: int
    under_replicated: int


@dataclass(frozen=True, slots=True)
class ConfigRow:
    name: str
    value: str | None
    source: str
    overridden: bool


def _row(b: Broker, name: str) -> TopicRow | None:
    topic = b.registry.get(name)
    if topic is None:
        return None
    return _row_of(topic, cluster_view.partitions(b, topic))


def _row_of(topic: Topic, parts: list[PartitionInfo]) -> TopicRow:
    counted = [m for p in parts if (m := p.messages) is not None]
    sized = [p.size for p in parts if p.size is not None]
    return TopicRow(
        topic.name,
        topic.internal,
        topic.partitions,
        max((len(p.replicas) for p in parts), default=0),
        sum(counted) if counted else None,
        sum(sized) if sized else None,
        sum(p.offline for p in parts),
        sum(p.under_replicated for p in parts),
    )


def _unhealthy(b: Broker, topic: Topic) -> bool:
    return any(p.offline or p.under_replicated for p in cluster_view.partitions(b, topic))


def list_topics(
    b: Broker,
    query: str = "",
    page: int = 1,
    *,
    internal: bool = True,
    page_size: int = PAGE_SIZE,
    visible: Callable[[str], bool] | None = None,
    unhealthy: bool = False,
) -> Listing[TopicRow]:
    """A page of the topics whose name contains ``query`` (and that ``visible`` lets through), sorted by name; with
    ``unhealthy`` only those with an offline or under-replicated partition (in-memory state of every partition)."""
    names = sorted(
        n
        for n, t in b.registry.topics.items()
        if (internal or not t.internal) and query in n and (visible is None or visible(n))
    )
    if unhealthy:
        names = [n for n in names if (t := b.registry.get(n)) is not None and _unhealthy(b, t)]
    shown, page, pages = page_of(names, page, page_size)
    rows = [r for r in (_row(b, n) for n in shown) if r is not None]
    return Listing(rows, len(names), page, pages)


async def leaders_figures(
    b: Broker, peers: Peers, parts: list[PartitionInfo]
) -> tuple[list[PartitionInfo], list[str]]:
    """``parts`` (of one topic, in a cluster) with each partition's start and end offsets as its leader has them
    and a size where one is known (see the module's notes); the notices of the brokers that did not answer."""
    here = b.node_id
    led_here = set()
    for p in parts:
        part = b.replicas.get(p.topic, p.partition)
        if p.leader == here and part is not None and part.is_leader:
            led_here.add((p.topic, p.partition))
    ask = [(p.topic, p.partition) for p in parts if (p.topic, p.partition) not in led_here and p.leader >= 0]
    sizes_of: dict[int, list[tuple[str, int]]] = {}
    for p in parts:
        if p.size is None and p.leader >= 0 and p.leader != here:
            sizes_of.setdefault(p.leader, []).append((p.topic, p.partition))
    if not ask and not sizes_of:
        return parts, []
    (ranges, n1), (sizes, n2) = await asyncio.gather(peers.offset_ranges(ask), peers.log_sizes(sizes_of))
    out = []
    for p in parts:
        if (p.topic, p.partition) in led_here:
            out.append(p)
            continue
        start, end = ranges.get((p.topic, p.partition), (None, None))
        size = p.size if p.size is not None else sizes.get((p.topic, p.partition))
        out.append(replace(p, start_offset=start, end_offset=end, size=size))
    return out, list(dict.fromkeys(n1 + n2))


async def leaders_rows(
    b: Broker, peers: Peers, listing: Listing[TopicRow]
) -> tuple[Listing[TopicRow], list[str]]:
    """``listing``'s rows with messages and sizes as the partitions' leaders have them (``leaders_figures`` of the
    page's topics at once); the notices of the brokers that did not answer."""
    topics = [t for r in listing.rows if (t := b.registry.get(r.name)) is not None]
    parts = [p for t in topics for p in cluster_view.partitions(b, t)]
    figures, notices = await leaders_figures(b, peers, parts)
    by_topic: dict[str, list[PartitionInfo]] = {}
    for p in figures:
        by_topic.setdefault(p.topic, []).append(p)
    rows = [_row_of(t, by_topic.get(t.name, [])) for t in topics]
    return Listing(rows, listing.total, listing.page, listing.pages), notices


def configs(b: Broker, name: str) -> list[ConfigRow]:
    topic = b.registry.get(name)
    if topic is None:
        raise UnknownTopicError(f"topic '{name}' does not exist")
    return [
        ConfigRow(
            e["name"],
            e["value"],
            SOURCES.get(e["config_source"], str(e["config_source"])),
            e["config_source"] == DYNAMIC_TOPIC_CONFIG,
        )
        for e in topic_config_entries(b, topic.configs)
    ]


def parse_configs(text: str) -> dict[str, str]:
    """``key=value`` lines (blank lines and ``#`` comments ignored) → a dict; ``ConsoleError`` otherwise."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ConsoleError(f"config {line!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


async def create(
    b: Broker, name: str, partitions: int | None, replication_factor: int | None, topic_configs: dict[str, str]
) -> None:
    b.create_topic(name, partitions, replication_factor, topic_configs)
    await b.wait_for_topic(name, exists=True, timeout_ms=WAIT_MS)


async def delete(b: Broker, name: str) -> None:
    if not b.config.delete_topic_enable:
        raise ConsoleError("Topic deletion is disabled (delete.topic.enable=false).")
    b.delete_topic(name)
    await b.wait_for_topic(name, exists=False, timeout_ms=WAIT_MS)


async def add_partitions(b: Broker, name: str, count: int) -> None:
    b.add_partitions(name, count)
    await b.wait_for_topic(name, partitions=count, exists=True, timeout_ms=WAIT_MS)


class _Op(NamedTuple):  # what apply_incremental reads of an IncrementalAlterConfigs operation
    name: str
    config_operation: int
    value: str | None


def alter_configs(b: Broker, name: str, set_configs: dict[str, str], delete_keys: list[str]) -> dict[str, str]:
    """Set and delete overrides of the topic (IncrementalAlterConfigs' SET and DELETE); its new overrides."""
    topic = b.registry.get(name)
    if topic is None:
        raise UnknownTopicError(f"topic '{name}' does not exist")
    ops = [_Op(k, SET, v) for k, v in set_configs.items()] + [_Op(k, DELETE, None) for k in delete_keys]
    new = apply_incremental(b, dict(topic.configs), ops)
    b.alter_topic_configs(name, new)
    return new
