"""The pre-decode guard against array counts that kio's native reader cannot survive."""

from __future__ import annotations

import dataclasses
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol import apis, array_bounds, entities

# Every request the broker accepts, by (api key, version).
REQUESTS = [(key, v) for key, r in sorted(apis.SUPPORTED.items()) for v in range(r.min_version, r.max_version + 1)]


def _filled(cls: type, depth: int = 0, items: int = 2) -> Any:
    """An instance with every array holding ``items`` entries (nested ones filled too, two levels deep),
    strings and bytes non-empty, so every length and count field is exercised."""
    values: dict[str, Any] = {}
    for f in entities.fields_of(cls):
        if f.is_array:
            if f.nested is not None:
                values[f.name] = [_filled(f.nested, depth + 1, items) for _ in range(items if depth < 2 else 0)]
            elif f.kafka_type == "string":
                values[f.name] = ["ab\u00e9" * 3] * items
            elif f.kafka_type in ("int8", "int16", "int32", "int64"):
                values[f.name] = [1] * items
            elif f.kafka_type == "uuid":
                values[f.name] = [uuid.uuid4()] * items
        elif f.nested is not None:
            values[f.name] = _filled(f.nested, depth + 1, items)
        elif f.kafka_type == "string":
            values[f.name] = "\U0001f600x" * 4  # 4-byte UTF-8 sequences followed by ASCII: a "long varint" look
        elif f.kafka_type in ("bytes", "records"):
            values[f.name] = b"\xff\xff\xff\xff\x7f" * 3
    return entities.build(cls, values)


@pytest.mark.parametrize(("api_key", "version"), REQUESTS)
def test_every_valid_request_passes(api_key: int, version: int) -> None:
    cls = apis.request_class(api_key, version)
    for request in (entities.build(cls, {}), _filled(cls)):
        body = apis.encode_body(request)
        array_bounds.check(cls, body, 0)
        apis.decode_request(api_key, version, body, 0)  # and kio reads it back


def test_a_count_beyond_32_bits_is_refused_before_kio_sees_it() -> None:
    cls = apis.request_class(apis.OFFSET_FETCH, 8)
    body = b"\xce\xe7\xa9\xa7\x17\xd1"  # groups: a 5-byte varint of 6256489422
    assert array_bounds.needs_check(body)
    with pytest.raises(array_bounds.ArrayBoundsError, match="longer than a 32-bit count"):
        array_bounds.check(cls, body, 0)


def test_a_count_larger_than_the_bytes_left_is_refused() -> None:
    cls = apis.request_class(apis.METADATA, 1)  # legacy: int32 count
    with pytest.raises(array_bounds.ArrayBoundsError, match="1000 items but only 2 bytes"):
        array_bounds.check(cls, struct.pack(">i", 1000) + b"\x00\x00", 0)


@settings(max_examples=300, deadline=None)
@given(key_version=st.sampled_from([kv for kv in REQUESTS if apis.request_is_flexible(*kv)]),
       data=st.binary(max_size=64))
def test_random_bodies_never_crash_the_walk(key_version: tuple[int, int], data: bytes) -> None:
    cls = apis.request_class(*key_version)
    try:
        array_bounds.check(cls, data, 0)
    except array_bounds.ArrayBoundsError:
        return
    if array_bounds.needs_check(data):  # the walk let it through: kio must not abort on it either
        try:
            apis.decode_request(*key_version, data, 0)
        except Exception:  # any Python error is fine; an abort would end the test run
            pass


def test_fields_follow_the_generated_classes() -> None:
    cls = apis.request_class(apis.FETCH, 13)
    names = [f.name for f in entities.fields_of(cls)]
    assert names == [f.name for f in dataclasses.fields(cls)]
