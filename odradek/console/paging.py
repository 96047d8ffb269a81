"""One page of a filtered, sorted list: what the topics and groups pages show.

Invariants: there is always at least one page (an empty list has one, empty); a page number out of range is
clamped to the first or last page, never an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Listing(Generic[T]):
    rows: list[T]
    total: int  # items matching the query
    page: int
    pages: int


def page_of(items: Sequence[S], page: int, page_size: int) -> tuple[Sequence[S], int, int]:
    """The items on ``page`` (clamped to 1..pages), that page's number and the number of pages."""
    pages = max((len(items) + page_size - 1) // page_size, 1)
    page = min(max(page, 1), pages)
    return items[(page - 1) * page_size : page * page_size], page, pages
