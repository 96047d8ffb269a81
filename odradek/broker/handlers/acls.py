"""DescribeAcls (v1-3), CreateAcls (v1-3) and DeleteAcls (v1-3), as Kafka's ``AclApis`` answers them.

- Describe needs DESCRIBE on the CLUSTER, create and delete need ALTER on it; a caller without it gets
  CLUSTER_AUTHORIZATION_FAILED (describe: the response's error; create and delete: every item's). This check comes
  first: with no authorizer it passes, and the answer is then SECURITY_DISABLED ("No Authorizer is configured").
- Describe answers every binding its filter matches, grouped by resource pattern (sorted; Kafka's order is a hash
  map's). Create answers one result per creation, in order (``security/acl_storage.py``: INVALID_REQUEST for a
  binding Kafka refuses, and the others still apply). Delete answers one result per filter, listing the bindings
  it deleted.
- A filter or creation holding a code Kafka does not define (UNKNOWN) gets INVALID_REQUEST: the describe's error,
  or that filter's or creation's (Kafka refuses such requests while parsing them and closes the connection).
"""

from __future__ import annotations

from typing import Any

from odradek.broker.authorization import allowed_on_cluster
from odradek.broker.context import RequestContext
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

NO_AUTHORIZER = "No Authorizer is configured on the broker"
NOT_AUTHORIZED = "Cluster authorization failed."


def _filter(item: Any) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter (kio) as a filter."""
    return AclBindingFilter(ResourceType.from_code(item.resource_type_filter), item.resource_name_filter,
                            PatternType.from_code(item.pattern_type_filter), item.principal_filter, item.host_filter,
                            AclOperation.from_code(item.operation), AclPermissionType.from_code(item.permission_type))


def _binding(creation: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.from_code(creation.resource_type), creation.resource_name,
                        PatternType.from_code(creation.resource_pattern_type)),
        AccessControlEntry(creation.principal, creation.host, AclOperation.from_code(creation.operation),
                           AclPermissionType.from_code(creation.permission_type)))


def _acl_fields(binding: AclBinding) -> dict[str, Any]:
    entry = binding.entry
    return {"principal": entry.principal, "host": entry.host, "operation": int(entry.operation),
            "permission_type": int(entry.permission)}


def _pattern_fields(pattern: ResourcePattern) -> dict[str, Any]:
    return {"resource_type": int(pattern.resource_type), "resource_name": pattern.name,
            "pattern_type": int(pattern.pattern_type)}


async def handle_describe_acls(ctx: RequestContext, request: Any) -> dict[str, Any]:
    def answer(code: int, message: str | None, resources: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {"throttle_time": 0, "error_code": code, "error_message": message, "resources": resources or []}

    if not allowed_on_cluster(ctx, AclOperation.DESCRIBE):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, NOT_AUTHORIZED)
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return answer(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    selector = _filter(request)
    unknown = selector.unknown_element()
    if unknown is not None:
        return answer(ErrorCode.INVALID_REQUEST, f"DescribeAclsRequest contains UNKNOWN elements: {unknown}")
    resources: dict[ResourcePattern, list[dict[str, Any]]] = {}
    for binding in authorizer.acls(selector):
        resources.setdefault(binding.pattern, []).append(_acl_fields(binding))
    return answer(ErrorCode.NONE, None, [{**_pattern_fields(p), "acls": acls} for p, acls in resources.items()])


async def handle_create_acls(ctx: RequestContext, request: Any) -> dict[str, Any]:
    def result(code: int = ErrorCode.NONE, message: str | None = None) -> dict[str, Any]:
        return {"error_code": code, "error_message": message}

    refusal = _refusal(ctx)
    if refusal is not None:
        return {"throttle_time": 0, "results": [result(*refusal) for _ in request.creations]}
    store = ctx.broker.acl_store
    assert store is not None
    outcomes = await store.create([_binding(c) for c in request.creations])
    return {"throttle_time": 0,
            "results": [result() if e is None else result(e.code, e.message) for e in outcomes]}


async def handle_delete_acls(ctx: RequestContext, request: Any) -> dict[str, Any]:
    def result(code: int = ErrorCode.NONE, message: str | None = None,
               matching: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {"error_code": code, "error_message": message, "matching_acls": matching or []}

    refusal = _refusal(ctx)
    if refusal is not None:
        return {"throttle_time": 0, "filter_results": [result(*refusal) for _ in request.filters]}
    store = ctx.broker.acl_store
    assert store is not None
    filters = [_filter(f) for f in request.filters]
    valid = [f for f in filters if f.unknown_element() is None]
    deleted = iter(await store.delete(valid))
    results = []
    for f in filters:
        unknown = f.unknown_element()
        if unknown is not None:
            results.append(result(ErrorCode.INVALID_REQUEST, f"Filters contain UNKNOWN elements: {unknown}"))
            continue
        results.append(result(matching=[
            {"error_code": ErrorCode.NONE if e is None else e.code, "error_message": None if e is None else e.message,
             **_pattern_fields(b.pattern), **_acl_fields(b)}
            for b, e in next(deleted)]))
    return {"throttle_time": 0, "filter_results": results}


def _refusal(ctx: RequestContext) -> tuple[int, str] | None:
    """Why the caller may not change ACLs here (as Kafka checks: authorization first), or None."""
    if not allowed_on_cluster(ctx, AclOperation.ALTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, NOT_AUTHORIZED
    if ctx.broker.acl_store is None:
        return ErrorCode.SECURITY_DISABLED, "No Authorizer is configured."
    return None
