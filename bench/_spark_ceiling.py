"""The ceiling of any PySpark Python data source on this machine: batches already in memory.

``CeilingSource`` ("arrow-ceiling") yields Arrow record batches in the odradek connector's schema,
built once per task before the first yield (100-byte values made unique by an 8-byte counter, null
keys, ~65 k rows a batch like one Fetch response of 8 MiB). Reading it costs Spark exactly what a
Python source's output costs -- the worker's Arrow stream, the JVM's conversion to rows -- and
nothing for fetching or decoding, so ``odradek / ceiling`` says how much of the gap to Parquet is
the connector's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

BATCH_ROWS = 65_536


class _Slice(InputPartition):  # type: ignore[misc]
    def __init__(self, rows: int, value_len: int) -> None:
        self.rows = rows
        self.value_len = value_len


class _Reader(DataSourceReader):
    def __init__(self, rows: int, partitions: int, value_len: int) -> None:
        self.rows, self.parts, self.value_len = rows, partitions, value_len

    def partitions(self) -> list[InputPartition]:
        share = -(-self.rows // self.parts)
        sizes = [min(share, self.rows - i * share) for i in range(self.parts)]
        return [_Slice(n, self.value_len) for n in sizes if n > 0]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa

        from odradek.spark.columnar import arrow_schema

        assert isinstance(partition, _Slice)
        n, width = BATCH_ROWS, partition.value_len
        values = np.frombuffer(np.random.bytes(n * width), dtype=np.uint8).reshape(n, width).copy()
        offsets = np.arange(0, n * width + 1, width, dtype=np.int32)
        schema = arrow_schema(False)
        done = 0
        while done < partition.rows:
            m = min(n, partition.rows - done)
            values[:, :8] = np.arange(done, done + n, dtype=">i8").view(np.uint8).reshape(n, 8)
            batch = pa.RecordBatch.from_arrays([
                pa.nulls(n, pa.binary()),
                pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(values.copy())]),
                pa.repeat("spark-bench", n).cast(pa.string()), pa.repeat(0, n).cast(pa.int32()),
                pa.array(np.arange(done, done + n, dtype=np.int64)),
                pa.array(np.full(n, 1_700_000_000_000_000, dtype=np.int64)).cast(pa.timestamp("us", tz="UTC")),
                pa.array(np.zeros(n, dtype=np.int32)),
            ], schema=schema)
            yield batch.slice(0, m) if m < n else batch
            done += m


class CeilingSource(DataSource):  # type: ignore[misc]
    @classmethod
    def name(cls) -> str:
        return "arrow-ceiling"

    def schema(self) -> str:
        from odradek.spark.source import SCHEMA

        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        o = self.options
        return _Reader(int(o["rows"]), int(o["partitions"]), int(o["valuelen"]))
