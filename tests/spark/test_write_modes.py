"""Save modes of batch writes: Overwrite is refused with a message that points to ``.mode("append")`` (no
SparkSession needed: the writer is built directly, as PySpark builds it)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from odradek.spark.source import OdradekDataSource
from odradek.spark.writer import BatchWriter

SCHEMA = StructType([StructField("value", StringType())])
OPTIONS = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t"}


def test_overwrite_is_refused_with_a_pointer_to_append() -> None:
    with pytest.raises(ValueError) as info:
        OdradekDataSource(OPTIONS).writer(SCHEMA, True)
    text = str(info.value)
    assert '.mode("append")' in text and "docs/spark.md" in text


def test_append_builds_a_writer() -> None:
    assert isinstance(OdradekDataSource(OPTIONS).writer(SCHEMA, False), BatchWriter)
