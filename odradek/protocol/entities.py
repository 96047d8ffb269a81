"""Version-agnostic construction of kio's generated request/response dataclasses.

kio generates one dataclass family per API version. Handlers describe a response once, as plain
dicts and lists; ``build(cls, values)`` turns that into ``cls`` (one version's class): fields the
version lacks are dropped, fields the handler left out get the schema's zero value, nested lists of
dicts become tuples of the nested class, ints become ``timedelta`` or error codes where the schema
wants them.

Invariants: ``build`` never invents a non-zero value, and rejects unknown nested shapes with
``TypeError`` (a bug in a handler, not bad client input).
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode as KioErrorCode

_ZERO_UUID = uuid.UUID(int=0)


@dataclasses.dataclass(frozen=True, slots=True)
class FieldInfo:
    name: str
    kafka_type: str | None
    nullable: bool
    nested: type | None  # entity class of a nested entity or array of entities
    is_array: bool
    has_default: bool
    tag: int | None  # the tag of a tagged field (written in the tagged-field section), else None


@cache
def fields_of(cls: type) -> tuple[FieldInfo, ...]:
    """The schema of a kio entity class, field by field in wire order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        nullable = False
        args = typing.get_args(hint)
        origin = typing.get_origin(hint)
        if origin in (typing.Union, types.UnionType) and type(None) in args:
            nullable = True
            hint = next(a for a in args if a is not type(None))
            origin, args = typing.get_origin(hint), typing.get_args(hint)
        is_array = origin is tuple
        inner = args[0] if is_array and args else hint
        nested = inner if dataclasses.is_dataclass(inner) else None
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        out.append(FieldInfo(f.name, f.metadata.get("kafka_type"), nullable, nested, is_array, has_default,
                             f.metadata.get("tag")))
    return tuple(out)


def _zero(info: FieldInfo) -> Any:
    if info.nullable:
        return None
    if info.is_array:
        return ()
    if info.nested is not None:
        return build(info.nested, {})
    kt = info.kafka_type
    if kt in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        return 0
    if kt == "float64":
        return 0.0
    if kt == "string":
        return ""
    if kt in ("bytes", "records"):
        return b""
    if kt == "bool":
        return False
    if kt == "uuid":
        return _ZERO_UUID
    if kt == "error_code":
        return KioErrorCode.none
    if kt in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kt == "datetime_i64":
        return datetime.datetime.fromtimestamp(0, datetime.UTC)
    raise TypeError(f"no zero value for field {info.name} of kafka type {kt}")


def _convert(info: FieldInfo, value: Any) -> Any:
    if value is None:
        return None
    if info.nested is not None:
        if info.is_array:
            return tuple(v if isinstance(v, info.nested) else build(info.nested, v) for v in value)
        return value if isinstance(value, info.nested) else build(info.nested, value)
    if info.is_array:
        return tuple(value)
    kt = info.kafka_type
    if kt == "error_code" and not isinstance(value, KioErrorCode):
        return KioErrorCode(int(value))
    if kt in ("timedelta_i32", "timedelta_i64") and not isinstance(value, datetime.timedelta):
        return datetime.timedelta(milliseconds=int(value))
    if kt == "datetime_i64" and isinstance(value, int):
        if value < 0:
            return None
        return datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)
    return value


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """An instance of ``cls`` from ``values``; keys that ``cls`` lacks are ignored."""
    kwargs: dict[str, Any] = {}
    for info in fields_of(cls):
        if info.name in values:
            kwargs[info.name] = _convert(info, values[info.name])
        elif not info.has_default:
            kwargs[info.name] = _zero(info)
    return cls(**kwargs)


def field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields_of(cls))


def millis(value: datetime.timedelta | int) -> int:
    """A kio duration field as integer milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)
