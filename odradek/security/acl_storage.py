"""Where the cluster's ACLs live, how CreateAcls and DeleteAcls change them, and how every change reaches the
broker's ``Authorizer`` (which holds all ACLs in memory).

Two places, one interface (``AclStore``):
- single node: the metadata file (``cluster/metadata.py``, saved atomically before a change is visible);
- ZooKeeper: Kafka's znodes (``cluster/zk/acl_client.py``); each change is a conditional write followed by a
  notification, and every broker (this one included) re-reads the changed resource when it sees the
  notification. The writing broker also takes what it wrote at once, so its own next request sees it.

Invariants (Kafka's ``AclAuthorizer.createAcls``/``deleteAcls``):
- ``create``: one result per binding, in order; bindings of one resource pattern are written together (one
  conditional write); an invalid binding gets INVALID_REQUEST ("Failed to create ACL") and the others still apply;
  creating an ACL that exists already succeeds and changes nothing.
- ``delete``: each filter's result lists the bindings it deleted; a binding several filters match is reported by
  the first of them only. The resources considered are those this broker knows of plus the one a filter names
  exactly (so a filter naming a pattern just created on another broker still reaches it).
- ACLs change on the event loop only; the ZooKeeper calls run in worker threads. Changes announced while the
  initial load runs are applied after it, in order, so an older read never replaces a newer one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclBinding, AclBindingFilter, ResourcePattern, binding_problem
from odradek.security.acl_stored import AclDataError, Entries, from_document, to_document
from odradek.security.authorizer import Authorizer

if TYPE_CHECKING:
    from odradek.cluster.metadata import TopicRegistry
    from odradek.cluster.zk.client import ZkClient

log = logging.getLogger(__name__)

Change = Callable[[Entries], Entries]


class AclError(Exception):
    """Why one ACL could not be created or deleted, with the Kafka error code it is answered with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Backend(Protocol):
    async def update(self, pattern: ResourcePattern, change: Change) -> Entries: ...


class AclStore:
    """The ACLs' storage in front of the authorizer (see the module docstring)."""

    def __init__(self, authorizer: Authorizer, backend: _Backend) -> None:
        self.authorizer = authorizer
        self._backend = backend

    @classmethod
    def single_node(cls, authorizer: Authorizer, registry: TopicRegistry) -> AclStore:
        backend = _FileBackend(registry)
        authorizer.replace_all(backend.acls)
        return cls(authorizer, backend)

    @classmethod
    async def zookeeper(cls, authorizer: Authorizer, zk: ZkClient) -> AclStore:
        """Load every ACL and follow the notifications (the client's dispatch must be the running loop's)."""
        from odradek.cluster.zk.acl_client import ZkAcls

        acls = ZkAcls(zk)
        held: list[tuple[ResourcePattern, Entries]] | None = []

        def changed(pattern: ResourcePattern, entries: Entries) -> None:
            if held is not None:
                held.append((pattern, entries))
            else:
                authorizer.replace_resource(pattern, entries)

        await asyncio.to_thread(acls.ensure_paths)
        await asyncio.to_thread(acls.watch_changes, changed)
        authorizer.replace_all(await asyncio.to_thread(acls.read_all))
        for pattern, entries in held:
            authorizer.replace_resource(pattern, entries)
        held = None
        log.info("loaded the ACLs of %d resource patterns from ZooKeeper", len(authorizer.patterns()))
        return cls(authorizer, _ZkBackend(acls))

    async def _update(self, pattern: ResourcePattern, change: Change) -> None:
        self.authorizer.replace_resource(pattern, await self._backend.update(pattern, change))

    async def create(self, bindings: Sequence[AclBinding]) -> list[AclError | None]:
        """Create ``bindings``; per binding, None or why it was not created."""
        results: list[AclError | None] = [None] * len(bindings)
        groups: dict[ResourcePattern, list[int]] = {}
        for i, binding in enumerate(bindings):
            problem = binding_problem(binding)
            if problem is not None:
                results[i] = AclError(ErrorCode.INVALID_REQUEST, f"Failed to create ACL: {problem}")
            else:
                groups.setdefault(binding.pattern, []).append(i)
        for pattern, indexes in groups.items():
            added = frozenset(bindings[i].entry for i in indexes)

            def add(current: Entries, added: Entries = added) -> Entries:
                return current | added

            try:
                await self._update(pattern, add)
                log.info("added ACLs for %s: %s", pattern, ", ".join(sorted(map(str, added))))
            except Exception as e:  # each resource's failure is its bindings' result
                log.error("cannot store the ACLs of %s: %s", pattern, e)
                for i in indexes:
                    results[i] = AclError(ErrorCode.UNKNOWN_SERVER_ERROR, f"the ACLs could not be stored: {e}")
        return results

    async def delete(self, filters: Sequence[AclBindingFilter],
                     ) -> list[list[tuple[AclBinding, AclError | None]]]:
        """Delete what ``filters`` match; per filter, the bindings it deleted (or failed to), sorted."""
        results: list[dict[AclBinding, AclError | None]] = [{} for _ in filters]
        known = set(self.authorizer.patterns())
        known.update(p for f in filters if (p := f.exact_pattern()) is not None)
        for pattern in sorted(known):
            matching = [(i, f) for i, f in enumerate(filters) if f.matches_pattern(pattern)]
            if not matching:
                continue
            removed: dict[AclBinding, int] = {}

            def change(current: Entries, pattern: ResourcePattern = pattern,
                       matching: list[tuple[int, AclBindingFilter]] = matching,
                       removed: dict[AclBinding, int] = removed) -> Entries:
                removed.clear()
                for entry in current:
                    first = next((i for i, f in matching if f.matches_entry(entry)), None)
                    if first is not None:
                        removed[AclBinding(pattern, entry)] = first
                return current - {b.entry for b in removed}

            error: AclError | None = None
            try:
                await self._update(pattern, change)
                if removed:
                    log.info("removed ACLs for %s: %s", pattern, ", ".join(sorted(str(b.entry) for b in removed)))
            except Exception as e:  # reported with each binding it concerned
                log.error("cannot delete ACLs of %s: %s", pattern, e)
                error = AclError(ErrorCode.UNKNOWN_SERVER_ERROR, f"the ACLs could not be deleted: {e}")
            for binding, i in removed.items():
                results[i][binding] = error
        return [sorted(r.items(), key=lambda item: item[0]) for r in results]


class _FileBackend:
    """Single node: the ACLs in the metadata file, saved before they are visible."""

    def __init__(self, registry: TopicRegistry) -> None:
        self._registry = registry
        try:
            self.acls: dict[ResourcePattern, Entries] = from_document(registry.acls)
        except AclDataError as e:
            log.error("ignoring the ACLs stored in %s: %s", registry.path, e)
            self.acls = {}

    async def update(self, pattern: ResourcePattern, change: Change) -> Entries:
        current = self.acls.get(pattern, frozenset())
        new = change(current)
        if new != current:
            acls = {**self.acls, pattern: new}
            self._registry.set_acls(to_document(acls))
            self.acls = {p: e for p, e in acls.items() if e}
        return new


class _ZkBackend:
    """ZooKeeper: conditional writes in a worker thread (``cluster/zk/acl_client.py``)."""

    def __init__(self, acls: object) -> None:
        from odradek.cluster.zk.acl_client import ZkAcls

        assert isinstance(acls, ZkAcls)
        self._acls = acls

    async def update(self, pattern: ResourcePattern, change: Change) -> Entries:
        return await asyncio.to_thread(self._acls.update, pattern, change)
