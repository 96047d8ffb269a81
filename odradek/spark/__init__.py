"""Odradek for Apache Spark: the ``odradek`` PySpark data source (``source.py``, ``writer.py``).

Installed as a package (``pip install odradek``), PySpark 4 finds the source by itself through the
``pyspark_odradek`` package. An editable install (``pip install -e .``) hides that package from
PySpark's lookup, so there call ``register(spark)`` once per session.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``odradek`` format with this SparkSession (needed only for editable installs)."""
    from odradek.spark.source import OdradekDataSource

    spark.dataSource.register(OdradekDataSource)
