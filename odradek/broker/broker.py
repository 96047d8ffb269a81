"""The broker's state: topics, their partition logs, and the notifications that wake long polls.

Handlers (``broker/handlers/``) call into this object; it owns no sockets (see ``server.py``).

Invariants:
- A partition log exists for every partition of every topic in the registry, and only for those.
- With one replica the high watermark is the log end offset: it moves right after each append,
  which is when acks=-1 is satisfied.
- ``notify(topic, partition)`` wakes every fetch waiting on that partition; waiters re-read the log.
- A topic's effective config is computed in one place, ``topic_log_config``: its overrides on top of
  ``log_defaults``, which are ``server.properties`` with the dynamic broker configs on top (cluster
  default ``""``, then this broker's own), as in Kafka. Every log carries its effective config.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable

from odradek.broker.config import BrokerConfig, default_log_config, merge_dynamic
from odradek.broker.fetch_session import FetchSessionCache
from odradek.broker.group_runtime import OFFSETS_TOPIC, GroupRuntime
from odradek.broker.producer_ids import ProducerIdAllocator
from odradek.broker.txn_runtime import TxnRuntime
from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.cluster.metadata import Topic, TopicRegistry
from odradek.protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaError,
    UnknownTopicError,
)
from odradek.storage.config import LogConfig
from odradek.storage.log import AppendInfo, Log
from odradek.storage.manager import LogManager
from odradek.storage.producer_state import ProducerStateManager

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.node_id = config.node_id
        self.log_manager = LogManager(
            config.log_dirs,
            config.log_config,
            clock=clock,
            topic_config=self.log_config_for,
            retention_check_interval_ms=config.retention_check_interval_ms,
            checkpoint_interval_ms=config.checkpoint_interval_ms,
            producer_state_factory=lambda directory, name: ProducerStateManager(
                directory, name, expiration_ms=config.producer_id_expiration_ms),
            producer_expiration_check_interval_ms=config.producer_id_expiration_check_interval_ms,
        )
        self.producer_ids = ProducerIdAllocator(config.log_dirs[0])
        self.topics: TopicRegistry | None = None
        # Topic defaults: server.properties plus the dynamic broker configs (set once the registry is read).
        self.log_defaults: LogConfig = config.log_config
        self._waiters: dict[tuple[str, int], set[asyncio.Future[None]]] = defaultdict(set)
        self.fetch_sessions = FetchSessionCache(config.fetch_session_slots)
        self.groups = GroupRuntime(self, config.group_config, config.offsets_segment_bytes)
        self.txns = TxnRuntime(self, config.txn_config, config.txn_state_segment_bytes)
        self.started = False
        self.shutting_down = False  # set by wake_all: long polls stop waiting and answer

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self.log_manager.startup()  # locks the data directories before anything in them is read
        self.topics = TopicRegistry(
            self.config.log_dirs[0], cluster_id=self.config.cluster_id, node_id=self.node_id,
            log_dirs=self.config.log_dirs,
        )
        try:
            self.log_defaults = self._log_defaults_with(self._dynamic_layers())
        except KafkaError as e:
            log.warning("ignoring the stored dynamic broker configs: %s", e)
        self.log_manager.default_config = self.log_defaults
        # Logs were opened before the registry was read: give each its topic's overrides.
        for lg in self.log_manager.logs():
            lg.update_config(self.log_config_for(lg.topic))
        # Logs follow the registry: create missing partitions, drop logs of topics that are gone.
        for topic in self.registry.topics.values():
            for p in range(topic.partitions):
                self.log_manager.get_or_create_log(topic.name, p)
        for lg in list(self.log_manager.logs()):
            known = self.registry.get(lg.topic)
            if known is None or lg.partition >= known.partitions:
                log.warning("deleting log %s: its topic no longer exists", lg.name)
                self.log_manager.delete_log(lg.topic, lg.partition)
        for lg in self.log_manager.logs():
            lg.update_high_watermark(lg.next_offset)
        self.started = True

    def stop(self) -> None:
        if self.started:
            self.log_manager.shutdown()
            self.started = False

    @property
    def registry(self) -> TopicRegistry:
        assert self.topics is not None, "broker not started"
        return self.topics

    def tick(self) -> None:
        self.log_manager.tick()

    # -- configuration ---------------------------------------------------------------------------

    def topic_log_config(self, overrides: dict[str, str], defaults: LogConfig | None = None) -> LogConfig:
        """The effective config of a topic with these overrides (over ``log_defaults`` unless given)."""
        try:
            return (defaults or self.log_defaults).with_overrides(overrides)
        except InvalidConfigError:
            raise
        except (TypeError, ValueError) as e:
            raise InvalidConfigError(str(e)) from None

    def log_config_for(self, topic: str) -> LogConfig:
        known = self.topics.get(topic) if self.topics is not None else None
        return self.topic_log_config(known.configs if known is not None else {})

    def validate_topic_configs(self, configs: dict[str, str]) -> LogConfig:
        """The effective config with ``configs`` applied, or ``InvalidConfigError``."""
        return self.topic_log_config(configs)

    @property
    def broker_entity(self) -> str:
        """This broker's dynamic-config entity name (its node id); ``""`` is the cluster default."""
        return str(self.node_id)

    def dynamic_broker_configs(self, entity: str) -> dict[str, str]:
        """The dynamic broker configs of ``entity`` (``""`` or this broker's node id)."""
        if self.topics is None:
            return {}
        return dict(self.topics.broker_configs.get(entity, {}))

    def _dynamic_layers(self, entity: str | None = None, configs: dict[str, str] | None = None
                        ) -> tuple[dict[str, str], dict[str, str]]:
        """(cluster default, this broker's) dynamic configs, with ``entity``'s replaced by ``configs``."""
        layers = {e: self.dynamic_broker_configs(e) for e in ("", self.broker_entity)}
        if entity is not None:
            layers[entity] = dict(configs or {})
        return layers[""], layers[self.broker_entity]

    def broker_values(self, layers: tuple[dict[str, str], dict[str, str]] | None = None) -> dict[str, object]:
        """Every broker key's typed value: server.properties with the dynamic configs on top."""
        return merge_dynamic(self.config.values, *(layers if layers is not None else self._dynamic_layers()))

    def _log_defaults_with(self, layers: tuple[dict[str, str], dict[str, str]]) -> LogConfig:
        return default_log_config(self.broker_values(layers))

    def alter_broker_configs(self, entity: str, configs: dict[str, str], *, validate_only: bool = False) -> None:
        """Replace the dynamic configs of ``entity`` and apply the new defaults to every log.

        ``entity`` is ``""`` (cluster-wide default) or this broker's node id as a string. Raises
        ``ReadOnlyConfigError`` for a key that cannot change at runtime and ``InvalidConfigError`` for
        an invalid value, before anything changes.
        """
        assert entity in ("", self.broker_entity), entity
        defaults = self._log_defaults_with(self._dynamic_layers(entity, configs))
        per_topic = {name: self.topic_log_config(t.configs, defaults) for name, t in self.registry.topics.items()}
        if validate_only:
            return
        self.registry.set_broker_configs(entity, configs)
        self.log_defaults = defaults
        self.log_manager.default_config = defaults
        for lg in self.log_manager.logs():
            lg.update_config(per_topic.get(lg.topic, defaults))
        log.info("altered dynamic broker configs of %s: %s",
                 "the cluster default" if entity == "" else f"broker {entity}", configs)

    # -- topics ----------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                     configs: dict[str, str] | None = None, *, validate_only: bool = False) -> Topic | None:
        partitions = self.config.num_partitions if partitions in (None, -1) else partitions
        rf = self.config.default_replication_factor if replication_factor in (None, -1) else replication_factor
        assert partitions is not None and rf is not None
        configs = dict(configs or {})
        self.registry.check_new(name, partitions, rf)
        self.validate_topic_configs(configs)
        if validate_only:
            return None
        topic = self.registry.add(name, partitions, configs)
        for p in range(partitions):
            self.log_manager.get_or_create_log(name, p)
        log.info("created topic %s with %d partitions", name, partitions)
        return topic

    def delete_topic(self, name: str) -> Topic:
        topic = self.registry.get(name)
        if topic is None:
            raise UnknownTopicError(f"topic '{name}' does not exist")
        if topic.internal:
            raise InvalidTopicError(f"topic '{name}' is internal to the broker and cannot be deleted")
        self.registry.remove(name)
        for p in range(topic.partitions):
            if self.log_manager.get_log(name, p) is not None:
                self.log_manager.delete_log(name, p)
            self.notify(name, p)
        self.groups.on_topic_deleted(name)
        log.info("deleted topic %s", name)
        return topic

    def add_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None:
        topic = self.registry.get(name)
        if topic is None:
            raise UnknownTopicError(f"topic '{name}' does not exist")
        if topic.internal:
            raise InvalidPartitionsError(f"topic '{name}' is internal: its partition count cannot change")
        if count <= topic.partitions:
            raise InvalidPartitionsError(
                f"topic '{name}' has {topic.partitions} partitions; the new count must be larger, got {count}"
            )
        if validate_only:
            return
        for p in range(topic.partitions, count):
            self.log_manager.get_or_create_log(name, p)
        self.registry.set_partitions(name, count)
        log.info("topic %s now has %d partitions", name, count)

    def alter_topic_configs(self, name: str, configs: dict[str, str], *, validate_only: bool = False) -> None:
        topic = self.registry.get(name)
        if topic is None:
            raise UnknownTopicError(f"topic '{name}' does not exist")
        new = self.validate_topic_configs(configs)
        if validate_only:
            return
        self.registry.set_configs(name, configs)
        for p in range(topic.partitions):
            lg = self.log_manager.get_log(name, p)
            if lg is not None:
                lg.update_config(new)
        log.info("altered configs of topic %s: %s", name, configs)

    def get_log(self, topic: str, partition: int) -> Log:
        lg = self.log_manager.get_log(topic, partition)
        if lg is None:
            raise UnknownTopicError(f"this server does not host topic-partition {topic}-{partition}")
        return lg

    # -- produce ---------------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: bytes | bytearray) -> AppendInfo:
        lg = self.get_log(topic, partition)
        info = lg.append(records)
        lg.update_high_watermark(lg.next_offset)
        self.notify(topic, partition)
        return info

    def append_txn_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                          coordinator_epoch: int) -> None:
        """End a producer's transaction in one partition: append its COMMIT or ABORT marker (fenced by
        epoch and coordinator epoch in the log), settle its pending offsets if the partition is one of
        ``__consumer_offsets``, and wake the fetches the moved last stable offset may release."""
        lg = self.get_log(topic, partition)
        lg.append_marker(producer_id, producer_epoch, commit, coordinator_epoch)
        lg.update_high_watermark(lg.next_offset)
        if topic == OFFSETS_TOPIC:
            self.groups.complete_txn(partition, producer_id, commit)
        self.notify(topic, partition)

    # -- long polls ------------------------------------------------------------------------------

    def wake_all(self) -> None:
        """Wake every waiting fetch (shutdown: they answer with what they have)."""
        self.shutting_down = True
        for key in list(self._waiters):
            self.notify(*key)

    def notify(self, topic: str, partition: int) -> None:
        waiters = self._waiters.pop((topic, partition), None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_for_data(self, partitions: Iterable[tuple[str, int]], timeout_ms: int) -> None:
        """Return when any of ``partitions`` is appended to, or after ``timeout_ms``."""
        if timeout_ms <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(partitions)
        for key in keys:
            self._waiters[key].add(fut)
        try:
            await asyncio.wait_for(fut, timeout_ms / 1000)
        except TimeoutError:
            pass
        finally:
            for key in keys:
                s = self._waiters.get(key)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        self._waiters.pop(key, None)
