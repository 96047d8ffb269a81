"""The cleaner's offset map: latest offset per key, bounded memory, refusal when full."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage.cleaner.offset_map import ENTRY_OVERHEAD, OffsetMap


def test_latest_offset_per_key_and_never_an_older_one() -> None:
    m = OffsetMap(100 * ENTRY_OVERHEAD)
    assert m.get(b"a") == -1 and m.latest_offset == -1
    assert m.put(b"a", 3) and m.put(b"b", 4) and m.put(b"a", 7)
    assert m.put(b"a", 5)  # a replayed older record never wins
    assert (m.get(b"a"), m.get(b"b"), m.get(b"c")) == (7, 4, -1)
    assert m.size == 2 and m.latest_offset == 7


def test_a_full_map_refuses_new_keys_but_updates_known_ones() -> None:
    m = OffsetMap(10 * (ENTRY_OVERHEAD + 2), load_factor=0.5)
    for i in range(5):
        assert m.put(f"k{i}".encode(), i)
    assert m.full
    assert not m.put(b"new", 99)
    assert m.get(b"new") == -1 and m.latest_offset == 4
    assert m.put(b"k0", 100) and m.get(b"k0") == 100


def test_long_keys_are_charged_their_length() -> None:
    m = OffsetMap(10 * ENTRY_OVERHEAD + 1000)
    assert m.put(b"x" * 900, 1)
    assert m.charged == 900 + ENTRY_OVERHEAD
    fitted = sum(m.put(b"%d" % i, i) for i in range(20))
    assert fitted < 10 and m.charged <= m.capacity


def test_clear_forgets_everything() -> None:
    m = OffsetMap(1 << 20)
    m.put(b"a", 1)
    m.clear()
    assert m.size == 0 and m.latest_offset == -1 and m.charged == 0 and m.get(b"a") == -1


@pytest.mark.parametrize(("memory", "factor"), [(ENTRY_OVERHEAD - 1, 0.9), (1000, 0.0), (1000, 1.5)])
def test_bad_settings_are_refused(memory: int, factor: float) -> None:
    with pytest.raises(ValueError):
        OffsetMap(memory, factor)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=6), st.integers(0, 10**12)), max_size=300),
       st.integers(1, 400))
def test_agrees_with_a_dict_model_until_full(puts: list[tuple[bytes, int]], entries: int) -> None:
    m = OffsetMap(entries * (ENTRY_OVERHEAD + 6))
    model: dict[bytes, int] = {}
    charged = 0
    for key, offset in puts:
        accepted = m.put(key, offset)
        if key in model:
            assert accepted
            model[key] = max(model[key], offset)
        elif charged + len(key) + ENTRY_OVERHEAD <= m.capacity:
            assert accepted
            model[key] = offset
            charged += len(key) + ENTRY_OVERHEAD
        else:
            assert not accepted
    assert m.size == len(model) and m.charged == charged <= m.capacity
    for key, offset in model.items():
        assert m.get(key) == offset
    assert m.latest_offset == max(model.values(), default=-1)
