"""ACLs in ZooKeeper, in Kafka's layout (``security/acl_stored.py``): blocking reads, conditional writes and the
change notifications every broker follows. A companion of ``ZkClient`` on the same session, using its retrying
plumbing (same package, so its underscore helpers are shared here on purpose).

Invariants:
- Every method but ``watch_changes``' callback runs on a worker thread (each call waits for ZooKeeper).
- ``update`` is Kafka's ``updateResourceAcls``: read the znode and its version, compute the new entries, write
  them conditionally on that version (create if absent, delete when none are left), re-read and retry on a
  conflict, so concurrent writers on any broker never lose each other's ACLs. A write that landed before a lost
  connection (the retry then meets the new version) is recognised by reading back what it wrote. A change that
  changes nothing writes nothing and announces nothing; every other one is followed by one notification.
- ``watch_changes`` reports each notification once, in sequence order, per change path: the changed pattern with
  its entries as read after the notification (read on the client's event thread, so reports are in order and an
  older read never follows a newer one), through the client's ``dispatch`` (the broker's loop).
- Notifications already present when the watch starts are not reported (the caller reads everything after
  starting it). Notifications older than the client's ``change_expiration_ms`` (15 minutes) are deleted by every
  watching broker once read, and those present at the start, as Kafka's ``ZkNodeChangeNotificationListener`` does
  (a deletion another broker made first is skipped).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.layout import ZkError
from odradek.security.acl import PatternType, ResourcePattern
from odradek.security.acl_stored import (
    ACL_CHANGES_PATH,
    ACL_PATH,
    CHANGE_PREFIX,
    EXTENDED_ACL_CHANGES_PATH,
    PREFIXED_ACL_PATH,
    STORE_PATHS,
    AclDataError,
    Entries,
    change_sequence,
    changes_path,
    decode_acls,
    decode_change,
    encode_acls,
    encode_change,
    pattern_of_path,
    resource_path,
)

log = logging.getLogger(__name__)

_MAX_CONFLICT_ROUNDS = 100
ChangeCallback = Callable[[ResourcePattern, Entries], None]


class ZkAcls:
    """The ACL znodes of one ZooKeeper session (see the module docstring)."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    def ensure_paths(self) -> None:
        for path in STORE_PATHS:
            self._zk._ensure_path(path)

    def read(self, pattern: ResourcePattern) -> Entries:
        path = resource_path(pattern)
        got = self._zk._get(path)
        return frozenset() if got is None else decode_acls(path, got[0])

    def read_all(self) -> dict[ResourcePattern, Entries]:
        """Every stored pattern with ACLs; a znode that does not decode is logged and left out."""
        out: dict[ResourcePattern, Entries] = {}
        for root in (ACL_PATH, PREFIXED_ACL_PATH):
            for kind in self._zk._children(root):
                for name in self._zk._children(f"{root}/{kind}"):
                    try:
                        pattern = pattern_of_path(root, kind, name)
                        entries = self.read(pattern)
                    except AclDataError as e:
                        log.error("ignoring stored ACLs: %s", e)
                        continue
                    if entries:
                        out[pattern] = entries
        return out

    def update(self, pattern: ResourcePattern, change: Callable[[Entries], Entries]) -> Entries:
        """Replace the pattern's entries with ``change(current)`` (it may raise to write nothing), conditionally on
        the znode's version; the entries stored afterwards."""
        path = resource_path(pattern)
        zk = self._zk
        attempted: Entries | None = None
        for _ in range(_MAX_CONFLICT_ROUNDS):
            got = zk._get(path)
            current = frozenset() if got is None else decode_acls(path, got[0])
            if attempted is not None and current == attempted:
                break  # our write landed before the connection dropped
            attempted = change(current)
            if attempted == current:
                return current
            try:
                if not attempted:
                    assert got is not None
                    zk._retry(zk._kz.delete_async, path, version=got[1].version)
                elif got is None:
                    zk._retry(zk._kz.create_async, path, encode_acls(attempted), makepath=True)
                else:
                    zk._retry(zk._kz.set_async, path, encode_acls(attempted), version=got[1].version)
            except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                continue
            break
        else:
            raise ZkError(f"could not update {path}: other writers keep changing it")
        zk._retry(zk._kz.create_async, f"{changes_path(pattern.pattern_type)}/{CHANGE_PREFIX}",
                  encode_change(pattern), sequence=True, makepath=True)
        return attempted

    def watch_changes(self, callback: ChangeCallback) -> None:
        """Report every later change of a pattern's ACLs, on any broker, as ``callback(pattern, entries)``."""
        for path in (ACL_CHANGES_PATH, EXTENDED_ACL_CHANGES_PATH):
            _ChangeWatch(self, path, callback).start()


class _ChangeWatch:
    """One change path's notifications, each read once in sequence order (on the client's event thread)."""

    def __init__(self, acls: ZkAcls, path: str, callback: ChangeCallback) -> None:
        self._acls = acls
        self._zk = acls._zk
        self._path = path
        self._callback = callback
        self._last = -1

    def start(self) -> None:
        started: list[bool] = []

        def on_children(children: list[str]) -> bool | None:
            if self._zk._closed:
                return False
            if not started:  # the caller's thread: only note where the notifications are now (and purge old ones)
                self._last = max((s for c in children if (s := change_sequence(c)) is not None), default=-1)
                started.append(True)
                self._zk.purge_expired_notifications(self._path, children)
            else:
                self._zk._in_event_thread(lambda: self._read_new(children))
            return None

        self._zk._ensure_path(self._path)
        self._zk._run_recipe(lambda: self._zk._kz.ChildrenWatch(self._path, on_children))
        if not started:
            raise ZkError(f"the watch on {self._path} did not start (the client is closing?)")

    def _read_new(self, children: list[str]) -> None:
        numbered = sorted((s, c) for c in children if (s := change_sequence(c)) is not None and s > self._last)
        for sequence, child in numbered:
            self._last = sequence
            try:
                got = self._zk._get(f"{self._path}/{child}")
                if got is None:
                    continue  # purged meanwhile
                pattern = decode_change(f"{self._path}/{child}", got[0])
                if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
                    continue
                entries = self._acls.read(pattern)
            except (AclDataError, ZkError) as e:
                log.error("ignoring ACL change notification %s/%s: %s", self._path, child, e)
                continue
            self._zk._dispatch(lambda p=pattern, e=entries: self._callback(p, e))
        # every notification read so far (earlier batches' included), as Kafka's purgeObsoleteNotifications
        self._zk.purge_expired_notifications(self._path, [c for c in children if change_sequence(c) is not None])
