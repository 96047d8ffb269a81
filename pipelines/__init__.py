"""Example pipelines on the ``odradek`` Spark data source (see ``pipelines/README.md``).

- ``pipelines.offline_load``: a topic into Parquet partitioned by date, the consumed offsets stored with the
  output so that each run continues exactly where the previous one stopped.
- ``pipelines.clickstream``: a page-view generator, and a streaming job computing event-time windowed
  aggregates with a watermark into another topic and into Parquet.
"""

from __future__ import annotations

from typing import Any


def spark_session(app_name: str) -> Any:
    """The SparkSession of a pipeline's command line: the one ``spark-submit`` made, or a local one.

    Dates and windows are computed in UTC. The ``odradek`` format is registered explicitly, which an
    editable install needs and an installed package does not mind.
    """
    from pyspark.sql import SparkSession

    import odradek.spark

    spark = (SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    odradek.spark.register(spark)
    return spark
