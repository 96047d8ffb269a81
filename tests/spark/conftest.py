"""Spark fixtures: one local[2] SparkSession for the whole run, and a broker process.

PySpark needs a Java runtime; when none is installed, the ``spark`` fixture installs Debian's
``openjdk-17-jre-headless`` with apt-get (the README's test command runs as root on a fresh machine).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.compat.conftest import BrokerProcess, running_broker


def _ensure_java() -> None:
    if shutil.which("java"):
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", "openjdk-17-jre-headless"]):
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            pytest.fail(f"PySpark needs Java and {' '.join(cmd)} failed:\n{result.stderr[-2000:]}")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    _ensure_java()
    from pyspark.sql import SparkSession

    import odradek.spark

    session = (SparkSession.builder.master("local[2]").appName("odradek-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    odradek.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"log.segment.bytes": str(16 << 20), "transaction.state.log.num.partitions": "4",
                 "offsets.topic.num.partitions": "4"}
    with running_broker(tmp_path_factory.mktemp("spark-broker"), overrides) as b:
        yield b
