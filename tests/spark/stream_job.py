"""A streaming query run as its own process, so a test can SIGKILL it in the middle of a micro-batch.

``python -m tests.spark.stream_job BOOTSTRAP TOPIC OUT [available-now] [to-topic=NAME]``: reads TOPIC
from the beginning in micro-batches of 40 records into Parquet under OUT (checkpoint beside it), or
with ``to-topic=NAME`` into topic NAME through the exactly-once sink (checkpoint under OUT), each batch
slowed by a sleeping UDF so that a kill lands inside one.
"""

from __future__ import annotations

import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql.functions import col, udf
from pyspark.sql.types import LongType

import odradek.spark


@udf(LongType())
def _slow(offset: int) -> int:
    time.sleep(0.01)
    return offset


def main() -> None:
    bootstrap, topic, out = sys.argv[1:4]
    flags = sys.argv[4:]
    available_now = "available-now" in flags
    to_topic = next((f.split("=", 1)[1] for f in flags if f.startswith("to-topic=")), None)
    spark = (SparkSession.builder.master("local[2]").appName("stream-job").config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    odradek.spark.register(spark)
    df = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "40").load())
    if to_topic is None:
        writer = (df.select("partition", _slow(col("offset")).alias("offset"), "value").writeStream.format("parquet")
                  .option("path", f"{out}/data").option("checkpointLocation", f"{out}/checkpoint"))
    else:
        writer = (df.where(_slow(col("offset")) >= 0).select("key", "value").writeStream
                  .format("odradek").option("kafka.bootstrap.servers", bootstrap).option("topic", to_topic)
                  .option("checkpointLocation", f"{out}/checkpoint"))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0 seconds")
    query = writer.start()
    query.awaitTermination(300)
    spark.stop()


if __name__ == "__main__":
    main()
