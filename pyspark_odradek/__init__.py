"""Lets PySpark 4 find the ``odradek`` data source by itself: Spark registers the ``DefaultSource`` of
every installed ``pyspark_*`` package at startup, so ``spark.read.format("odradek")`` needs no
``spark.dataSource.register`` call."""

from odradek.spark.source import OdradekDataSource as DefaultSource

__all__ = ["DefaultSource"]
