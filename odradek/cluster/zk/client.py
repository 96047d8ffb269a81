"""A blocking ZooKeeper client for Kafka's ZooKeeper layout, on kazoo.

The broker calls these methods from worker threads, never from its event loop: each one waits for
ZooKeeper. Reads and writes follow ``layout.py``; the rules are Kafka's ``KafkaZkClient``'s.

Invariants:
- Watch callbacks, ``on_session_expired`` and ``on_connection_change`` are never run on kazoo's threads.
  kazoo's callbacks only decode (pure, fast) and put work on this client's own event thread
  (``odradek-zk-events``), which hands each user callback to ``dispatch`` in the order the changes
  happened. The broker passes ``loop.call_soon_threadsafe``; by default the callback runs on the event
  thread itself, where it may call this client's blocking methods.
- Watches keep firing until ``close()``: they are kazoo ``DataWatch``/``ChildrenWatch`` recipes, which
  re-arm themselves and survive reconnections and a new session. A watch's first value is the method's
  return value; the callback sees only later changes.
- Writes that the controller makes (partition states, topic deletion) are fenced: they run in one
  ZooKeeper multi-op with ``check(/controller_epoch, fence.epoch_zk_version)``, so a deposed controller's
  writes fail as a whole with ``ControllerMovedError``.
- Conditional writes are retried across connection losses; when a retry meets ``BadVersion`` or
  ``NodeExists`` for a write that did land before the connection dropped, the stored value is re-read and
  accepted if it is the one we wrote (Kafka's ``checkLeaderAndIsrZkData``).
- After a session expires kazoo opens a new one by itself; ephemeral nodes (the broker registration,
  ``/controller``) are gone then, and ``on_session_expired`` is called once the new session is up so the
  owner can re-create them (Kafka's ``afterInitializingSession``).
- A chroot in the connect string (``127.0.0.1:2181/odradek``) is created on ``start()`` if missing.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError as KazooBadVersionError,
)
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, KeeperState, ZnodeStat
from kazoo.retry import RetryFailedError

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.cluster.model import BrokerRegistration, LeaderAndIsr, TopicAssignment, TopicPartition
from odradek.cluster.zk import layout
from odradek.cluster.zk.layout import ProducerIdBlock, ZkDataError, ZkError

__all__ = [
    "BadVersionError",
    "BrokerIdInUseError",
    "ControllerFence",
    "ControllerMovedError",
    "TopicExistsInZkError",
    "ZkClient",
    "ZkDataError",
    "ZkError",
    "ZkUnavailableError",
]

_log = logging.getLogger(__name__)

CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # notifications older than this are purged once read (Kafka's changeExpirationMs)

T = TypeVar("T")
Dispatch = Callable[[Callable[[], None]], None]

# on_connection_change receives one of these.
CONNECTED = "connected"  # connected (again), same or new session
SUSPENDED = "suspended"  # connection lost; the session may still be alive
EXPIRED = "expired"  # the session is gone; kazoo is opening a new one
CLOSED = "closed"  # close() was called

_MAX_CONFLICT_ROUNDS = 100  # conditional-update loops under contention (producer ids, controller epoch)
_STOP = object()


class ZkUnavailableError(ZkError):
    """ZooKeeper did not answer in time."""


class BrokerIdInUseError(ZkError):
    """``/brokers/ids/<id>`` belongs to another session."""


class ControllerMovedError(ZkError):
    """A fenced write failed because ``/controller_epoch`` moved on: another broker is the controller."""


class BadVersionError(ZkError):
    """A conditional write met another version than the one it was based on (or the znode is gone)."""


class TopicExistsInZkError(ZkError):
    """The topic exists already (or is still being deleted)."""


@dataclass(frozen=True, slots=True)
class ControllerFence:
    """What a controller's writes are conditional on: ``/controller_epoch`` still has this znode version."""

    controller_epoch: int
    epoch_zk_version: int


class ZkClient:
    """One ZooKeeper session, with Kafka's znodes as typed reads, writes and watches."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int | None = None,
        dispatch: Dispatch | None = None,
        on_session_expired: Callable[[], None] | None = None,
        on_connection_change: Callable[[str], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.connect = connect
        self.hosts, self.chroot = _split_connect(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms if connection_timeout_ms is not None else session_timeout_ms
        self._dispatch: Dispatch = dispatch if dispatch is not None else _call
        self._on_session_expired = on_session_expired
        self._on_connection_change = on_connection_change
        self._clock = clock
        self.change_expiration_ms = CHANGE_EXPIRATION_MS
        # A request waits for a reconnection at most this long before it fails with ZkUnavailableError.
        self._retry_deadline_s = max(self.session_timeout_ms, self.connection_timeout_ms) / 1000
        self._kz = KazooClient(
            hosts=connect,
            timeout=session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "delay": 0.05, "backoff": 2, "max_delay": 1.0},
            command_retry={
                "max_tries": -1,
                "delay": 0.05,
                "backoff": 2,
                "max_delay": 1.0,
                "deadline": self._retry_deadline_s,
            },
        )
        self._connected = threading.Event()  # set while kazoo is connected; requests wait for it (bounded)
        self._events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._event_thread: threading.Thread | None = None
        self._closing = False
        self._closed = False
        self._expired = False
        self._started = False

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Connect (creating the chroot if missing); ZkUnavailableError if that takes longer than the timeout."""
        if self._started:
            return
        self._start_event_thread()
        deadline = time.monotonic() + self.connection_timeout_ms / 1000
        if self.chroot:
            self._create_chroot(deadline)
        self._kz.add_listener(self._on_state)
        try:
            self._kz.start(timeout=max(deadline - time.monotonic(), 0.001))
        except KazooTimeoutError:
            self._stop_event_thread()
            raise self._unreachable() from None
        self._started = True

    def _create_chroot(self, deadline: float) -> None:
        boot = KazooClient(hosts=self.hosts, timeout=self.session_timeout_ms / 1000)
        try:
            boot.start(timeout=max(deadline - time.monotonic(), 0.001))
        except KazooTimeoutError:
            self._stop_event_thread()
            raise self._unreachable() from None
        try:
            boot.ensure_path_async(self.chroot).get(timeout=max(deadline - time.monotonic(), 0.001))
        except (KazooTimeoutError, ConnectionLoss):
            self._stop_event_thread()
            raise self._unreachable() from None
        finally:
            boot.stop()
            boot.close()

    def _unreachable(self) -> ZkUnavailableError:
        return ZkUnavailableError(
            f"cannot reach ZooKeeper at {self.hosts} within {self.connection_timeout_ms} ms: is it running? "
            "(check zookeeper.connect and zookeeper.connection.timeout.ms)"
        )

    def close(self) -> None:
        """End the session (its ephemeral nodes go at once) and stop every watch; idempotent."""
        if self._closed:
            return
        self._closing = True
        self._closed = True
        try:
            self._kz.stop()
        finally:
            self._kz.close()
            self._stop_event_thread()

    def __enter__(self) -> ZkClient:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def session_id(self) -> int | None:
        client_id = self._kz.client_id
        return int(client_id[0]) if client_id else None

    @property
    def connected(self) -> bool:
        return bool(self._kz.connected)

    # -- the event thread ----------------------------------------------------------------------------------

    def _start_event_thread(self) -> None:
        if self._event_thread is None:
            self._event_thread = threading.Thread(target=self._run_events, name="odradek-zk-events", daemon=True)
            self._event_thread.start()

    def _stop_event_thread(self) -> None:
        thread = self._event_thread
        if thread is None:
            return
        self._event_thread = None
        self._events.put(_STOP)
        if thread is not threading.current_thread():
            thread.join(timeout=10.0)

    def _run_events(self) -> None:
        while True:
            task = self._events.get()
            if task is _STOP:
                return
            try:
                task()
            except Exception:
                _log.exception("ZooKeeper event handler failed")

    def _deliver(self, callback: Callable[..., None], *args: Any) -> None:
        """Hand ``callback(*args)`` to ``dispatch`` from the event thread (callable from any thread)."""
        self._events.put(lambda: self._dispatch(lambda: callback(*args)))

    def _in_event_thread(self, task: Callable[[], None]) -> None:
        self._events.put(task)

    def _on_state(self, state: str) -> None:
        # kazoo's connection thread: never block here.
        expired_now = False
        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
        if state == KazooState.LOST:
            if self._closing or self._kz.client_state != KeeperState.EXPIRED_SESSION:
                name = CLOSED
            else:
                name = EXPIRED
                self._expired = True
        elif state == KazooState.SUSPENDED:
            name = SUSPENDED
        else:
            name = CONNECTED
            if self._expired:
                self._expired = False
                expired_now = True
        if self._on_connection_change is not None:
            self._deliver(self._on_connection_change, name)
        if expired_now and self._on_session_expired is not None:
            self._deliver(self._on_session_expired)

    # -- plumbing ------------------------------------------------------------------------------------------

    def _retry(self, func_async: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a kazoo ``*_async`` call, retried across connection losses, for at most the retry deadline.

        Requests are sent only while connected: kazoo would otherwise queue them until a reconnection that
        may never come. kazoo's errors become ours (ZkUnavailableError once the deadline has passed).
        """
        self._check_open()
        deadline = time.monotonic() + self._retry_deadline_s
        delay = 0.02
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._connected.wait(remaining):
                raise self._no_answer()
            try:
                return func_async(*args, **kwargs).get(timeout=max(deadline - time.monotonic(), 0.001))
            except ConnectionClosedError:
                raise self._not_open() from None
            except KazooTimeoutError:
                raise self._no_answer() from None
            except (ConnectionLoss, OperationTimeoutError, SessionExpiredError):
                time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
                delay = min(delay * 2, 0.5)

    def _check_open(self) -> None:
        if self._closed or not self._started:
            raise self._not_open()

    def _not_open(self) -> ZkError:
        state = "closed" if self._closed else "not started"
        return ZkError(f"the ZooKeeper client for {self.connect} is {state}")

    def _no_answer(self) -> ZkUnavailableError:
        return ZkUnavailableError(
            f"ZooKeeper at {self.connect} did not answer within {self._retry_deadline_s * 1000:.0f} ms: "
            "is it running and reachable?"
        )

    def _get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            return self._retry(self._kz.get_async, path)
        except NoNodeError:
            return None

    def _children(self, path: str) -> list[str]:
        try:
            return self._retry(self._kz.get_children_async, path)
        except NoNodeError:
            return []

    def _ensure_path(self, path: str) -> None:
        self._retry(self._kz.ensure_path_async, path)

    def _set_or_create(self, path: str, data: bytes) -> None:
        for _ in range(_MAX_CONFLICT_ROUNDS):
            try:
                self._retry(self._kz.set_async, path, data)
                return
            except NoNodeError:
                pass
            try:
                self._retry(self._kz.create_async, path, data, makepath=True)
                return
            except NodeExistsError:
                continue
        raise ZkError(f"could not write {path}: it keeps appearing and disappearing")

    def _commit(self, build: Callable[[Any], None]) -> list[Any]:
        """Run a multi-op built by ``build(transaction)``, retried as a whole; returns kazoo's per-op results."""

        def attempt() -> Any:
            transaction = self._kz.transaction()
            build(transaction)
            return transaction.commit_async()

        return self._retry(attempt)

    def _data_watch(
        self, path: str, decode: Callable[[bytes | None, ZnodeStat | None], T], callback: Callable[[T], None]
    ) -> T:
        """Start a DataWatch on ``path``; return its first value and pass later ones to ``callback``."""
        first = _FirstValue[T]()

        def on_data(data: bytes | None, stat: ZnodeStat | None, event: object = None) -> bool | None:
            if self._closed or first.dead:
                return False
            try:
                value = decode(data, stat)
            except ZkDataError as exc:
                if not first.set:
                    first.fail(exc)
                    return False
                _log.error("ignoring a change of %s: %s", path, exc)
                return None
            if not first.set:
                first.deliver(value)
            else:
                self._deliver(callback, value)
            return None

        self._run_recipe(lambda: self._kz.DataWatch(path, on_data))
        return first.result(path, self._retry_deadline_s)

    def _children_watch(self, path: str, callback: Callable[[list[str]], None]) -> list[str]:
        """Start a ChildrenWatch on ``path`` (created if missing); first list returned, later ones to ``callback``."""
        self._ensure_path(path)
        first = _FirstValue[list[str]]()

        def on_children(children: list[str]) -> bool | None:
            if self._closed:
                return False
            names = sorted(children)
            if not first.set:
                first.deliver(names)
            else:
                self._deliver(callback, names)
            return None

        self._run_recipe(lambda: self._kz.ChildrenWatch(path, on_children))
        return first.result(path, self._retry_deadline_s)

    def _run_recipe(self, make: Callable[[], object]) -> None:
        """Start a kazoo watch recipe. Its first read is synchronous and, once sent, waits for a reconnection
        for as long as it takes (kazoo's design); we only wait, bounded, for a connection before starting it."""
        self._check_open()
        if not self._connected.wait(self._retry_deadline_s):
            raise self._no_answer()
        try:
            make()
        except ConnectionClosedError:
            raise self._not_open() from None
        except (RetryFailedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError):
            raise self._no_answer() from None

    # -- cluster -------------------------------------------------------------------------------------------

    def ensure_paths(self) -> None:
        """Create Kafka's persistent paths (``layout.PERSISTENT_PATHS``) that are missing."""
        for path in layout.PERSISTENT_PATHS:
            self._ensure_path(path)

    def get_or_create_cluster_id(self, proposed: str) -> str:
        """The cluster id stored in ``/cluster/id``; ``proposed`` becomes it if there is none yet."""
        existing = self._get(layout.CLUSTER_ID_PATH)
        if existing is not None:
            return layout.decode_cluster_id(existing[0])
        try:
            self._retry(
                self._kz.create_async, layout.CLUSTER_ID_PATH, layout.encode_cluster_id(proposed), makepath=True
            )
            return proposed
        except NodeExistsError:
            got = self._get(layout.CLUSTER_ID_PATH)
            if got is None:
                raise ZkError(f"{layout.CLUSTER_ID_PATH} existed and vanished: was the chroot deleted?") from None
            return layout.decode_cluster_id(got[0])

    # -- brokers -------------------------------------------------------------------------------------------

    def register_broker(self, reg: BrokerRegistration) -> int:
        """Create ephemeral ``/brokers/ids/<id>``; returns the broker epoch (the znode's czxid).

        Raises BrokerIdInUseError if another session holds that id (another broker runs with this
        broker.id, or this broker's previous session has not expired yet).
        """
        path = layout.broker_path(reg.broker_id)
        data = layout.encode_broker(reg, self._clock.milliseconds())
        for _ in range(_MAX_CONFLICT_ROUNDS):
            try:
                _, stat = self._retry(
                    self._kz.create_async, path, data, ephemeral=True, makepath=True, include_data=True
                )
                return int(stat.czxid)
            except NodeExistsError:
                pass
            got = self._get(path)
            if got is None:
                continue  # the other session's node just expired: try again
            stat = got[1]
            if stat.ephemeralOwner != self.session_id:
                raise BrokerIdInUseError(
                    f"broker id {reg.broker_id} is registered in ZooKeeper by another session "
                    f"(0x{stat.ephemeralOwner:x}, registered at {stat.ctime} ms): another broker runs with "
                    f"broker.id={reg.broker_id}, or this broker's previous session has not expired yet "
                    f"(wait for the session timeout, {self.session_timeout_ms} ms, and start again)"
                )
            # Ours: created by an attempt whose answer a connection loss swallowed, or registered before.
            if got[0] != data:
                self._retry(self._kz.set_async, path, data, version=stat.version)
            return int(stat.czxid)
        raise ZkError(f"could not register broker {reg.broker_id}: {path} keeps changing owner")

    def update_broker(self, reg: BrokerRegistration) -> None:
        """Rewrite this session's own registration (e.g. ``shutting_down``); the epoch stays."""
        path = layout.broker_path(reg.broker_id)
        got = self._get(path)
        if got is None:
            raise ZkError(f"broker {reg.broker_id} is not registered ({path} is missing): register it again")
        if got[1].ephemeralOwner != self.session_id:
            raise BrokerIdInUseError(f"{path} belongs to another session: this client cannot update it")
        try:
            self._retry(
                self._kz.set_async, path, layout.encode_broker(reg, self._clock.milliseconds()), version=got[1].version
            )
        except (KazooBadVersionError, NoNodeError):
            raise ZkError(f"{path} changed while updating it: its session may have expired") from None

    def live_brokers(
        self, watch: Callable[[dict[int, BrokerRegistration]], None] | None = None
    ) -> dict[int, BrokerRegistration]:
        """The registered brokers by id, each with ``epoch`` = its znode's czxid.

        With ``watch``, it is called with the new map whenever a broker registers, goes away, re-registers
        (new epoch) or rewrites its registration, until ``close()``.
        """
        if watch is not None:
            return _BrokerSetWatch(self, watch).start()
        brokers: dict[int, BrokerRegistration] = {}
        for child in self._children(layout.BROKER_IDS_PATH):
            broker_id = _broker_id(child)
            if broker_id is None:
                continue
            got = self._get(layout.broker_path(broker_id))
            if got is not None:
                brokers[broker_id] = layout.decode_broker(broker_id, got[0], epoch=int(got[1].czxid))
        return dict(sorted(brokers.items()))

    # -- controller ----------------------------------------------------------------------------------------

    def elect_controller(self, broker_id: int) -> tuple[int, int] | None:
        """Try to become the controller: create ephemeral ``/controller`` and bump ``/controller_epoch``.

        Both happen in one multi-op conditional on the epoch's znode version (Kafka's
        ``registerControllerAndIncrementControllerEpoch``). ``/controller_epoch`` is created with 0 if
        missing, so the first controller has epoch 1. Returns ``(controller_epoch, epoch_zk_version)``,
        or None if another broker is the controller.
        """
        for _ in range(_MAX_CONFLICT_ROUNDS):
            got = self._get(layout.CONTROLLER_EPOCH_PATH)
            if got is None:
                try:
                    self._retry(self._kz.create_async, layout.CONTROLLER_EPOCH_PATH, layout.encode_controller_epoch(0))
                except NodeExistsError:
                    pass
                continue
            epoch = layout.decode_controller_epoch(got[0])
            epoch_version = got[1].version
            registration = layout.encode_controller(broker_id, self._clock.milliseconds())

            bumped = layout.encode_controller_epoch(epoch + 1)

            def build(
                t: Any, registration: bytes = registration, bumped: bytes = bumped, version: int = epoch_version
            ) -> None:
                t.create(layout.CONTROLLER_PATH, registration, ephemeral=True)
                t.set_data(layout.CONTROLLER_EPOCH_PATH, bumped, version=version)

            results = self._commit(build)
            if not _failed(results):
                return epoch + 1, int(results[1].version)
            if isinstance(results[0], NodeExistsError):
                return self._controller_if_ours(broker_id)
            # /controller_epoch moved (another broker won and lost in between): read again
        raise ZkError("could not elect a controller: /controller_epoch keeps changing")

    def _controller_if_ours(self, broker_id: int) -> tuple[int, int] | None:
        got = self._get(layout.CONTROLLER_PATH)
        if got is None or got[1].ephemeralOwner != self.session_id:
            return None
        if layout.decode_controller(got[0]) != broker_id:
            return None
        epoch = self._get(layout.CONTROLLER_EPOCH_PATH)
        if epoch is None:
            return None
        return layout.decode_controller_epoch(epoch[0]), int(epoch[1].version)

    def controller(self, watch: Callable[[int | None], None] | None = None) -> int | None:
        """The controller's broker id, None if there is none; ``watch`` gets every change after this one."""

        def decode(data: bytes | None, stat: ZnodeStat | None) -> int | None:
            return None if stat is None else layout.decode_controller(data)

        if watch is not None:
            return self._data_watch(layout.CONTROLLER_PATH, decode, watch)
        got = self._get(layout.CONTROLLER_PATH)
        return None if got is None else layout.decode_controller(got[0])

    def controller_epoch(self) -> tuple[int, int] | None:
        """``(controller_epoch, epoch_zk_version)`` as stored, None before the first election."""
        got = self._get(layout.CONTROLLER_EPOCH_PATH)
        return None if got is None else (layout.decode_controller_epoch(got[0]), int(got[1].version))

    def resign_controller(self, broker_id: int) -> None:
        """Delete ``/controller`` if this session holds it for ``broker_id``."""
        got = self._get(layout.CONTROLLER_PATH)
        if got is None or got[1].ephemeralOwner != self.session_id:
            return
        if layout.decode_controller(got[0]) != broker_id:
            return
        try:
            self._retry(self._kz.delete_async, layout.CONTROLLER_PATH, version=got[1].version)
        except (NoNodeError, KazooBadVersionError):
            pass

    # -- topics --------------------------------------------------------------------------------------------

    def create_topic(self, t: TopicAssignment, configs: dict[str, str]) -> None:
        """Write ``/config/topics/<t>`` then ``/brokers/topics/<t>``, as Kafka's ``AdminZkClient`` does.

        The controller sees the new topic through its topic watch. TopicExistsInZkError if the topic
        exists or is still marked for deletion. (Name collisions such as ``a.b``/``a_b`` are the caller's check.)
        """
        if self._retry(self._kz.exists_async, layout.delete_topic_path(t.name)) is not None:
            raise TopicExistsInZkError(f"topic {t.name!r} is marked for deletion: wait until it is gone")
        if self._retry(self._kz.exists_async, layout.topic_path(t.name)) is not None:
            raise TopicExistsInZkError(f"topic {t.name!r} already exists")
        self._set_or_create(layout.config_path("topics", t.name), layout.encode_config(configs))
        try:
            self._retry(self._kz.create_async, layout.topic_path(t.name), layout.encode_topic(t), makepath=True)
        except NodeExistsError:
            raise TopicExistsInZkError(f"topic {t.name!r} already exists") from None

    def topic_names(self, watch: Callable[[list[str]], None] | None = None) -> list[str]:
        """The topics under ``/brokers/topics``, sorted; ``watch`` gets the new list on every change."""
        if watch is not None:
            return self._children_watch(layout.TOPICS_PATH, watch)
        return sorted(self._children(layout.TOPICS_PATH))

    def get_topic(
        self, name: str, watch: Callable[[TopicAssignment | None], None] | None = None
    ) -> TopicAssignment | None:
        """The topic's assignment (``zk_version`` set), None if missing; ``watch`` gets every later change."""

        def decode(data: bytes | None, stat: ZnodeStat | None) -> TopicAssignment | None:
            return None if stat is None else layout.decode_topic(name, data, int(stat.version))

        if watch is not None:
            return self._data_watch(layout.topic_path(name), decode, watch)
        got = self._get(layout.topic_path(name))
        return None if got is None else decode(*got)

    def set_topic_assignment(self, t: TopicAssignment) -> TopicAssignment:
        """Rewrite ``/brokers/topics/<t>`` conditional on ``t.zk_version``; BadVersionError if it moved."""
        path = layout.topic_path(t.name)
        try:
            stat = self._retry(self._kz.set_async, path, layout.encode_topic(t), version=t.zk_version)
        except KazooBadVersionError:
            raise BadVersionError(f"{path} is no longer at version {t.zk_version}: read it again") from None
        except NoNodeError:
            raise BadVersionError(f"{path} does not exist (the topic was deleted)") from None
        return replace(t, zk_version=int(stat.version))

    def write_topic_assignments(
        self, assignments: list[TopicAssignment], fence: ControllerFence
    ) -> list[TopicAssignment | None]:
        """The controller's rewrite of topic znodes (reassignments), each conditional on its ``zk_version``, in
        one fenced multi-op. Each result is the written assignment (new ``zk_version``), or None when its znode
        moved or is gone (re-read it). ControllerMovedError if another controller took over."""
        pending = {t.name: t for t in assignments}
        out: dict[str, TopicAssignment | None] = {}
        while pending:
            names = list(pending)

            def build(t: Any, names: list[str] = names) -> None:
                t.check(layout.CONTROLLER_EPOCH_PATH, fence.epoch_zk_version)
                for name in names:
                    a = pending[name]
                    t.set_data(layout.topic_path(name), layout.encode_topic(a), version=a.zk_version)

            results = self._commit(build)
            if not _failed(results):
                for name, stat in zip(names, results[1:], strict=True):
                    out[name] = replace(pending[name], zk_version=int(stat.version))
                break
            _raise_if_fenced(results, fence)
            name = names[_first_failure(results) - 1]
            pending.pop(name)
            out[name] = None
        return [out[t.name] for t in assignments]

    def mark_topic_for_deletion(self, name: str) -> None:
        """Create ``/admin/delete_topics/<t>`` (the controller's cue to delete it); idempotent."""
        try:
            self._retry(self._kz.create_async, layout.delete_topic_path(name), b"", makepath=True)
        except NodeExistsError:
            pass

    def topics_to_delete(self, watch: Callable[[list[str]], None] | None = None) -> list[str]:
        """Topics marked for deletion, sorted; ``watch`` gets the new list on every change."""
        if watch is not None:
            return self._children_watch(layout.DELETE_TOPICS_PATH, watch)
        return sorted(self._children(layout.DELETE_TOPICS_PATH))

    def delete_topic_znodes(self, name: str, fence: ControllerFence) -> None:
        """Delete ``/brokers/topics/<t>`` (recursively), ``/config/topics/<t>`` and ``/admin/delete_topics/<t>``.

        One fenced multi-op: ControllerMovedError if another controller took over.
        """
        for _ in range(_MAX_CONFLICT_ROUNDS):
            doomed = self._subtree(layout.topic_path(name))
            for path in (layout.config_path("topics", name), layout.delete_topic_path(name)):
                if self._retry(self._kz.exists_async, path) is not None:
                    doomed.append(path)

            def build(t: Any, doomed: list[str] = doomed) -> None:
                t.check(layout.CONTROLLER_EPOCH_PATH, fence.epoch_zk_version)
                for path in doomed:
                    t.delete(path)

            results = self._commit(build)
            if not _failed(results):
                return
            _raise_if_fenced(results, fence)
            # a node appeared or vanished meanwhile: look again
        raise ZkError(f"could not delete topic {name!r}: its znodes keep changing")

    def _subtree(self, root: str) -> list[str]:
        """``root`` and everything under it, children before parents; empty if ``root`` is missing."""
        out: list[str] = []

        def walk(path: str) -> bool:
            try:
                children = self._retry(self._kz.get_children_async, path)
            except NoNodeError:
                return False
            for child in children:
                walk(f"{path}/{child}")
            out.append(path)
            return True

        walk(root)
        return out

    # -- partition states ----------------------------------------------------------------------------------

    def get_partition_state(
        self, topic: str, partition: int, watch: Callable[[LeaderAndIsr | None], None] | None = None
    ) -> LeaderAndIsr | None:
        """The partition's leader and ISR (``zk_version`` set), None if missing; ``watch`` gets later changes."""

        def decode(data: bytes | None, stat: ZnodeStat | None) -> LeaderAndIsr | None:
            return None if stat is None else layout.decode_partition_state(topic, partition, data, int(stat.version))

        path = layout.partition_state_path(topic, partition)
        if watch is not None:
            return self._data_watch(path, decode, watch)
        got = self._get(path)
        return None if got is None else decode(*got)

    def create_partition_states(
        self, states: dict[TopicPartition, LeaderAndIsr], fence: ControllerFence
    ) -> dict[TopicPartition, LeaderAndIsr]:
        """Create the state znodes (and their parents) in fenced multi-ops; returns the created ones.

        Partitions whose state exists already with other contents, or whose topic is gone, are left out
        of the result (the caller reads them). ControllerMovedError if another controller took over.
        """
        pending = dict(states)
        created: dict[TopicPartition, LeaderAndIsr] = {}
        for _ in range(len(states) + _MAX_CONFLICT_ROUNDS):
            if not pending:
                break
            parents = self._missing_partition_parents(pending)
            keys = list(pending)

            writes = [
                (
                    layout.partition_state_path(topic, partition),
                    layout.encode_partition_state(pending[(topic, partition)]),
                )
                for topic, partition in keys
            ]

            def build(t: Any, parents: list[str] = parents, writes: list[tuple[str, bytes]] = writes) -> None:
                t.check(layout.CONTROLLER_EPOCH_PATH, fence.epoch_zk_version)
                for path in parents:
                    t.create(path, b"")
                for path, data in writes:
                    t.create(path, data)

            results = self._commit(build)
            if not _failed(results):
                for tp in keys:
                    created[tp] = replace(pending[tp], zk_version=0)
                return created
            _raise_if_fenced(results, fence)
            index = _first_failure(results)
            error = results[index]
            if index <= len(parents):
                parent = parents[index - 1]
                if isinstance(error, NoNodeError):  # the topic znode is gone: its partitions cannot be created
                    topic = parent.split("/")[3]
                    pending = {tp: s for tp, s in pending.items() if tp[0] != topic}
                continue  # NodeExists: created meanwhile; look again
            tp = keys[index - 1 - len(parents)]
            stored = self._stored_if_same(tp, pending.pop(tp)) if isinstance(error, NodeExistsError) else None
            if stored is not None:
                created[tp] = stored
        if pending:
            raise ZkError(f"could not create the states of {sorted(pending)}: their parents keep changing")
        return created

    def _missing_partition_parents(self, states: Iterable[TopicPartition]) -> list[str]:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in states:
            by_topic.setdefault(topic, []).append(partition)
        missing: list[str] = []
        for topic, partitions in by_topic.items():
            try:
                existing = set(self._retry(self._kz.get_children_async, layout.partitions_path(topic)))
            except NoNodeError:
                missing.append(layout.partitions_path(topic))
                existing = set()
            missing.extend(layout.partition_path(topic, p) for p in sorted(partitions) if str(p) not in existing)
        return missing

    def update_partition_states(
        self, states: dict[TopicPartition, LeaderAndIsr], fence: ControllerFence
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        """Write each state conditional on its ``zk_version``, all in one fenced multi-op.

        Returns each partition's new state (``zk_version`` set), or None for a stale one (its version
        moved or its znode is gone: re-read it). ControllerMovedError if another controller took over.
        """
        pending = dict(states)
        out: dict[TopicPartition, LeaderAndIsr | None] = {}
        while pending:
            keys = list(pending)

            writes = [
                (layout.partition_state_path(*tp), layout.encode_partition_state(pending[tp]), pending[tp].zk_version)
                for tp in keys
            ]

            def build(t: Any, writes: list[tuple[str, bytes, int]] = writes) -> None:
                t.check(layout.CONTROLLER_EPOCH_PATH, fence.epoch_zk_version)
                for path, data, version in writes:
                    t.set_data(path, data, version=version)

            results = self._commit(build)
            if not _failed(results):
                for tp, stat in zip(keys, results[1:], strict=True):
                    out[tp] = replace(pending[tp], zk_version=int(stat.version))
                break
            _raise_if_fenced(results, fence)
            tp = keys[_first_failure(results) - 1]
            out[tp] = self._stored_if_same(tp, pending.pop(tp))
        return {tp: out[tp] for tp in states}

    def update_isr(self, topic: str, partition: int, state: LeaderAndIsr) -> LeaderAndIsr | None:
        """A leader's own ISR change: write ``state`` conditional on ``state.zk_version``.

        Returns the stored state with its new version, or None if the znode moved on (a controller wrote
        a new leader or ISR meanwhile: the leader must re-read and wait for the controller's LeaderAndIsr).
        """
        path = layout.partition_state_path(topic, partition)
        try:
            stat = self._retry(self._kz.set_async, path, layout.encode_partition_state(state), version=state.zk_version)
        except KazooBadVersionError:
            return self._stored_if_same((topic, partition), state)
        except NoNodeError:
            return None
        return replace(state, zk_version=int(stat.version))

    def _stored_if_same(self, tp: TopicPartition, wanted: LeaderAndIsr) -> LeaderAndIsr | None:
        """The stored state if it is ``wanted`` (our write landed before a connection loss), else None."""
        stored = self.get_partition_state(*tp)
        if stored is None:
            return None
        same = (stored.leader, stored.leader_epoch, stored.isr, stored.controller_epoch) == (
            wanted.leader,
            wanted.leader_epoch,
            wanted.isr,
            wanted.controller_epoch,
        )
        return stored if same else None

    # -- configs -------------------------------------------------------------------------------------------

    def get_config(self, entity_type: str, name: str) -> dict[str, str]:
        """The overrides of ``topics``/``brokers``/... entity ``name`` (``<default>`` allowed); {} if none."""
        got = self._get(layout.config_path(entity_type, name))
        return {} if got is None else layout.decode_config(entity_type, name, got[0])

    def set_config(self, entity_type: str, name: str, configs: dict[str, str]) -> None:
        """Replace the entity's overrides with ``configs``, then post a ``/config/changes`` notification."""
        self._set_or_create(layout.config_path(entity_type, name), layout.encode_config(configs))
        self._post_config_change(layout.config_entity_path(entity_type, name))

    def _post_config_change(self, entity_path: str) -> None:
        """Tell every broker that the configs at ``entity_path`` (``users/alice``) changed."""
        self._retry(
            self._kz.create_async,
            layout.CONFIG_CHANGES_PATH + "/" + layout.CONFIG_CHANGE_PREFIX,
            layout.encode_config_change(entity_path),
            sequence=True,
            makepath=True,
        )

    def _entity_configs(self, entity_path: str) -> tuple[dict[str, str], ZnodeStat] | None:
        got = self._get(f"{layout.CONFIG_PATH}/{entity_path}")
        return None if got is None else (layout.decode_config(*_type_and_name(entity_path), got[0]), got[1])

    def _update_entity_configs(self, entity_path: str,
                               change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace the configs at ``entity_path`` with ``change(current)``, conditional on the znode's version (so a
        concurrent writer's keys are never lost), then post a change notification; the configs written.

        ``change`` may raise to write nothing. A write that landed before a lost connection (the retry then meets
        BadVersion) is recognized by reading back what it wrote.
        """
        path = f"{layout.CONFIG_PATH}/{entity_path}"
        attempted: dict[str, str] | None = None
        for _ in range(_MAX_CONFLICT_ROUNDS):
            got = self._entity_configs(entity_path)
            current = {} if got is None else got[0]
            if attempted is not None and current == attempted:
                break
            attempted = change(dict(current))
            data = layout.encode_config(attempted)
            try:
                if got is None:
                    self._retry(self._kz.create_async, path, data, makepath=True)
                else:
                    self._retry(self._kz.set_async, path, data, version=got[1].version)
            except (KazooBadVersionError, NodeExistsError, NoNodeError):
                continue
            break
        else:
            raise ZkError(f"could not update {path}: other writers keep changing it")
        self._post_config_change(entity_path)
        return attempted

    def get_quota_config(self, entity_path: str) -> dict[str, str]:
        """The quota configs of the client quota entity at ``entity_path`` (``users/alice/clients/app``); {} if none.
        A user's SCRAM credentials, kept in the same znode, are left out."""
        got = self._entity_configs(entity_path)
        return {} if got is None else layout.split_credentials(got[0])[0]

    def get_quota_configs(self) -> dict[str, dict[str, str]]:
        """Every client quota entity with configs, by entity path (users, clients, ips, users' clients)."""
        out: dict[str, dict[str, str]] = {}
        for kind in ("users", "clients", "ips"):
            for child in self._children(f"{layout.CONFIG_PATH}/{kind}"):
                paths = [f"{kind}/{child}"]
                if kind == "users":
                    paths += [f"users/{child}/clients/{c}"
                              for c in self._children(f"{layout.CONFIG_PATH}/users/{child}/clients")]
                for path in paths:
                    configs = self.get_quota_config(path)
                    if configs:
                        out[path] = configs
        return out

    def set_quota_config(self, entity_path: str, configs: dict[str, str]) -> None:
        """Replace the quota configs of a client quota entity, keeping a user's SCRAM credentials stored beside
        them, then post a ``/config/changes`` notification."""
        self._update_entity_configs(entity_path, lambda current: {**layout.split_credentials(current)[1], **configs})

    def get_scram_credentials(self, user: str) -> dict[str, str]:
        """A user's SCRAM credentials as stored (mechanism -> Kafka's credential string); {} if none."""
        got = self._entity_configs(layout.user_entity_path(user))
        return {} if got is None else layout.split_credentials(got[0])[1]

    def get_all_scram_credentials(self) -> dict[str, dict[str, str]]:
        """Every user with SCRAM credentials: user name -> mechanism -> credential string."""
        out: dict[str, dict[str, str]] = {}
        for child in self._children(f"{layout.CONFIG_PATH}/users"):
            user = layout.desanitize(child)
            if user:  # the default user entity has quotas only
                credentials = self.get_scram_credentials(user)
                if credentials:
                    out[user] = credentials
        return out

    def alter_scram_credentials(self, user: str,
                                change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace a user's SCRAM credentials with ``change(current credentials)`` (``change`` may raise to write
        nothing), keeping the user's quota configs; a ``/config/changes`` notification follows. Returns the
        credentials stored."""
        written = self._update_entity_configs(
            layout.user_entity_path(user),
            lambda current: {**layout.split_credentials(current)[0],
                             **change(layout.split_credentials(current)[1])})
        return layout.split_credentials(written)[1]

    def config_changes(self, watch: Callable[[list[str]], None]) -> list[str]:
        """Entity paths (``topics/orders``) of the notifications present now; ``watch`` gets those of each new batch.

        A notification is reported once per client, in sequence order. With each batch, the watch purges the
        notifications (all of them read by then) that are older than ``change_expiration_ms``, as Kafka's brokers do.
        """
        return _ConfigChangeWatch(self, watch).start()

    def purge_config_changes(self, older_than_ms: int, now_ms: int) -> int:
        """Delete notifications created more than ``older_than_ms`` before ``now_ms``; returns how many."""
        return self.purge_notifications(layout.CONFIG_CHANGES_PATH, self._children(layout.CONFIG_CHANGES_PATH),
                                        older_than_ms, now_ms)

    def purge_expired_notifications(self, parent: str, children: Iterable[str]) -> None:
        """``purge_notifications`` of those older than ``change_expiration_ms``, by a watch that has read them; a
        failure is logged (the next batch tries again)."""
        try:
            self.purge_notifications(parent, children, self.change_expiration_ms, self._clock.milliseconds())
        except ZkError as e:
            _log.warning("could not purge old change notifications under %s: %s", parent, e)

    def purge_notifications(self, parent: str, children: Iterable[str], older_than_ms: int, now_ms: int) -> int:
        """Delete the ``children`` of ``parent`` created more than ``older_than_ms`` before ``now_ms`` (Kafka's
        ``purgeObsoleteNotifications``; every broker does it, so one deleted meanwhile is skipped); how many."""
        purged = 0
        for child in children:
            path = f"{parent}/{child}"
            stat = self._retry(self._kz.exists_async, path)
            if stat is not None and stat.ctime < now_ms - older_than_ms:
                try:
                    self._retry(self._kz.delete_async, path)
                    purged += 1
                except NoNodeError:
                    pass
        return purged

    # -- producer ids --------------------------------------------------------------------------------------

    def claim_producer_id_block(self, broker_id: int, block_size: int = 1000) -> tuple[int, int]:
        """Claim the next ``block_size`` producer ids ``[start, end)`` for ``broker_id``.

        A conditional update of ``/latest_producer_id_block``, repeated while other brokers win the race
        (Kafka's ``ZkProducerIdManager``); blocks never overlap.
        """
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        path = layout.PRODUCER_ID_BLOCK_PATH
        for _ in range(_MAX_CONFLICT_ROUNDS):
            got = self._get(path)
            previous = None if got is None else layout.decode_producer_id_block(got[0])
            start = 0 if previous is None else previous.end
            block = ProducerIdBlock(broker_id, start, start + block_size)
            if block.end - 1 > 2**63 - 1:
                raise ZkError("producer ids are exhausted: the next block would pass 2^63 - 1")
            data = layout.encode_producer_id_block(block)
            try:
                if got is None:
                    self._retry(self._kz.create_async, path, data, makepath=True)
                else:
                    self._retry(self._kz.set_async, path, data, version=got[1].version)
                return block.start, block.end
            except (NodeExistsError, KazooBadVersionError, NoNodeError):
                stored = self._get(path)
                if stored is not None and stored[0] == data:
                    return block.start, block.end  # ours, written before a connection loss
        raise ZkError(f"could not claim a producer id block: {path} kept changing under {_MAX_CONFLICT_ROUNDS} tries")


# -- watches with more than one znode ----------------------------------------------------------------------


class _FirstValue(Generic[T]):
    """The first call of a recipe's function. kazoo usually makes it synchronously when the watch starts, but
    when the znode changes while the watch starts it comes a little later from kazoo's own thread: ``result``
    waits for it (bounded) rather than losing it."""

    def __init__(self) -> None:
        self.set = False
        self.value: T | None = None
        self.error: ZkDataError | None = None
        self.dead = False
        self._done = threading.Event()

    def deliver(self, value: T) -> None:
        self.value, self.set = value, True
        self._done.set()

    def fail(self, error: ZkDataError) -> None:
        self.error, self.dead = error, True
        self._done.set()

    def result(self, path: str, timeout_s: float) -> T:
        self._done.wait(max(timeout_s, 0.0))
        if self.error is not None:
            raise self.error
        if not self.set:
            raise ZkError(f"the watch on {path} did not start within {timeout_s:.1f} s (the client is closing?)")
        return self.value  # type: ignore[return-value]


class _BrokerSetWatch:
    """``/brokers/ids`` children plus one DataWatch per broker id seen; publishes the map when it changes."""

    def __init__(self, zk: ZkClient, callback: Callable[[dict[int, BrokerRegistration]], None]) -> None:
        self._zk = zk
        self._callback = callback
        self._lock = threading.Lock()
        self._registrations: dict[int, BrokerRegistration | None] = {}
        self._watched: set[int] = set()
        self._published: dict[int, BrokerRegistration] | None = None

    def start(self) -> dict[int, BrokerRegistration]:
        first_call = [True]  # kazoo serialises a ChildrenWatch's calls; the first runs inside its constructor

        def on_children(children: list[str]) -> bool | None:
            if self._zk._closed:
                return False
            if first_call[0]:
                first_call[0] = False
                self._watch_ids(children)  # the caller's thread: setting up DataWatches may block
            else:
                self._zk._in_event_thread(lambda: self._watch_ids(children))
            return None

        self._zk._ensure_path(layout.BROKER_IDS_PATH)
        self._zk._run_recipe(lambda: self._zk._kz.ChildrenWatch(layout.BROKER_IDS_PATH, on_children))
        with self._lock:
            self._published = self._current()
            return dict(self._published)

    def _watch_ids(self, children: list[str]) -> None:
        for child in children:
            broker_id = _broker_id(child)
            if broker_id is None or broker_id in self._watched or self._zk._closed:
                continue
            self._watched.add(broker_id)
            on_data = functools.partial(self._on_broker, broker_id)
            path = layout.broker_path(broker_id)
            try:
                self._zk._run_recipe(lambda path=path, on_data=on_data: self._zk._kz.DataWatch(path, on_data))
            except ZkError as exc:
                _log.warning("cannot watch broker %s: %s", broker_id, exc)
                self._watched.discard(broker_id)

    def _on_broker(
        self, broker_id: int, data: bytes | None, stat: ZnodeStat | None, event: object = None
    ) -> bool | None:
        if self._zk._closed:
            return False
        registration: BrokerRegistration | None = None
        if stat is not None:
            try:
                registration = layout.decode_broker(broker_id, data, epoch=int(stat.czxid))
            except ZkDataError as exc:
                _log.error("ignoring broker %s: %s", broker_id, exc)
        with self._lock:
            self._registrations[broker_id] = registration
            if self._published is None:
                return None  # still starting: start() returns the first map
            current = self._current()
            if current != self._published:
                self._published = current
                self._zk._deliver(self._callback, dict(current))
        return None

    def _current(self) -> dict[int, BrokerRegistration]:
        return {b: r for b, r in sorted(self._registrations.items()) if r is not None}


class _ConfigChangeWatch:
    """``/config/changes`` children; reads each new notification once, in sequence order."""

    def __init__(self, zk: ZkClient, callback: Callable[[list[str]], None]) -> None:
        self._zk = zk
        self._callback = callback
        self._last_sequence = -1

    def start(self) -> list[str]:
        first: list[list[str]] = []

        def on_children(children: list[str]) -> bool | None:
            if self._zk._closed:
                return False
            if not first:
                first.append(self._read_new(children))  # the caller's thread: reading may block
            else:
                self._zk._in_event_thread(lambda: self._publish(children))
            return None

        self._zk._ensure_path(layout.CONFIG_CHANGES_PATH)
        self._zk._run_recipe(lambda: self._zk._kz.ChildrenWatch(layout.CONFIG_CHANGES_PATH, on_children))
        if not first:
            raise ZkError(f"the watch on {layout.CONFIG_CHANGES_PATH} did not start (the client is closing?)")
        return first[0]

    def _publish(self, children: list[str]) -> None:
        if self._zk._closed:
            return
        changed = self._read_new(children)
        if changed:
            self._zk._dispatch(lambda: self._callback(changed))

    def _read_new(self, children: list[str]) -> list[str]:
        entity_paths: list[str] = []
        numbered: list[tuple[int, str]] = []
        for child in children:
            try:
                numbered.append((layout.config_change_sequence(child), child))
            except ZkDataError as exc:
                _log.warning("ignoring %s", exc)
        for sequence, child in sorted(numbered):
            if sequence <= self._last_sequence:
                continue
            self._last_sequence = sequence
            got = self._zk._get(f"{layout.CONFIG_CHANGES_PATH}/{child}")
            if got is None:
                continue  # purged meanwhile
            try:
                entity_paths.append(layout.decode_config_change(child, got[0]))
            except ZkDataError as exc:
                _log.error("ignoring %s", exc)
        # every notification read so far, in this batch or an earlier one, as Kafka's purgeObsoleteNotifications
        self._zk.purge_expired_notifications(layout.CONFIG_CHANGES_PATH, [c for _, c in numbered])
        return entity_paths


# -- helpers ---------------------------------------------------------------------------------------------


def _type_and_name(entity_path: str) -> tuple[str, str]:
    """For error messages: the last (type, name) pair of an entity path."""
    parts = entity_path.split("/")
    return parts[-2], parts[-1]


def _call(callback: Callable[[], None]) -> None:
    callback()


def _split_connect(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/chroot"`` -> ``("h1:2181,h2:2181", "/chroot")``; the chroot is "" when absent."""
    hosts, slash, chroot = connect.partition("/")
    if not hosts:
        raise ValueError(f"invalid ZooKeeper connect string {connect!r}: no host:port before the chroot")
    if not slash:
        return hosts, ""
    chroot = "/" + chroot.rstrip("/")
    if chroot == "/":
        return hosts, ""
    if "//" in chroot:
        raise ValueError(f"invalid chroot {chroot!r} in ZooKeeper connect string {connect!r}")
    return hosts, chroot


def _broker_id(child: str) -> int | None:
    if child.isdigit():
        return int(child)
    _log.warning("ignoring %s/%s: not a broker id", layout.BROKER_IDS_PATH, child)
    return None


def _failed(results: list[Any]) -> bool:
    return any(isinstance(r, Exception) for r in results)


def _first_failure(results: list[Any]) -> int:
    """The index of the operation that failed a multi-op (the others report rolled back/inconsistent)."""
    for index, result in enumerate(results):
        if isinstance(result, Exception) and not isinstance(result, RolledBackError | RuntimeInconsistency):
            return index
    raise ZkError(f"a multi-op failed without naming the failing operation: {results!r}")


def _raise_if_fenced(results: list[Any], fence: ControllerFence) -> None:
    """The multi-op's first operation is the controller-epoch check: if it failed, we are no longer controller."""
    if isinstance(results[0], KazooBadVersionError | NoNodeError):
        raise ControllerMovedError(
            f"controller epoch {fence.controller_epoch} is over: {layout.CONTROLLER_EPOCH_PATH} is no longer at "
            f"version {fence.epoch_zk_version}, another broker is the controller"
        )
    if isinstance(results[0], KazooException) and not _is_rollback(results[0]):
        raise ZkError(f"the controller epoch check failed unexpectedly: {results[0]!r}")


def _is_rollback(exc: Exception) -> bool:
    return isinstance(exc, RolledBackError | RuntimeInconsistency)
