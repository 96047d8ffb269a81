"""The connector's options, named as Spark's own Kafka source names them, parsed and checked once.

Options are case-insensitive in Spark; they arrive here as a dict with lower-cased keys. ``kafka.*``
options go to the client (confluent-kafka) with the prefix removed. Invalid combinations are a
``ValueError`` naming the option and what is accepted, raised on the driver before any task runs.

Offsets in JSON follow Spark: ``{"topic": {"0": 23, "1": -2}}`` where -2 means earliest and -1 latest;
timestamps in JSON: ``{"topic": {"0": 1700000000000}}``.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

EARLIEST = -2
LATEST = -1


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str | None = None  # subscribePattern
    assign: dict[str, tuple[int, ...]] | None = None  # assign


@dataclass(frozen=True, slots=True)
class Bound:
    """Where a range starts or ends: a named offset, per-partition offsets, or timestamps."""

    named: int | None = None  # EARLIEST or LATEST for every partition
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int | None = None  # one timestamp for every partition
    timestamps: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    client: dict[str, str]
    subscription: Subscription
    starting: Bound
    ending: Bound
    include_headers: bool = False
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    poll_timeout_ms: int = 120_000
    timestamp_strategy: str = "error"  # startingOffsetsByTimestampStrategy: error | latest


def consumer_config(client: dict[str, str]) -> dict[str, Any]:
    """confluent-kafka settings for a connector consumer: never joins a group, never commits."""
    return {**client, "group.id": f"odradek-spark-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "enable.partition.eof": True, "auto.offset.reset": "error"}


def _bool(name: str, value: str) -> bool:
    low = value.strip().lower()
    if low not in ("true", "false"):
        raise ValueError(f"option {name}={value!r} is invalid: use true or false")
    return low == "true"


def _json_map(name: str, value: str) -> dict[tuple[str, int], int]:
    try:
        data = json.loads(value)
    except json.JSONDecodeError as e:
        raise ValueError(f"option {name} is not valid JSON ({e}): expected e.g. {{\"topic\": {{\"0\": 42}}}}") from None
    if not isinstance(data, dict):
        raise ValueError(f"option {name} must be a JSON object of topics, e.g. {{\"topic\": {{\"0\": 42}}}}")
    out: dict[tuple[str, int], int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise ValueError(f"option {name}: topic {topic!r} must map partitions to numbers")
        for p, v in parts.items():
            try:
                out[(topic, int(p))] = int(v)
            except (TypeError, ValueError):
                raise ValueError(f"option {name}: {topic}[{p}] = {v!r} is not a number") from None
    return out


def _bound(opts: dict[str, str], prefix: str, *, ending: bool) -> Bound:
    ts = opts.get(f"{prefix}timestamp")
    if ts is not None:
        try:
            return Bound(timestamp=int(ts))
        except ValueError:
            raise ValueError(f"option {prefix}Timestamp={ts!r} is not a number of milliseconds") from None
    by_ts = opts.get(f"{prefix}offsetsbytimestamp")
    if by_ts is not None:
        return Bound(timestamps=_json_map(f"{prefix}OffsetsByTimestamp", by_ts))
    raw = opts.get(f"{prefix}offsets")
    default = LATEST if ending else EARLIEST
    if raw is None:
        return Bound(named=default)
    low = raw.strip().lower()
    if low == "earliest":
        if ending:
            raise ValueError("option endingOffsets=earliest is not allowed: use latest or per-partition JSON")
        return Bound(named=EARLIEST)
    if low == "latest":
        return Bound(named=LATEST)
    offsets = _json_map(f"{prefix}Offsets", raw)
    if ending and any(v == EARLIEST for v in offsets.values()):
        raise ValueError("option endingOffsets: -2 (earliest) is not allowed as an ending offset")
    return Bound(offsets=offsets)


def parse(options: dict[str, Any], *, batch: bool = True) -> SourceOptions:
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    client = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    if "bootstrap.servers" not in client:
        raise ValueError("option kafka.bootstrap.servers is required, e.g. .option(\"kafka.bootstrap.servers\", "
                         "\"127.0.0.1:9092\")")
    for key in ("group.id", "auto.offset.reset", "enable.auto.commit", "key.deserializer", "value.deserializer"):
        if key in client:
            raise ValueError(f"option kafka.{key} is not supported: the connector manages it (as Spark's Kafka "
                             "source does)")
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(chosen) != 1:
        raise ValueError("exactly one of the options subscribe, subscribePattern or assign is required"
                         + (f" (got {', '.join(chosen)})" if chosen else ""))
    sub: Subscription
    if "subscribe" in opts:
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise ValueError("option subscribe names no topic")
        sub = Subscription(topics=topics)
    elif "subscribepattern" in opts:
        try:
            re.compile(opts["subscribepattern"])
        except re.error as e:
            raise ValueError(f"option subscribePattern is not a valid regular expression: {e}") from None
        sub = Subscription(pattern=opts["subscribepattern"])
    else:
        try:
            data = json.loads(opts["assign"])
            assign = {t: tuple(int(p) for p in ps) for t, ps in data.items()}
        except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
            raise ValueError("option assign must be JSON like {\"topic\": [0, 1]}") from None
        sub = Subscription(assign=assign)
    starting = _bound(opts, "starting", ending=False)
    if batch and starting.named == LATEST:
        raise ValueError("option startingOffsets=latest is not allowed for a batch query: use earliest or JSON")
    ending = _bound(opts, "ending", ending=True)
    min_partitions = opts.get("minpartitions")
    mp = None
    if min_partitions is not None:
        try:
            mp = int(min_partitions)
        except ValueError:
            mp = 0
        if mp < 1:
            raise ValueError(f"option minPartitions={min_partitions!r} must be a positive integer")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise ValueError(f"option startingOffsetsByTimestampStrategy={strategy!r} is invalid: use error or latest")
    return SourceOptions(
        client=client, subscription=sub, starting=starting, ending=ending,
        include_headers=_bool("includeHeaders", opts.get("includeheaders", "false")),
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        min_partitions=mp,
        poll_timeout_ms=int(opts.get("kafkaconsumer.polltimeoutms", "120000")),
        timestamp_strategy=strategy,
    )
