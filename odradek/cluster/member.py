"""This broker as a member of a ZooKeeper-coordinated cluster: its session, its registration, and the
metadata image it keeps from ZooKeeper's watches.

Kafka's ZooKeeper mode, with one difference: Kafka's controller pushes LeaderAndIsr and UpdateMetadata
requests to the brokers; here every broker watches the partition states in ZooKeeper itself (the controller
writes them, and only it and a partition's leader ever change them), so the controller needs no RPC
channel. See docs/replication.md.

What it keeps (the image): live brokers (id -> registration with endpoints, rack, broker epoch), the
controller id, every topic's assignment and id, every partition's ``LeaderAndIsr`` with its znode version,
and topic configs.

Invariants:
- Watch callbacks arrive on kazoo's threads and are handed to the event loop (``call_soon_threadsafe``);
  every change of the image happens on the loop. Blocking ZooKeeper calls run in worker threads.
- A partition state older than the one in the image (lower znode version) is ignored.
- The replicas are told a partition's state only while this broker is registered with a live session: a
  broker that lost its session leads and follows nothing until it has registered again (with a new broker
  epoch), then re-applies every state it sees. Before registering again it re-reads every partition state, so
  it never acts on a state from before its session ended (it would lead again, at an old epoch, partitions the
  controller gave away meanwhile).
- Every partition state watch starts with the znode's value at that moment (``_watch_state``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.cluster.metadata import Topic, check_name_free
from odradek.cluster.model import BrokerRegistration, Endpoint, LeaderAndIsr, TopicAssignment, TopicPartition
from odradek.cluster.zk.client import ZkClient, ZkDataError, ZkError
from odradek.cluster.zk.layout import desanitize
from odradek.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    KafkaError,
)

if TYPE_CHECKING:
    from odradek.replica.manager import ReplicaManager

log = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
DEFAULT_ENTITY = "<default>"  # /config/brokers/<default>: the cluster-wide dynamic broker configs
_WATCH_START_ATTEMPTS = 3


class ClusterView:
    """The topic registry's read surface over the image (what handlers ask of ``broker.registry``)."""

    def __init__(self, cluster_id: str) -> None:
        self.cluster_id = cluster_id
        self.topics: dict[str, Topic] = {}
        self.broker_configs: dict[str, dict[str, str]] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def put(self, topic: Topic) -> None:
        old = self.topics.get(topic.name)
        if old is not None:
            self._by_id.pop(old.topic_id, None)
        self.topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def drop(self, name: str) -> None:
        old = self.topics.pop(name, None)
        if old is not None:
            self._by_id.pop(old.topic_id, None)

    def check_name(self, name: str) -> None:
        check_name_free(name, self.topics)


@dataclass(frozen=True, slots=True)
class MemberConfig:
    """The broker settings a member needs (given by the broker, so cluster/ does not import broker/)."""

    broker_id: int
    zookeeper_connect: str
    session_timeout_ms: int
    connection_timeout_ms: int
    endpoints: tuple[Endpoint, ...]  # the advertised listeners, as registered
    rack: str | None
    inter_broker_listener: str  # the listener other brokers reach this one on


class ClusterMember:
    def __init__(self, config: MemberConfig, replicas: ReplicaManager, *,
                 on_topic_gone: Callable[[str, int], None],
                 on_topic_configs: Callable[[str], None]) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.replicas = replicas
        self.on_topic_gone = on_topic_gone
        self.on_topic_configs = on_topic_configs
        self.on_broker_configs: Callable[[], None] | None = None  # dynamic broker configs changed
        self.client_quotas: dict[str, dict[str, str]] = {}  # quota entity path (clients/app) -> its configs
        self.on_client_quotas: Callable[[], None] | None = None  # a client quota entity changed
        # SCRAM credentials stored in ZooKeeper: user -> mechanism -> Kafka's credential string
        self.scram_credentials: dict[str, dict[str, str]] = {}
        self.on_scram_credentials: Callable[[str], None] | None = None  # a user's credentials changed
        self._credential_reads: dict[str, int] = {}  # user -> number of its latest read (older ones are stale)
        self.zk: ZkClient | None = None
        self.view = ClusterView("")  # the cluster id is known once connected
        self.brokers: dict[int, BrokerRegistration] = {}
        self.controller_id: int = -1
        self.deletions: list[str] = []  # topics marked for deletion (/admin/delete_topics), for the controller
        self.assignments: dict[str, TopicAssignment] = {}
        self.states: dict[TopicPartition, LeaderAndIsr] = {}
        self.broker_epoch = -1
        self.registered = False
        self.shutting_down = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watched_topics: set[str] = set()
        self._watched_states: set[TopicPartition] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        # listeners (the controller) told after every image change
        self.listeners: list[Callable[[str], None]] = []
        self._held: list[Callable[[], None]] | None = None  # watch changes waiting for the first load

    # -- lifecycle ------------------------------------------------------------------------------------

    async def start(self, proposed_cluster_id: str | None) -> str:
        """Connect, register, load the image; the cluster id. Raises ``ZkError`` if ZooKeeper is unreachable."""
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        self.zk = ZkClient(cfg.zookeeper_connect, session_timeout_ms=cfg.session_timeout_ms,
                           connection_timeout_ms=cfg.connection_timeout_ms, dispatch=self._dispatch,
                           on_session_expired=lambda: self._dispatch(self._session_lost))
        zk = self.zk
        log.info("connecting to ZooKeeper at %s (session timeout %d ms)", cfg.zookeeper_connect,
                 cfg.session_timeout_ms)
        await asyncio.to_thread(zk.start)
        await asyncio.to_thread(zk.ensure_paths)
        cluster_id = await asyncio.to_thread(zk.get_or_create_cluster_id, proposed_cluster_id or _new_cluster_id())
        self.view.cluster_id = cluster_id
        await asyncio.to_thread(self.read_broker_configs)
        await asyncio.to_thread(self._load_image)
        await self._register()
        return cluster_id

    def _dispatch(self, fn: Callable[[], None]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(fn)

    def _dispatch_watch(self, fn: Callable[[], None]) -> None:
        """A watch's change, applied on the loop: after the image it follows once the first load is installed.

        A change that arrives while ``_load_image`` still reads (the controller elected while a broker starts)
        must not be overwritten by the older value the load read first; it is held and applied after it."""
        def apply() -> None:
            if self._held is not None:
                self._held.append(fn)
            else:
                fn()
        self._dispatch(apply)

    def _load_image(self) -> None:
        """Read everything once and install the watches (worker thread); changes meanwhile wait (see above)."""
        zk = self.zk
        assert zk is not None
        self._held = []
        brokers = zk.live_brokers(watch=lambda m: self._dispatch_watch(lambda: self._on_brokers(m)))
        controller = zk.controller(watch=lambda c: self._dispatch_watch(lambda: self._on_controller(c)))
        names = zk.topic_names(watch=lambda n: self._dispatch_watch(lambda: self._on_topic_names(n)))
        topics = {name: self._read_topic(name) for name in names}
        zk.config_changes(watch=lambda paths: self._dispatch_watch(lambda: self._on_config_changes(paths)))
        deletions = zk.topics_to_delete(watch=lambda names: self._dispatch_watch(lambda: self._on_deletions(names)))

        def install() -> None:
            try:
                self._on_deletions(deletions)
                self._on_brokers(brokers)
                self._on_controller(controller)
                for assignment, configs, states in topics.values():
                    if assignment is not None:
                        self._install_topic(assignment, configs, states)
            finally:
                held, self._held = self._held or [], None
                for fn in held:
                    fn()
        done = asyncio.run_coroutine_threadsafe(_call(install), self._loop) if self._loop else None
        if done is not None:
            done.result()

    def _read_topic(self, name: str) -> tuple[TopicAssignment | None, dict[str, str], dict[int, LeaderAndIsr | None]]:
        """(assignment, configs, states) of a topic, installing watches (worker thread)."""
        zk = self.zk
        assert zk is not None
        first = name not in self._watched_topics
        self._watched_topics.add(name)
        if first:
            assignment = zk.get_topic(name, watch=lambda t: self._dispatch_watch(lambda: self._on_assignment(name, t)))
        else:
            assignment = zk.get_topic(name)
        if assignment is None:
            return None, {}, {}
        configs = zk.get_config("topics", name)
        states: dict[int, LeaderAndIsr | None] = {}
        for p in assignment.replicas:
            tp = (name, p)
            if tp not in self._watched_states:
                self._watched_states.add(tp)
                states[p] = self._watch_state(tp)
            else:
                states[p] = zk.get_partition_state(name, p)
        return assignment, configs, states

    def _watch_state(self, tp: TopicPartition) -> LeaderAndIsr | None:
        """Start the watch on a partition's state and return its current value (worker thread).

        When the state znode is created between the two reads with which kazoo's DataWatch starts (the
        controller creating the states of a topic just announced), the recipe delivers its first value later,
        on its own thread, and the start reports that it did not start; that value would be lost. The watch
        is then started again (the znode exists now, so the new one answers at once); the first one keeps
        running and its later events are duplicates, which ``_on_state`` applies idempotently.
        """
        zk = self.zk
        assert zk is not None
        for attempt in range(_WATCH_START_ATTEMPTS):
            try:
                return zk.get_partition_state(
                    tp[0], tp[1], watch=lambda s: self._dispatch_watch(lambda: self._on_state(tp, s)))
            except ZkDataError:
                raise
            except ZkError as e:
                if attempt + 1 == _WATCH_START_ATTEMPTS or self.zk is not zk:
                    raise
                log.info("%s-%d: starting the watch of its state again (%s)", tp[0], tp[1], e)
        raise AssertionError("unreachable")

    async def _register(self) -> None:
        zk = self.zk
        assert zk is not None
        reg = self.registration()
        self.broker_epoch = await asyncio.to_thread(zk.register_broker, reg)
        self.registered = True
        log.info("registered as broker %d in ZooKeeper (broker epoch %d)", self.broker_id, self.broker_epoch)
        self._reapply_all()

    def registration(self) -> BrokerRegistration:
        cfg = self.config
        return BrokerRegistration(self.broker_id, cfg.endpoints, cfg.rack, shutting_down=self.shutting_down,
                                  offline_replicas=frozenset(self.replicas.log_manager.offline_partitions()))

    async def publish_registration(self) -> None:
        """Rewrite this broker's registration (a controlled shutdown, offline replicas); a lost session
        re-registers with the current one anyway."""
        zk = self.zk
        if zk is None or not self.registered:
            return
        await asyncio.to_thread(zk.update_broker, self.registration())

    def offline_replicas(self) -> dict[TopicPartition, frozenset[int]]:
        """For each partition with a replica in a failed log directory: the brokers where it is offline."""
        out: dict[TopicPartition, set[int]] = {}
        for b, reg in self.brokers.items():
            for tp in reg.offline_replicas:
                out.setdefault(tp, set()).add(b)
        return {tp: frozenset(bs) for tp, bs in out.items()}

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        zk, self.zk = self.zk, None
        self.registered = False
        if zk is not None:
            await asyncio.to_thread(zk.close)

    # -- watch events (on the loop) ---------------------------------------------------------------------

    def _changed(self, what: str) -> None:
        for listener in self.listeners:
            listener(what)

    def _on_deletions(self, names: list[str]) -> None:
        self.deletions = list(names)
        self._changed("deletions")

    def _on_brokers(self, brokers: dict[int, BrokerRegistration]) -> None:
        self.brokers = dict(brokers)
        self._changed("brokers")

    def _on_controller(self, controller: int | None) -> None:
        self.controller_id = controller if controller is not None else -1
        self._changed("controller")

    def _on_topic_names(self, names: list[str]) -> None:
        current = set(self.assignments)
        for name in sorted(set(names) - current):
            self._spawn(self._add_topic(name))
        for name in sorted(current - set(names)):
            self._remove_topic(name)
        self._changed("topics")

    async def _add_topic(self, name: str) -> None:
        assignment, configs, states = await asyncio.to_thread(self._read_topic, name)
        if assignment is not None:
            self._install_topic(assignment, configs, states)
            self._changed("topics")

    def _install_topic(self, assignment: TopicAssignment, configs: dict[str, str],
                       states: dict[int, LeaderAndIsr | None]) -> None:
        old = self.assignments.get(assignment.name)
        if old is not None and old.zk_version > assignment.zk_version:
            return
        self.assignments[assignment.name] = assignment
        assert self.view is not None
        self.view.put(Topic(assignment.name, assignment.topic_id, assignment.partition_count, dict(configs),
                            assignment.name in INTERNAL_TOPICS))
        self.on_topic_configs(assignment.name)
        for p, state in states.items():
            if state is not None:
                self._on_state((assignment.name, p), state)
        # states whose watch event came before the assignment did (the controller is quick) were kept
        # but could not be applied without it: apply them now
        for p in assignment.replicas:
            if states.get(p) is None and (assignment.name, p) in self.states:
                self._apply((assignment.name, p))

    def _on_assignment(self, name: str, assignment: TopicAssignment | None) -> None:
        if assignment is None:
            return  # deleted: the topic-names watch removes it
        old = self.assignments.get(name)
        if old is not None and old.zk_version >= assignment.zk_version:
            return
        if old is not None and assignment.partition_count > old.partition_count:
            self._spawn(self._add_topic(name))  # new partitions: their states need watches
            return
        self.assignments[name] = assignment
        for tp in [tp for tp in self.states if tp[0] == name]:
            self._apply(tp)
        self._changed("topics")

    def _remove_topic(self, name: str) -> None:
        assignment = self.assignments.pop(name, None)
        if self.view is not None:
            self.view.drop(name)
        self._watched_topics.discard(name)
        count = assignment.partition_count if assignment is not None else 0
        for tp in [tp for tp in self.states if tp[0] == name]:
            self.states.pop(tp, None)
            self._watched_states.discard(tp)
        self.on_topic_gone(name, count)

    def _on_state(self, tp: TopicPartition, state: LeaderAndIsr | None) -> None:
        if state is None:
            return
        old = self.states.get(tp)
        if old is not None and old.zk_version > state.zk_version:
            return
        self.states[tp] = state
        self._apply(tp)
        self._changed("states")

    def _apply(self, tp: TopicPartition) -> None:
        if not self.registered:
            return
        state = self.states.get(tp)
        assignment = self.assignments.get(tp[0])
        if state is None or assignment is None or tp[1] not in assignment.replicas:
            return
        try:
            self.replicas.apply_state(tp[0], tp[1], state, assignment.replicas[tp[1]])
        except KafkaError as e:
            log.error("cannot apply the state of %s-%d: %s", tp[0], tp[1], e)

    def _reapply_all(self) -> None:
        for tp in list(self.states):
            self._apply(tp)

    def _on_config_changes(self, paths: list[str]) -> None:
        for path in paths:
            kind, _, name = path.partition("/")
            if kind == "topics" and name in self.assignments:
                self._spawn(self._reload_topic_config(name))
            elif kind == "brokers" and name in (DEFAULT_ENTITY, str(self.broker_id)):
                self._spawn(self._reload_broker_config(name))
            elif kind in ("users", "clients", "ips"):
                self._spawn(self._reload_client_quota(path))
                user = desanitize(name) if kind == "users" and "/" not in name else None
                if user:
                    self._spawn(self._reload_scram_credentials(user))

    def read_broker_configs(self) -> None:
        """The cluster default and this broker's dynamic configs, and every client quota (worker thread; at
        start)."""
        assert self.zk is not None
        for name in (DEFAULT_ENTITY, str(self.broker_id)):
            self._set_broker_configs(name, self.zk.get_config("brokers", name))
        self.client_quotas = self.zk.get_quota_configs()
        self.scram_credentials = self.zk.get_all_scram_credentials()

    async def _reload_client_quota(self, entity_path: str) -> None:
        assert self.zk is not None
        configs = await asyncio.to_thread(self.zk.get_quota_config, entity_path)
        if configs:
            self.client_quotas[entity_path] = configs
        else:
            self.client_quotas.pop(entity_path, None)
        if self.on_client_quotas is not None:
            self.on_client_quotas()

    async def _reload_scram_credentials(self, user: str) -> None:
        """Re-read a user's credentials after a change notification; a read that finishes after a later one
        started is dropped, so an older value never replaces a newer one."""
        assert self.zk is not None
        number = self._credential_reads[user] = self._credential_reads.get(user, 0) + 1
        credentials = await asyncio.to_thread(self.zk.get_scram_credentials, user)
        if self._credential_reads.get(user) != number:
            return
        self.set_scram_credentials(user, credentials)

    def set_scram_credentials(self, user: str, credentials: dict[str, str]) -> None:
        """Take a user's credentials as now stored (read back, or just written by this broker) and tell the owner."""
        if credentials:
            self.scram_credentials[user] = dict(credentials)
        else:
            self.scram_credentials.pop(user, None)
        if self.on_scram_credentials is not None:
            self.on_scram_credentials(user)

    def _set_broker_configs(self, name: str, configs: dict[str, str]) -> None:
        entity = "" if name == DEFAULT_ENTITY else name
        if configs:
            self.view.broker_configs[entity] = dict(configs)
        else:
            self.view.broker_configs.pop(entity, None)

    async def _reload_broker_config(self, name: str) -> None:
        assert self.zk is not None
        configs = await asyncio.to_thread(self.zk.get_config, "brokers", name)
        self._set_broker_configs(name, configs)
        if self.on_broker_configs is not None:
            self.on_broker_configs()

    async def _reload_topic_config(self, name: str) -> None:
        assert self.zk is not None
        configs = await asyncio.to_thread(self.zk.get_config, "topics", name)
        topic = self.view.get(name) if self.view is not None else None
        if topic is not None:
            topic.configs = dict(configs)
            self.on_topic_configs(name)

    def _session_lost(self) -> None:
        """The ZooKeeper session expired: stop leading and following until registered again."""
        if not self.registered:
            return
        log.warning("lost the ZooKeeper session: this broker stops leading and following every partition "
                    "until it has registered again")
        self.registered = False
        self.replicas.stop_all("lost the ZooKeeper session")
        self._spawn(self._reregister())

    async def _reregister(self) -> None:
        delay = 0.1
        while self.zk is not None and not self.registered:
            try:
                # The image may be stale: the controller moved leaderships while this broker had no session,
                # and the watches bring those changes back only when they get round to it. Read every state
                # first, so that registering re-applies current states and never leads at an old epoch.
                watched = sorted(self._watched_states)
                for tp, state in (await asyncio.to_thread(self._read_states, watched)).items():
                    self._on_state(tp, state)
                await self._register()
                return
            except Exception as e:
                log.warning("registering again failed (%s); retrying in %.1f s", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _read_states(self, partitions: list[TopicPartition]) -> dict[TopicPartition, LeaderAndIsr | None]:
        """The current state of these partitions, read without watches (worker thread)."""
        zk = self.zk
        if zk is None:
            return {}
        return {tp: zk.get_partition_state(*tp) for tp in partitions}

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("cluster metadata update failed: %s", task.exception())

    # -- queries --------------------------------------------------------------------------------------

    def live_broker_racks(self) -> dict[int, str | None]:
        return {b.broker_id: b.rack for b in self.brokers.values()}

    def address_of(self, broker_id: int) -> tuple[str, int] | None:
        reg = self.brokers.get(broker_id)
        if reg is None:
            return None
        e = reg.address(self.config.inter_broker_listener)
        return e.host, e.port

    def topic_id(self, name: str) -> uuid.UUID | None:
        a = self.assignments.get(name)
        return a.topic_id if a is not None else None

    # -- writes (worker threads) -----------------------------------------------------------------------

    def check_new_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        assert self.view is not None
        self.view.check_name(name)
        if partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, got {partitions}")
        if replication_factor < 1:
            raise InvalidReplicationFactorError(f"replication factor must be at least 1, got {replication_factor}")
        live = len(self.brokers)
        if replication_factor > live:
            raise InvalidReplicationFactorError(
                f"Replication factor: {replication_factor} larger than available brokers: {live}.")

    async def update_isr(self, tp: TopicPartition, state: LeaderAndIsr) -> LeaderAndIsr | None:
        """A leader's ISR change, written conditionally (None if a newer state won)."""
        if self.zk is None or not self.registered:
            return None
        written = await asyncio.to_thread(self.zk.update_isr, tp[0], tp[1], state)
        if written is not None:
            self._on_state(tp, written)
        return written


async def _call(fn: Callable[[], None]) -> None:
    fn()


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


__all__ = ["INTERNAL_TOPICS", "ClusterMember", "ClusterView", "KafkaError"]
