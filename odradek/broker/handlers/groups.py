"""Consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups,
ListGroups, DeleteGroups. Each turns its request into one coordinator operation (``coordinator/group``)
and its result into the response of the request's version; the rules live in the coordinator.

Authorization, as Kafka's: FindCoordinator needs DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) or the
transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); Join/Sync/Heartbeat/Leave need READ on the group (the
response's error); DescribeGroups DESCRIBE on each group (that group's error; ``authorized_operations`` when asked
for); ListGroups lists every group with DESCRIBE on the cluster, else only the groups it may DESCRIBE; DeleteGroups
needs DELETE on each group (that group's result). A refused request reaches no coordinator."""

from __future__ import annotations

import logging
from typing import Any

from odradek.broker.authorization import (
    TRANSACTIONAL_ID_DENIED,
    allowed_on_cluster,
    denied_names,
    group_error,
    operations_if,
    transactional_id_error,
)
from odradek.broker.context import RequestContext
from odradek.coordinator.group.membership import join_error, sync_error
from odradek.protocol.entities import millis
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.security.acl import AclOperation, ResourceType

log = logging.getLogger(__name__)

E = ErrorCode
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


def client_host(ctx: RequestContext) -> str:
    """The member's host as Kafka reports it ("/127.0.0.1")."""
    return "/" + ctx.peer.rsplit(":", 1)[0]


# -- FindCoordinator --------------------------------------------------------------------------------


def _coordinator(ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
    b = ctx.broker
    entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": E.NONE,
                             "error_message": None}
    if key_type == KEY_TYPE_GROUP and (denied := group_error(ctx, AclOperation.DESCRIBE, key)):
        entry.update(error_code=denied, error_message="Group authorization failed.")
    elif key_type == KEY_TYPE_TRANSACTION and transactional_id_error(ctx, AclOperation.DESCRIBE, key):
        entry.update(error_code=TRANSACTIONAL_ID_DENIED, error_message="Transactional Id authorization failed.")
    elif key_type == KEY_TYPE_GROUP:
        if not key:
            entry.update(error_code=E.INVALID_REQUEST, error_message="the group id is empty")
            return entry
        _locate(ctx, entry, b.groups, b.groups.ensure_started, key)
    elif key_type == KEY_TYPE_TRANSACTION:
        if not key:
            entry.update(error_code=E.INVALID_REQUEST, error_message="the transactional id is empty")
            return entry
        _locate(ctx, entry, b.txns, b.txns.ensure_started, key)
    else:
        entry.update(error_code=E.INVALID_REQUEST, error_message=f"unknown coordinator key type {key_type}")
    return entry


async def handle_find_coordinator(ctx: RequestContext, request: Any) -> dict[str, Any]:
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    if ctx.version >= 4:
        return {"throttle_time": 0,
                "coordinators": [_coordinator(ctx, key, key_type) for key in request.coordinator_keys]}
    entry = _coordinator(ctx, request.key, key_type)
    del entry["key"]
    return {"throttle_time": 0, **entry}


def _locate(ctx: RequestContext, entry: dict[str, Any], runtime: Any, ensure_started: Any, key: str) -> None:
    """Fill ``entry`` with the coordinator of ``key``: this broker on a single node; in a cluster, the leader of
    the key's partition of the internal topic (COORDINATOR_NOT_AVAILABLE while it has none)."""
    b = ctx.broker
    try:
        coord = ensure_started()
    except KafkaError as e:
        entry.update(error_code=e.code, error_message=e.message)
        return
    cluster = b.cluster
    if cluster is None:
        entry.update(node_id=b.node_id, host=ctx.advertised.host, port=ctx.advertised.port)
        return
    partition = coord.partition_of(key)
    state = cluster.states.get((runtime.topic, partition))
    reg = cluster.brokers.get(state.leader) if state is not None else None
    if reg is None:
        entry.update(error_code=E.COORDINATOR_NOT_AVAILABLE,
                     error_message=f"{runtime.topic}-{partition} has no leader yet: retry")
        return
    endpoint = reg.address(ctx.listener_name)
    entry.update(node_id=reg.broker_id, host=endpoint.host, port=endpoint.port)


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ------------------------------------------------


async def handle_join_group(ctx: RequestContext, request: Any) -> dict[str, Any]:
    v = ctx.version
    if denied := group_error(ctx, AclOperation.READ, request.group_id):
        out = dict(join_error(denied), throttle_time=0)
        if v < 7:
            out["protocol_name"] = ""
        return out
    session = millis(request.session_timeout)
    rebalance = millis(request.rebalance_timeout) if v >= 1 else session
    protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
    instance_id = getattr(request, "group_instance_id", None)
    client_id = ctx.header.client_id or ""
    host = client_host(ctx)
    reply = await ctx.broker.groups.call(lambda c, ticket, now: c.join(
        ticket, group_id=request.group_id, member_id=request.member_id, group_instance_id=instance_id,
        protocol_type=request.protocol_type, protocols=protocols, session_timeout_ms=session,
        rebalance_timeout_ms=rebalance, client_id=client_id, client_host=host,
        require_known_member_id=v >= 4, supports_skip_assignment=v >= 9, now=now))
    out = dict(reply, throttle_time=0)
    if v < 7 and out.get("protocol_name") is None:
        out["protocol_name"] = ""
    return out


async def handle_sync_group(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if denied := group_error(ctx, AclOperation.READ, request.group_id):
        return dict(sync_error(denied), throttle_time=0)
    assignments = [(a.member_id, bytes(a.assignment)) for a in request.assignments]
    reply = await ctx.broker.groups.call(lambda c, ticket, now: c.sync(
        ticket, group_id=request.group_id, generation_id=request.generation_id, member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None), protocol_name=getattr(request, "protocol_name", None),
        assignments=assignments, now=now))
    return dict(reply, throttle_time=0)


async def handle_heartbeat(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if denied := group_error(ctx, AclOperation.READ, request.group_id):
        return {"throttle_time": 0, "error_code": denied}
    groups = ctx.broker.groups
    coord = groups.view()
    error = coord.heartbeat(group_id=request.group_id, generation_id=request.generation_id,
                            member_id=request.member_id, group_instance_id=getattr(request, "group_instance_id", None),
                            now=groups.now())
    return {"throttle_time": 0, "error_code": error}


async def handle_leave_group(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if denied := group_error(ctx, AclOperation.READ, request.group_id):
        return {"throttle_time": 0, "error_code": denied, "members": []}
    groups = ctx.broker.groups
    coord = groups.view()
    if ctx.version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    left, errors, fx = coord.leave(group_id=request.group_id, members=members, now=groups.now())
    groups.apply(fx)
    if ctx.version < 3:
        return {"throttle_time": 0, "error_code": left if left != E.NONE else errors[0]}
    return {"throttle_time": 0, "error_code": left, "members": [
        {"member_id": m, "group_instance_id": i, "error_code": e} for (m, i), e in zip(members, errors, strict=True)]}


# -- DescribeGroups / ListGroups / DeleteGroups -----------------------------------------------------


async def handle_describe_groups(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = ctx.broker.groups.view()
    with_operations = bool(getattr(request, "include_authorized_operations", False))
    described = []
    for group_id in request.groups:
        if denied := group_error(ctx, AclOperation.DESCRIBE, group_id):
            d = {"error_code": denied, "group_id": group_id, "group_state": "", "protocol_type": "",
                 "protocol_data": "", "members": []}
        else:
            d = coord.describe(group_id)
        d["authorized_operations"] = operations_if(ctx, with_operations and not d["error_code"], ResourceType.GROUP,
                                                   group_id)
        described.append(d)
    return {"throttle_time": 0, "groups": described}


async def handle_list_groups(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = ctx.broker.groups.view()
    states = set(getattr(request, "states_filter", ()) or ())
    types = {t.lower() for t in (getattr(request, "types_filter", ()) or ())}
    # Every group here is a classic group; a filter for other types (KIP-848 "consumer", "share") matches none.
    listed = [] if types and "classic" not in types else coord.list_groups(states)
    if not allowed_on_cluster(ctx, AclOperation.DESCRIBE):  # only the groups it may describe
        hidden = denied_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, (g["group_id"] for g in listed))
        listed = [g for g in listed if g["group_id"] not in hidden]
    return {"throttle_time": 0, "error_code": E.NONE, "groups": listed}


async def handle_delete_groups(ctx: RequestContext, request: Any) -> dict[str, Any]:
    groups = ctx.broker.groups
    results = []
    for group_id in request.groups_names:
        if denied := group_error(ctx, AclOperation.DELETE, group_id):
            results.append({"group_id": group_id, "error_code": denied})
            continue
        error = await groups.call(lambda c, ticket, now, g=group_id: c.delete_group(ticket, g))
        if error == E.NONE:
            log.info("deleted group %s for %s", group_id, ctx.peer)
        results.append({"group_id": group_id, "error_code": error})
    return {"throttle_time": 0, "results": results}
