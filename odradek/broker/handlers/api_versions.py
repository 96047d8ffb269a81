"""ApiVersions: what the broker supports, derived from ``protocol.apis.SUPPORTED``."""

from __future__ import annotations

from typing import Any

from odradek.broker.context import RequestContext
from odradek.protocol import apis, entities
from odradek.protocol.errors import ErrorCode


def _ranges() -> list[dict[str, int]]:
    return [
        {"api_key": r.key, "min_version": r.min_version, "max_version": r.max_version}
        for r in sorted(apis.SUPPORTED.values(), key=lambda r: r.key)
    ]


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return {"error_code": ErrorCode.NONE, "api_keys": _ranges(), "throttle_time": 0}


def unsupported_version_body() -> bytes:
    """The v0 answer to an ApiVersions request of a version this broker does not know (KIP-511)."""
    response = entities.build(
        apis.response_class(apis.API_VERSIONS, 0),
        {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _ranges()},
    )
    return apis.encode_body(response)
