"""Option parsing and range planning, without Spark: every refusal names the option."""

from __future__ import annotations

import pytest

from odradek.spark import options as opt
from odradek.spark.offsets import DataLossError, OffsetRange, plan, split

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


@pytest.mark.parametrize(("extra", "message"), [
    ({"kafka.bootstrap.servers": None}, "kafka.bootstrap.servers is required"),
    ({"subscribe": None}, "exactly one of the options subscribe"),
    ({"assign": '{"t": [0]}'}, "exactly one of the options subscribe"),
    ({"startingOffsets": "latest"}, "startingOffsets=latest is not allowed for a batch"),
    ({"endingOffsets": "earliest"}, "endingOffsets=earliest is not allowed"),
    ({"startingOffsets": "{nope"}, "not valid JSON"),
    ({"startingOffsets": '{"t": {"0": "x"}}'}, "is not a number"),
    ({"minPartitions": "0"}, "minPartitions"),
    ({"includeHeaders": "yes"}, "includeHeaders"),
    ({"kafka.group.id": "g"}, "kafka.group.id is not supported"),
    ({"subscribe": None, "subscribePattern": "("}, "not a valid regular expression"),
    ({"startingOffsetsByTimestampStrategy": "maybe"}, "error or latest"),
])
def test_bad_options_are_refused_with_the_option_named(extra: dict[str, str | None], message: str) -> None:
    options = {k: v for k, v in {**BASE, **extra}.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        opt.parse(options)


def test_options_are_case_insensitive_and_kafka_options_reach_the_client() -> None:
    o = opt.parse({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "Subscribe": "a, b", "kafka.fetch.max.bytes": "100",
                   "startingOffsets": '{"a": {"0": 5, "1": -2}}', "endingOffsets": "latest"})
    assert o.client == {"bootstrap.servers": "h:1", "fetch.max.bytes": "100"}
    assert o.subscription.topics == ("a", "b")
    assert o.starting.offsets == {("a", 0): 5, ("a", 1): -2} and o.ending.named == opt.LATEST


def test_plan_resolves_named_json_and_timestamp_bounds() -> None:
    marks = {("t", 0): (10, 100), ("t", 1): (0, 50)}
    o = opt.parse({**BASE, "startingOffsets": '{"t": {"0": 20, "1": -2}}', "endingOffsets": '{"t": {"0": -1}}'})
    assert plan(o, marks, {}, {}) == [OffsetRange("t", 0, 20, 100), OffsetRange("t", 1, 0, 50)]
    o = opt.parse({**BASE, "startingTimestamp": "1000"})
    assert plan(o, marks, {("t", 0): 42, ("t", 1): 7}, {}) == [OffsetRange("t", 0, 42, 100), OffsetRange("t", 1, 7, 50)]
    with pytest.raises(ValueError, match="no record of t-1"):
        plan(o, marks, {("t", 0): 42, ("t", 1): -1}, {})
    lenient = opt.parse({**BASE, "startingTimestamp": "1000", "startingOffsetsByTimestampStrategy": "latest"})
    assert plan(lenient, marks, {("t", 0): 42, ("t", 1): -1}, {})[1] == OffsetRange("t", 1, 50, 50)


def test_plan_data_loss_both_ways() -> None:
    marks = {("t", 0): (10, 100)}
    strict = opt.parse({**BASE, "startingOffsets": '{"t": {"0": 3}}'})
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        plan(strict, marks, {}, {})
    lenient = opt.parse({**BASE, "startingOffsets": '{"t": {"0": 3}}', "failOnDataLoss": "false"})
    assert plan(lenient, marks, {}, {}) == [OffsetRange("t", 0, 10, 100)]


def test_split_covers_each_range_exactly_and_proportionally() -> None:
    ranges = [OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 5, 105), OffsetRange("t", 2, 7, 7)]
    parts = split(ranges, 10)
    assert len(parts) >= 10
    for r in ranges:
        mine = sorted((p.start, p.end) for p in parts if p.partition == r.partition)
        covered = [o for s, e in mine for o in range(s, e)]
        assert covered == list(range(r.start, r.end))
    assert sum(1 for p in parts if p.partition == 0) == 9
    assert split(ranges, None) == ranges[:2]
