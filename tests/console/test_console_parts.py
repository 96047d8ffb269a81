"""The console's pure parts: lag history bounds, the SVG chart, message filters and formats, Kafka's partitioner."""

from __future__ import annotations

from odradek.console.lag_history import LagHistory, chart_svg
from odradek.console.messages import Filter, Message, default_partition, murmur2, show


def test_lag_history_samples_at_most_once_per_interval_and_stays_bounded() -> None:
    h = LagHistory(interval_ms=1000, keep=3, max_groups=2)
    assert h.sample(0, {"a": 5, "b": 1, "c": 9})  # c: over max_groups, not kept
    assert not h.sample(500, {"a": 6})  # too soon
    for t in range(1, 6):
        assert h.sample(t * 1000, {"a": t, "b": 1})
    assert h.series("a") == [(3000, 3), (4000, 4), (5000, 5)]
    assert h.series("c") == []
    # a group gone for as long as the kept samples span is forgotten, making room for another
    for t in range(6, 10):
        h.sample(t * 1000, {"a": 0})
    assert h.series("b") == []
    h.sample(10_000, {"c": 2})
    assert h.series("c") == [(10_000, 2)]


def test_chart_svg() -> None:
    assert chart_svg([]) == ""
    svg = chart_svg([(0, 0), (1000, 10), (2000, 5)], width=100, height=50)
    assert svg.startswith("<svg") and 'points="4.0,46.0 50.0,4.0 96.0,25.0"' in svg and "max 10" in svg


def test_filters_match_key_value_and_headers() -> None:
    m = Message(0, 1, 0, b"user-1", b'{"a": 1}', (("source", b"web"), ("flag", None)))
    assert Filter().empty and Filter().matches(m)
    assert Filter(key="user").matches(m) and not Filter(key="other").matches(m)
    assert Filter(value='"a"').matches(m)
    assert Filter(header="flag").matches(m) and Filter(header="source=we").matches(m)
    assert not Filter(header="source=app").matches(m) and not Filter(header="missing").matches(m)
    assert not Filter(key="user", value="b").matches(m)


def test_show_formats() -> None:
    assert show(None, "text") == "null"
    assert show(b"\x00\xff", "hex") == "00 ff"
    assert show(b'{"a":[1]}', "json") == '{\n  "a": [\n    1\n  ]\n}'
    assert show(b"not json", "json") == "not json"
    assert show(b"\xff", "text") == "\ufffd"
    assert show(b"x" * 10, "text", limit=4) == "xxxx … (10 bytes)"


def test_murmur2_matches_kafkas() -> None:
    # values of Kafka's Utils.murmur2 (UtilsTest.testMurmur2)
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    assert 0 <= default_partition(b"abc", 7) < 7 and default_partition(b"abc", 7) == (479470107 & 0x7FFFFFFF) % 7
