"""The error codes of a response, counted as Kafka counts them for ``ErrorsPerSec`` (``AbstractResponse.errorCounts``).

Every field whose name ends in ``error_code`` (``error_code``, ``partition_error_code``, ...) of the response and of
its nested entities counts once, ``NONE`` included, so that a request's errors can be read against its requests.

Invariants: the walk of a class is planned once (``fields_of``, cached) and reads attributes only; counts only grow.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from odradek.protocol.entities import fields_of

ErrorCounts = dict[int, int]  # error code -> how many times a response carried it


@cache
def _plan(cls: type) -> tuple[tuple[str, ...], tuple[tuple[str, bool], ...]]:
    """(error code fields, (nested entity field, is an array) pairs) of a kio entity class."""
    fields = fields_of(cls)
    codes = tuple(f.name for f in fields if f.name.endswith("error_code") and f.nested is None)
    nested = tuple((f.name, f.is_array) for f in fields if f.nested is not None)
    return codes, nested


def count_errors(entity: Any, counts: ErrorCounts) -> None:
    """Add the error codes of ``entity`` (a kio response or nested entity) and of everything nested in it."""
    codes, nested = _plan(type(entity))
    for name in codes:
        code = int(getattr(entity, name))
        counts[code] = counts.get(code, 0) + 1
    for name, is_array in nested:
        value = getattr(entity, name)
        if value is None:
            continue
        if is_array:
            for item in value:
                count_errors(item, counts)
        else:
            count_errors(value, counts)


def add_code(counts: ErrorCounts, code: int, n: int = 1) -> None:
    counts[code] = counts.get(code, 0) + n
