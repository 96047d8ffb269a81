"""``--config`` / ``--add-config`` values: comma-separated pairs, kafka-configs' ``[a,b]`` lists, and values with
commas as kafka-topics takes them (``cleanup.policy=compact,delete``)."""

from __future__ import annotations

import pytest

from odradek.cli._client import CliError, parse_pairs


@pytest.mark.parametrize(("items", "expected"), [
    (["retention.ms=1000"], {"retention.ms": "1000"}),
    (["cleanup.policy=compact,delete"], {"cleanup.policy": "compact,delete"}),
    (["a=1,b=2", "c=3"], {"a": "1", "b": "2", "c": "3"}),
    (["leader.replication.throttled.replicas=[0:1,1:2],retention.ms=5"],
     {"leader.replication.throttled.replicas": "0:1,1:2", "retention.ms": "5"}),
    (["cleanup.policy=compact,delete,min.insync.replicas=2"], {"cleanup.policy": "compact,delete",
                                                                 "min.insync.replicas": "2"}),
])
def test_pairs(items: list[str], expected: dict[str, str]) -> None:
    assert parse_pairs(items, "--config") == expected


def test_a_value_without_a_key_is_refused() -> None:
    with pytest.raises(CliError, match="is not KEY=VALUE"):
        parse_pairs(["retention.ms"], "--config")
