"""DescribeUserScramCredentials (v0) and AlterUserScramCredentials (v0): users' SCRAM credentials (KIP-554), with
the semantics of Kafka's ZooKeeper-mode brokers (``ZkAdminManager``).

Alter: each upsertion carries a user, a mechanism (1 SCRAM-SHA-256, 2 SCRAM-SHA-512), the iterations, and the salt
and salted password the client computed; the broker derives the stored and server keys (the password never
reaches it). Each deletion names a user and a mechanism. The request's operations are grouped by user and each
user gets one result:

- an empty user name: UNACCEPTABLE_CREDENTIAL; an unknown mechanism: UNSUPPORTED_SASL_MECHANISM; iterations
  outside 4096..16384, or a salt or salted password the credential cannot be made from: UNACCEPTABLE_CREDENTIAL;
- a (user, mechanism) named twice (two upsertions, two deletions, or deleted and upserted): DUPLICATE_RESOURCE;
- a deletion of a credential the user does not have: RESOURCE_NOT_FOUND;
- a user in error changes nothing; the other users' changes still apply. A user's changes are written at once
  (one conditional ZooKeeper write, or one save of the metadata file) beside its quota configs, which stay.

Describe: null or no users lists every user with a credential, sorted; named users are answered in the order
asked, each once: an empty name is RESOURCE_NOT_FOUND, a name asked twice DUPLICATE_RESOURCE, a user without
credentials RESOURCE_NOT_FOUND. Only mechanisms and iterations are shown, never a salt or a key.

Authorization, as Kafka's: Describe needs DESCRIBE on the cluster (else the response's
CLUSTER_AUTHORIZATION_FAILED), Alter ALTER on it (else every user's result, users sorted, and nothing changes).

Invariants: handlers see two narrow interfaces, the credential store (``CredentialView``) and the alteration
(``CredentialAdmin``); nothing here logs a salted password or key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode as Kio

from odradek.broker.authorization import cluster_error
from odradek.broker.context import RequestContext
from odradek.cluster.zk.layout import ZkError
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation
from odradek.security.credentials import CredentialNotFound, StoredCredentials, alteration
from odradek.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISM_TYPES,
    ScramCredential,
    ScramCredentialError,
)

log = logging.getLogger(__name__)

RESOURCE_NOT_FOUND = Kio.resource_not_found.value
DUPLICATE_RESOURCE = Kio.duplicate_resource.value
UNACCEPTABLE_CREDENTIAL = Kio.unacceptable_credential.value
MECHANISM_TYPES = {name: number for number, name in SCRAM_MECHANISM_TYPES.items()}


class CredentialView(Protocol):
    def credentials(self, user: str) -> dict[str, ScramCredential]: ...

    def users(self) -> list[str]: ...


class CredentialAdmin(Protocol):
    async def alter_scram_credentials(self, user: str,
                                      change: Callable[[StoredCredentials], StoredCredentials]) -> None: ...


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- describe ------------------------------------------------------------------------------------------------


async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if denied := cluster_error(ctx, AclOperation.DESCRIBE):
        return {"throttle_time": 0, "error_code": denied, "error_message": None, "results": []}
    names = None if not request.users else [u.name for u in request.users]
    return {"throttle_time": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "results": describe(ctx.broker.credentials, names)}


def describe(store: CredentialView, names: list[str] | None) -> list[dict[str, Any]]:
    """One result per user: every user with credentials (``names`` None), else each named user once, in order."""
    if names is None:
        return [_described(store, user) for user in store.users()]
    results = []
    for user in dict.fromkeys(names):
        if not user:
            results.append(_error(user, RESOURCE_NOT_FOUND, "Username must not be empty"))
        elif names.count(user) > 1:
            results.append(_error(user, DUPLICATE_RESOURCE,
                                  f"Cannot describe SCRAM credentials for the same user twice in a single request: "
                                  f"{user}"))
        elif not store.credentials(user):
            results.append(_error(user, RESOURCE_NOT_FOUND,
                                  f"Attempt to describe a user credential that does not exist: {user}"))
        else:
            results.append(_described(store, user))
    return results


def _described(store: CredentialView, user: str) -> dict[str, Any]:
    infos = [{"mechanism": MECHANISM_TYPES[m], "iterations": c.iterations}
             for m, c in store.credentials(user).items()]
    return {"user": user, "error_code": ErrorCode.NONE, "error_message": None, "credential_infos": infos}


def _error(user: str, code: int, message: str) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": []}


# -- alter ---------------------------------------------------------------------------------------------------


@dataclass
class _UserChange:
    """One user's operations in a request: the first error met, else the credentials to set and delete."""

    error: _Refused | None = None
    upsertions: dict[str, ScramCredential] = field(default_factory=dict)
    deletions: list[str] = field(default_factory=list)
    named: set[str] = field(default_factory=set)  # mechanisms named so far

    def refuse(self, error: _Refused) -> None:
        if self.error is None or self.error.code == DUPLICATE_RESOURCE:  # a bad operation outranks a repeat
            self.error = error

    def name(self, mechanism: str) -> None:
        if mechanism in self.named:
            self.refuse(_Refused(DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"))
        self.named.add(mechanism)


async def handle_alter_user_scram_credentials(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if denied := cluster_error(ctx, AclOperation.ALTER):
        users = sorted({u.name for u in (*request.deletions, *request.upsertions)})
        return {"throttle_time": 0, "results": [{"user": u, "error_code": denied, "error_message": None}
                                                for u in users]}
    return {"throttle_time": 0, "results": await alter(ctx.broker, request.deletions, request.upsertions)}


async def alter(admin: CredentialAdmin, deletions: Any, upsertions: Any) -> list[dict[str, Any]]:
    """One result per user named in ``deletions`` and ``upsertions`` (kio's entities), in the order first named."""
    changes: dict[str, _UserChange] = {}
    for d in deletions:
        change = changes.setdefault(d.name, _UserChange())
        try:
            mechanism = _mechanism(d.name, d.mechanism)
        except _Refused as e:
            change.refuse(e)
            continue
        change.name(mechanism)
        change.deletions.append(mechanism)
    for u in upsertions:
        change = changes.setdefault(u.name, _UserChange())
        try:
            mechanism = _mechanism(u.name, u.mechanism)
            change.name(mechanism)
            change.upsertions[mechanism] = _credential(mechanism, u)
        except _Refused as e:
            change.refuse(e)
    results = []
    for user, change in changes.items():
        error = change.error
        if error is None:
            try:
                await admin.alter_scram_credentials(user, alteration(change.upsertions, change.deletions))
            except CredentialNotFound as e:
                error = _Refused(RESOURCE_NOT_FOUND, str(e))
            except ZkError as e:
                log.error("cannot store the SCRAM credentials of user %r: %s", user, e)
                error = _Refused(ErrorCode.UNKNOWN_SERVER_ERROR, "the credentials could not be stored")
        results.append({"user": user, "error_code": ErrorCode.NONE if error is None else error.code,
                        "error_message": None if error is None else error.message})
    return results


def _mechanism(user: str, number: int) -> str:
    if not user:
        raise _Refused(UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    mechanism = SCRAM_MECHANISM_TYPES.get(number)
    if mechanism is None:
        raise _Refused(ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return mechanism


def _credential(mechanism: str, upsertion: Any) -> ScramCredential:
    if upsertion.iterations < MIN_ITERATIONS:
        raise _Refused(UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    if upsertion.iterations > MAX_ITERATIONS:
        raise _Refused(UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    try:
        return ScramCredential.from_salted_password(mechanism, upsertion.salted_password, upsertion.salt,
                                                    upsertion.iterations)
    except ScramCredentialError as e:
        raise _Refused(UNACCEPTABLE_CREDENTIAL, str(e)) from None
