"""The broker's composition root: topics, the replica manager over the partition logs, the cluster link,
the coordinators, and the notifications that wake long polls.

Handlers (``broker/handlers/``) call into this object; it owns no sockets (see ``server.py``).

Two modes:
- single node (no ``zookeeper.connect``): topics live in ``odradek-metadata.json`` (``TopicRegistry``);
  a partition log exists for every partition of every topic in the registry, and only for those; with one
  replica the high watermark is the log end offset: it moves right after each append, which is when
  acks=-1 is satisfied;
- cluster (``zookeeper.connect``): topics, assignments and partition states live in ZooKeeper
  (``cluster/member.py`` keeps the image, ``cluster/controller/`` decides); a log exists here for the
  partitions this broker is a replica of; ``replica/`` does leading, following and acks=all. Topic
  changes are written to ZooKeeper and take effect when its watches bring them back.
- ``notify(topic, partition)`` wakes every fetch waiting on that partition; waiters re-read the log.
- A topic's effective config is computed in one place, ``topic_log_config``: its overrides on top of
  ``log_defaults``, which are ``server.properties`` with the dynamic broker configs on top (cluster
  default ``""``, then this broker's own), as in Kafka. Every log carries its effective config.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.broker.config import BrokerConfig, default_log_config, merge_dynamic
from odradek.broker.fetch_session import FetchSessionCache
from odradek.broker.group_runtime import OFFSETS_TOPIC, GroupRuntime
from odradek.broker.listener_security import inter_broker_security
from odradek.broker.producer_ids import ProducerIdAllocator, ZkProducerIdAllocator
from odradek.broker.txn_runtime import TXN_STATE_TOPIC, TxnRuntime
from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.cluster.metadata import Topic, TopicRegistry, check_meta_properties
from odradek.cluster.zk.layout import ZkError, quota_entity_from_path, quota_entity_path
from odradek.metrics.broker_metrics import BrokerMetrics
from odradek.protocol.errors import (
    CoordinatorNotAvailableError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaError,
    TopicExistsError,
    UnknownTopicError,
)
from odradek.quota.client_quotas import ClientQuotas
from odradek.quota.entity import CONNECTION_CREATION_RATE, IP, Entity
from odradek.quota.entity import describe as describe_entity
from odradek.replica.manager import ReplicaManager
from odradek.replica.partition import Partition
from odradek.replica.throttle import ReplicationThrottle
from odradek.security.acl_storage import AclStore
from odradek.security.authorizer import Authorizer
from odradek.security.authorizer import from_config as authorizer_from_config
from odradek.security.credentials import CredentialStore, StoredCredentials
from odradek.storage.config import LogConfig
from odradek.storage.log import AppendInfo, Log
from odradek.storage.manager import LogManager
from odradek.storage.producer_state import ProducerStateManager

if TYPE_CHECKING:
    from odradek.client.pool import ConnectionPool
    from odradek.cluster.controller.controller import Controller
    from odradek.cluster.member import ClusterMember, ClusterView
    from odradek.replica.fetcher import ReplicaFetcher

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
            checkpoint_interval_ms=(min(config.checkpoint_interval_ms, config.high_watermark_checkpoint_interval_ms)
                                    if config.zookeeper_connect else config.checkpoint_interval_ms),
            producer_state_factory=lambda directory, name: ProducerStateManager(
                directory, name, expiration_ms=config.producer_id_expiration_ms),
            producer_expiration_check_interval_ms=config.producer_id_expiration_check_interval_ms,
            cleaner_config=config.cleaner_config,
        )
        self.producer_ids: ProducerIdAllocator | ZkProducerIdAllocator = ProducerIdAllocator(config.log_dirs[0])
        self.replicated = config.zookeeper_connect is not None
        self.replicas = ReplicaManager(self.node_id, self.log_manager, clock=clock, replicated=self.replicated,
                                       notify=self.notify, replica_lag_time_max_ms=config.replica_lag_time_max_ms)
        self.replicas.on_leadership = self.on_leadership
        self.log_manager.on_dir_failure.append(self._dir_failed)
        self._loop: asyncio.AbstractEventLoop | None = None
        # why the broker must stop (every log directory failed), and who stops it (``odradek serve``)
        self.fatal: str | None = None
        self.on_fatal: Callable[[str], None] | None = None
        window = {"windows": config.replication_quota_window_num,
                  "window_ms": config.replication_quota_window_size_seconds * 1000}
        self.leader_throttle = ReplicationThrottle(
            self.node_id, lambda t: self._topic_override(t, "leader.replication.throttled.replicas"), clock,
            rate=config.values["leader.replication.throttled.rate"], **window)
        self.follower_throttle = ReplicationThrottle(
            self.node_id, lambda t: self._topic_override(t, "follower.replication.throttled.replicas"), clock,
            rate=config.values["follower.replication.throttled.rate"], **window)
        self.cluster: ClusterMember | None = None
        self.controller: Controller | None = None  # cluster mode: set by start_cluster, with the two below
        self.fetcher: ReplicaFetcher | None = None
        self.pool: ConnectionPool | None = None
        self.topics: TopicRegistry | ClusterView | None = None
        # Topic defaults: server.properties plus the dynamic broker configs (set once the registry is read).
        self.log_defaults: LogConfig = config.log_config
        self._waiters: dict[tuple[str, int], set[asyncio.Future[None]]] = defaultdict(set)
        self.fetch_sessions = FetchSessionCache(config.fetch_session_slots)
        self.quotas = ClientQuotas(clock, windows=config.quota_window_num, window_s=config.quota_window_size_seconds,
                                   mutation_windows=config.controller_quota_window_num,
                                   mutation_window_s=config.controller_quota_window_size_seconds)
        self.on_ip_quotas: Callable[[dict[str | None, float]], None] | None = None  # the connection limits
        # SCRAM users' credentials (security/credentials.py), from ZooKeeper or the metadata file; SASL logins
        # look them up through ``credentials.lookup``
        self.credentials = CredentialStore()
        # The ACL authorizer (security/authorizer.py; None: authorizer.class.name unset, nothing is checked) and
        # the ACLs' storage feeding it (security/acl_storage.py), set up by start()/start_cluster()
        self.authorizer: Authorizer | None = authorizer_from_config(config.values)
        self.acl_store: AclStore | None = None
        self.groups = GroupRuntime(self, config.group_config, config.offsets_segment_bytes)
        self.txns = TxnRuntime(self, config.txn_config, config.txn_state_segment_bytes)
        self.started = False
        self.serving = False  # the Kafka listeners accept requests (set and cleared by the server)
        self.shutting_down = False  # set by wake_all: long polls stop waiting and answer
        self.http_urls: list[str] = []  # where the HTTP listener serves (bound ports), set by the server
        self.metrics = BrokerMetrics()  # request, topic and connection counters (exported by odradek/http/)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self.log_manager.startup()  # locks the data directories before anything in them is read
        if self.replicated:
            self.started = True
            return  # the rest comes from ZooKeeper: start_cluster()
        self.topics = TopicRegistry(
            self.config.log_dirs[0], cluster_id=self.config.cluster_id, node_id=self.node_id,
            log_dirs=self.config.log_dirs,
        )
        try:
            self.log_defaults = self._log_defaults_with(self._dynamic_layers())
        except KafkaError as e:
            log.warning("ignoring the stored dynamic broker configs: %s", e)
        self.log_manager.default_config = self.log_defaults
        self._client_quotas_changed()
        self.credentials.replace_all(self.topics.scram_credentials)
        if self.authorizer is not None:
            self.acl_store = AclStore.single_node(self.authorizer, self.topics)
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
            self.replicas.add_local(lg)
        self.started = True

    async def start_cluster(self) -> None:
        """Cluster mode: join through ZooKeeper, load the image, take up this broker's replicas, start the
        controller candidate and the follower fetcher. Raises ``ZkError`` if ZooKeeper cannot be reached."""
        from odradek.client.pool import ConnectionPool
        from odradek.cluster.controller.controller import Controller, Rebalance
        from odradek.cluster.member import ClusterMember, MemberConfig
        from odradek.replica.fetcher import FetcherConfig, ReplicaFetcher

        cfg = self.config
        assert cfg.zookeeper_connect is not None
        settings = MemberConfig(self.node_id, cfg.zookeeper_connect, cfg.zk_session_timeout_ms,
                                cfg.zk_connection_timeout_ms, cfg.endpoints(), cfg.rack,
                                cfg.inter_broker_listener.name)
        member = ClusterMember(settings, self.replicas, on_topic_gone=self._topic_gone,
                               on_topic_configs=self._topic_configs_changed)
        self.cluster = member
        self.topics = member.view
        self.replicas.isr_writer = member.update_isr
        member.on_broker_configs = self._broker_configs_changed
        member.on_client_quotas = self._client_quotas_changed
        member.on_scram_credentials = lambda user: self.credentials.replace_user(
            user, member.scram_credentials.get(user, {}))
        self.pool = pool = ConnectionPool(client_id=f"odradek-broker-{self.node_id}", resolve=member.address_of,
                                          security=inter_broker_security(cfg))
        self.fetcher = fetcher = ReplicaFetcher(
            self.replicas, pool,
            config=FetcherConfig(cfg.replica_fetch_max_bytes, cfg.replica_fetch_response_max_bytes,
                                 cfg.replica_fetch_wait_max_ms, cfg.replica_fetch_min_bytes,
                                 cfg.replica_fetch_backoff_ms, cfg.replica_socket_timeout_ms),
            broker_epoch=lambda: member.broker_epoch, topic_id=member.topic_id, throttle=self.follower_throttle,
            metrics=self.metrics)
        self.replicas.on_followers_changed = fetcher.replan
        self.replicas.is_shutting_down = lambda b: (reg := member.brokers.get(b)) is not None and reg.shutting_down
        cluster_id = await member.start(cfg.cluster_id)
        self._broker_configs_changed()
        self._client_quotas_changed()
        self.credentials.replace_all(member.scram_credentials)
        if self.authorizer is not None:
            assert member.zk is not None
            self.acl_store = await AclStore.zookeeper(self.authorizer, member.zk)
        for d in cfg.log_dirs:
            check_meta_properties(d, cluster_id, self.node_id)
        zk = member.zk
        assert zk is not None
        self.producer_ids = ZkProducerIdAllocator(lambda size: zk.claim_producer_id_block(self.node_id, size))
        self._drop_foreign_logs()
        cfg = self.config
        self.controller = Controller(
            member, unclean=lambda topic: self.log_config_for(topic).unclean_leader_election_enable,
            rebalance=Rebalance(cfg.auto_leader_rebalance_enable, cfg.leader_imbalance_check_interval_seconds,
                                cfg.leader_imbalance_per_broker_percentage))
        self.controller.start()

    def _dir_failed(self, directory: Path, partitions: list[tuple[str, int]], why: str) -> None:
        """A log directory failed (told from whichever thread saw it): its partitions go offline on the loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._take_offline, partitions)

    def _take_offline(self, partitions: list[tuple[str, int]]) -> None:
        self.replicas.take_offline(partitions)
        if self.cluster is not None:  # the controller moves their leaderships away and drops us from their ISRs
            task = asyncio.get_running_loop().create_task(self.cluster.publish_registration())
            task.add_done_callback(_report_publish)
        if self.log_manager.all_offline and self.fatal is None:
            self.fatal = f"every log directory failed ({'; '.join(map(str, self.log_manager.offline_dirs))})"
            log.error("stopping: %s; repair the disks and restart the broker", self.fatal)
            if self.on_fatal is not None:
                self.on_fatal(self.fatal)

    def _drop_foreign_logs(self) -> None:
        """Logs on disk of partitions this broker is no longer a replica of (deleted while it was down)."""
        cluster = self.cluster
        assert cluster is not None
        for lg in list(self.log_manager.logs()):
            assignment = cluster.assignments.get(lg.topic)
            if assignment is None or self.node_id not in assignment.replicas.get(lg.partition, ()):
                log.warning("deleting log %s: this broker is not one of its replicas", lg.name)
                self.replicas.remove(lg.topic, lg.partition, delete=True)

    def _topic_gone(self, name: str, partitions: int) -> None:
        for p in range(partitions):
            self.replicas.remove(name, p, delete=True)
        self.groups.on_topic_deleted(name)
        log.info("deleted topic %s", name)

    def _topic_configs_changed(self, name: str) -> None:
        """The topic's overrides changed: every log of it here gets the new effective config."""
        topic = self.registry.get(name)
        new = self.log_config_for(name)
        for p in range(topic.partitions if topic is not None else 0):
            lg = self.log_manager.get_log(name, p)
            if lg is not None:
                lg.update_config(new)

    async def controlled_shutdown(self) -> None:
        """Before stopping (``controlled.shutdown.enable``): mark this broker as shutting down in its registration
        and wait (bounded by ``controlled.shutdown.max.retries`` x ``controlled.shutdown.retry.backoff.ms``)
        until the controller has moved every leadership that another in-sync replica can take."""
        cluster = self.cluster
        cfg = self.config
        if cluster is None or cluster.zk is None or not cfg.controlled_shutdown_enable or not cluster.registered:
            return
        cluster.shutting_down = True
        try:
            await cluster.publish_registration()
        except Exception as e:
            log.warning("controlled shutdown: could not tell the controller (%s); stopping without it", e)
            return
        log.info("controlled shutdown: asked the controller to move this broker's leaderships away")
        loop = asyncio.get_running_loop()
        retries = max(cfg.controlled_shutdown_max_retries, 1)
        bound_s = retries * max(cfg.controlled_shutdown_retry_backoff_ms, 1000) / 1000
        deadline = loop.time() + bound_s
        while True:
            movable = [tp for tp, s in cluster.states.items()
                       if s.leader == self.node_id and any(r != self.node_id and r in cluster.brokers for r in s.isr)]
            if not movable:
                log.info("controlled shutdown: no movable leadership left here")
                return
            if loop.time() >= deadline:
                log.warning("controlled shutdown: %d leaderships were not moved within %.0f s; stopping anyway",
                            len(movable), bound_s)
                return
            await asyncio.sleep(0.02)

    async def stop_cluster(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
        if self.fetcher is not None:
            await self.fetcher.stop()
        if self.pool is not None:
            await self.pool.close()
        if self.cluster is not None:
            await self.cluster.close()

    def stop(self) -> None:
        if self.started:
            self.log_manager.shutdown()
            self.started = False

    @property
    def registry(self) -> TopicRegistry | ClusterView:
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

    def _topic_override(self, topic: str, key: str) -> str:
        known = self.topics.get(topic) if self.topics is not None else None
        return known.configs.get(key, "") if known is not None else ""

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

    async def stored_topic_configs(self, name: str, cached: dict[str, str]) -> dict[str, str]:
        """A topic's overrides as they are stored now: in a cluster, read from ZooKeeper (what an AlterConfigs
        just wrote, before this broker's change notification arrives: Kafka's DescribeConfigs reads them there
        too); ``cached`` on a single node, or when ZooKeeper does not answer."""
        cluster = self.cluster
        if cluster is None or cluster.zk is None:
            return cached
        try:
            return await asyncio.to_thread(cluster.zk.get_config, "topics", name)
        except ZkError as e:
            log.info("topic %s: its configs are described as this broker last learned them (%s)", name, e)
            return cached

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
        if self.replicated:  # /config/brokers/<entity>; every broker applies it from its watch
            assert self.cluster is not None and self.cluster.zk is not None
            self.cluster.zk.set_config("brokers", entity or "<default>", configs)
            log.info("altered dynamic broker configs of %s: %s",
                     "the cluster default" if entity == "" else f"broker {entity}", configs)
            return
        registry = self.registry
        assert isinstance(registry, TopicRegistry)
        registry.set_broker_configs(entity, configs)
        self._apply_log_defaults(defaults, per_topic)
        log.info("altered dynamic broker configs of %s: %s",
                 "the cluster default" if entity == "" else f"broker {entity}", configs)

    def _broker_configs_changed(self) -> None:
        """Cluster: the dynamic broker configs in ZooKeeper changed: new topic defaults for every log."""
        try:
            defaults = self._log_defaults_with(self._dynamic_layers())
        except KafkaError as e:
            log.warning("ignoring the dynamic broker configs stored in ZooKeeper: %s", e)
            return
        per_topic = {name: self.topic_log_config(t.configs, defaults) for name, t in self.registry.topics.items()}
        self._apply_log_defaults(defaults, per_topic)
        values = self.broker_values()
        self.leader_throttle.set_rate(int(values["leader.replication.throttled.rate"]))  # type: ignore[call-overload]
        self.follower_throttle.set_rate(int(values["follower.replication.throttled.rate"]))  # type: ignore[call-overload]
        log.info("applied the dynamic broker configs from ZooKeeper")

    def _apply_log_defaults(self, defaults: LogConfig, per_topic: dict[str, LogConfig]) -> None:
        self.log_defaults = defaults
        self.log_manager.default_config = defaults
        for lg in self.log_manager.logs():
            lg.update_config(per_topic.get(lg.topic, defaults))

    # -- client quotas ---------------------------------------------------------------------------

    def client_quota_configs(self) -> dict[Entity, dict[str, str]]:
        """Every client quota entity with its configs: ZooKeeper's (as this broker last read them) in a cluster,
        the metadata file's on a single node."""
        if self.cluster is not None:
            out = {}
            for path, configs in self.cluster.client_quotas.items():
                e = quota_entity_from_path(path)
                if e is not None:
                    out[e] = dict(configs)
            return out
        if isinstance(self.topics, TopicRegistry):
            return {e: dict(c) for e, c in self.topics.client_quotas.items()}
        return {}

    async def alter_client_quota(self, entity: Entity, configs: dict[str, str]) -> None:
        """Replace the configs of a client quota entity (validated by the caller), cluster-wide, and apply them
        here at once (the other brokers apply them from their ZooKeeper notification)."""
        if self.cluster is not None:
            assert self.cluster.zk is not None
            path = quota_entity_path(entity)
            await asyncio.to_thread(self.cluster.zk.set_quota_config, path, configs)
            if configs:
                self.cluster.client_quotas[path] = dict(configs)
            else:
                self.cluster.client_quotas.pop(path, None)
        else:
            registry = self.registry
            assert isinstance(registry, TopicRegistry)
            registry.set_client_quota(entity, configs)
        log.info("altered client quotas of %s: %s", describe_entity(entity),
                 ", ".join(f"{k}={v}" for k, v in sorted(configs.items())) or "none left")
        self._client_quotas_changed()

    def _client_quotas_changed(self) -> None:
        clients: dict[Entity, dict[str, float]] = {}
        ips: dict[str | None, float] = {}
        for e, configs in self.client_quota_configs().items():
            values = {}
            for k, v in configs.items():
                try:
                    values[k] = float(v)
                except ValueError:
                    log.warning("ignoring client quota %s=%r of %s: not a number", k, v, describe_entity(e))
            if e[0][0] == IP:
                if CONNECTION_CREATION_RATE in values:
                    ips[e[0][1]] = values[CONNECTION_CREATION_RATE]
            else:
                clients[e] = values
        self.quotas.update(clients)
        if self.on_ip_quotas is not None:
            self.on_ip_quotas(ips)

    # -- SCRAM credentials -----------------------------------------------------------------------

    async def alter_scram_credentials(self, user: str,
                                      change: Callable[[StoredCredentials], StoredCredentials]) -> None:
        """Replace ``user``'s stored credentials with ``change(stored)`` (``security/credentials.py``:
        ``alteration``; it raises to change nothing), cluster-wide, and take them here at once (the other brokers
        take them from their ZooKeeper notification)."""
        if self.cluster is not None:
            member = self.cluster
            assert member.zk is not None
            member.set_scram_credentials(user, await asyncio.to_thread(member.zk.alter_scram_credentials, user, change))
        else:
            registry = self.registry
            assert isinstance(registry, TopicRegistry)
            registry.set_scram_credentials(user, change(dict(registry.scram_credentials.get(user, {}))))
            self.credentials.replace_user(user, registry.scram_credentials.get(user, {}))
        log.info("altered the SCRAM credentials of user %r: %s", user,
                 ", ".join(self.credentials.credentials(user)) or "none left")

    # -- topics ----------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                     configs: dict[str, str] | None = None, *, validate_only: bool = False,
                     assignment: dict[int, tuple[int, ...]] | None = None) -> Topic | None:
        partitions = self.config.num_partitions if partitions in (None, -1) else partitions
        rf = self.config.default_replication_factor if replication_factor in (None, -1) else replication_factor
        assert partitions is not None and rf is not None
        configs = dict(configs or {})
        if self.replicated:
            return self._create_topic_in_zk(name, partitions, rf, configs, validate_only=validate_only,
                                            assignment=assignment)
        registry = self.registry
        assert isinstance(registry, TopicRegistry)
        registry.check_new(name, partitions, rf)
        self.validate_topic_configs(configs)
        if validate_only:
            return None
        topic = registry.add(name, partitions, configs)
        for p in range(partitions):
            self._add_local_partition(name, p)
        log.info("created topic %s with %d partitions", name, partitions)
        return topic

    def _add_local_partition(self, name: str, partition: int) -> None:
        """Single node: a new partition's log, led here."""
        self.replicas.add_local(self.log_manager.get_or_create_log(name, partition))

    def _create_topic_in_zk(self, name: str, partitions: int, rf: int, configs: dict[str, str], *,
                            validate_only: bool, internal: bool = False,
                            assignment: dict[int, tuple[int, ...]] | None = None) -> Topic | None:
        """Write the topic's assignment to ZooKeeper (as Kafka's AdminZkClient); the controller elects its
        leaders and every broker learns of it through its watches. Blocks for one ZooKeeper round trip."""
        from odradek.cluster.controller.assignment import assign_replicas
        from odradek.cluster.model import TopicAssignment
        from odradek.cluster.zk.client import TopicExistsInZkError

        cluster = self.cluster
        assert cluster is not None and cluster.zk is not None
        cluster.check_new_topic(name, partitions, rf)
        self.validate_topic_configs(configs)
        replicas = assignment if assignment is not None else assign_replicas(cluster.live_broker_racks(),
                                                                              partitions, rf)
        if validate_only:
            return None
        topic_id = uuid.uuid4()
        try:
            cluster.zk.create_topic(TopicAssignment(name, topic_id, dict(replicas)), configs)
        except TopicExistsInZkError as e:  # created meanwhile through another broker
            raise TopicExistsError(f"topic '{name}' already exists") from e
        log.info("created topic %s with %d partitions, replication factor %d: %s", name, partitions, rf,
                 {p: list(r) for p, r in sorted(replicas.items())})
        return Topic(name, topic_id, partitions, configs, internal)

    def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str], *,
                              replication_factor: int, min_isr: int | None = None) -> None:
        """A coordinator's internal topic, on first use. On a single node: at once. In a cluster: written to
        ZooKeeper with the configured replication factor; like Kafka, refused (COORDINATOR_NOT_AVAILABLE, which
        clients retry) while fewer brokers are alive than that factor."""
        if not self.replicated:
            registry = self.registry
            assert isinstance(registry, TopicRegistry)
            registry.add(name, partitions, configs, internal=True)
            for p in range(partitions):
                self._add_local_partition(name, p)
            log.info("created internal topic %s with %d partitions", name, partitions)
            return
        cluster = self.cluster
        assert cluster is not None
        live = len(cluster.brokers)
        if live < replication_factor:
            raise CoordinatorNotAvailableError(
                f"Number of alive brokers '{live}' does not meet the required replication factor "
                f"'{replication_factor}' for the internal topic {name}: start more brokers or lower the "
                "topic's replication factor setting")
        if min_isr is not None:
            configs = {**configs, "min.insync.replicas": str(min_isr)}
        try:
            self._create_topic_in_zk(name, partitions, replication_factor, configs, validate_only=False,
                                     internal=True)
        except TopicExistsError:
            pass  # another broker created it first

    def on_leadership(self, topic: str, partition: int, leader: bool, leader_epoch: int) -> None:
        """The replica manager saw this broker gain or lose the leadership of a partition: the coordinators
        load or unload the partitions of their internal topics."""
        if topic == OFFSETS_TOPIC:
            self.groups.on_leadership(partition, leader, leader_epoch)
        elif topic == TXN_STATE_TOPIC:
            self.txns.on_leadership(partition, leader, leader_epoch)

    async def wait_for_topic(self, name: str, *, partitions: int | None = None, exists: bool = True,
                             timeout_ms: int = 30_000) -> bool:
        """Cluster mode: wait (bounded) until this broker sees the topic with a leader for each partition
        (``exists``) or no longer sees it; True if it happened in time. Single node: at once."""
        if not self.replicated:
            return True
        cluster = self.cluster
        assert cluster is not None
        deadline = asyncio.get_running_loop().time() + max(timeout_ms, 0) / 1000
        while True:
            topic = self.registry.get(name)
            if exists and topic is not None:
                count = partitions if partitions is not None else topic.partitions
                if topic.partitions >= count and all(
                        (s := cluster.states.get((name, p))) is not None and s.online for p in range(count)):
                    return True
            if not exists and topic is None:
                return True
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.02)

    def delete_topic(self, name: str) -> Topic:
        topic = self.registry.get(name)
        if topic is None:
            raise UnknownTopicError(f"topic '{name}' does not exist")
        if topic.internal:
            raise InvalidTopicError(f"topic '{name}' is internal to the broker and cannot be deleted")
        if self.replicated:
            assert self.cluster is not None and self.cluster.zk is not None
            self.cluster.zk.mark_topic_for_deletion(name)  # the controller deletes it
            log.info("marked topic %s for deletion", name)
            return topic
        registry = self.registry
        assert isinstance(registry, TopicRegistry)
        registry.remove(name)
        self._topic_gone(name, topic.partitions)
        return topic

    def add_partitions(self, name: str, count: int, *, validate_only: bool = False,
                       assignment: dict[int, tuple[int, ...]] | None = None) -> None:
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
        if self.replicated:
            self._add_partitions_in_zk(name, count, assignment)
            return
        registry = self.registry
        assert isinstance(registry, TopicRegistry)
        for p in range(topic.partitions, count):
            self._add_local_partition(name, p)
        registry.set_partitions(name, count)
        log.info("topic %s now has %d partitions", name, count)

    def _add_partitions_in_zk(self, name: str, count: int, assignment: dict[int, tuple[int, ...]] | None) -> None:
        from dataclasses import replace

        from odradek.cluster.controller.assignment import add_partitions_assignment

        cluster = self.cluster
        assert cluster is not None and cluster.zk is not None
        current = cluster.assignments[name]
        added = assignment if assignment is not None else add_partitions_assignment(
            current.replicas, count, cluster.live_broker_racks())
        cluster.zk.set_topic_assignment(replace(current, replicas={**current.replicas, **added}))
        log.info("topic %s now has %d partitions", name, count)

    def alter_topic_configs(self, name: str, configs: dict[str, str], *, validate_only: bool = False) -> None:
        topic = self.registry.get(name)
        if topic is None:
            raise UnknownTopicError(f"topic '{name}' does not exist")
        self.validate_topic_configs(configs)
        if validate_only:
            return
        if self.replicated:
            assert self.cluster is not None and self.cluster.zk is not None
            self.cluster.zk.set_config("topics", name, configs)  # every broker applies it from its watch
            log.info("altered configs of topic %s: %s", name, configs)
            return
        registry = self.registry
        assert isinstance(registry, TopicRegistry)
        registry.set_configs(name, configs)
        self._topic_configs_changed(name)
        log.info("altered configs of topic %s: %s", name, configs)

    def get_log(self, topic: str, partition: int) -> Log:
        lg = self.log_manager.get_log(topic, partition)
        if lg is None:
            raise UnknownTopicError(f"this server does not host topic-partition {topic}-{partition}")
        return lg

    # -- produce ---------------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: bytes | bytearray) -> AppendInfo:
        """Append as the partition's leader (the coordinators' own writes; acks=1)."""
        return self.replicas.append(topic, partition, records)[1]

    def append_txn_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                          coordinator_epoch: int) -> Partition:
        """End a producer's transaction in one partition: append its COMMIT or ABORT marker (fenced by
        epoch and coordinator epoch in the log), settle its pending offsets if the partition is one of
        ``__consumer_offsets``, and wake the fetches the moved last stable offset may release."""
        part, _ = self.replicas.append_marker(topic, partition, producer_id, producer_epoch, commit,
                                              coordinator_epoch)
        if topic == OFFSETS_TOPIC:
            self.groups.complete_txn(partition, producer_id, commit)
        return part

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


def _report_publish(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not publish this broker's offline replicas (the next registration will): %s",
                    task.exception())
