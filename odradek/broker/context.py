"""What a handler gets besides its request: the broker, the request header, the client's address."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from odradek.broker.broker import Broker
from odradek.protocol.frame import RequestHeader
from odradek.storage.segment import FileRegion


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    header: RequestHeader
    peer: str
    connection: dict[str, Any] = field(default_factory=dict)  # per-connection state

    @property
    def version(self) -> int:
        return self.header.api_version


class CloseConnection(Exception):
    """The request cannot be answered; close the connection and log this reason."""


@dataclass(slots=True)
class RawResponse:
    """A response body already laid out as bytes and file regions (sent with sendfile)."""

    chunks: list[bytes | FileRegion]

    @property
    def size(self) -> int:
        return sum(c.length if isinstance(c, FileRegion) else len(c) for c in self.chunks)
