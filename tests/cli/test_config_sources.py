"""Where a broker's keys come from (the properties file, ``ODRADEK_CFG_*`` variables), and what ``odradek serve``
makes of them: the precedence of the sources, warnings for the keys Odradek ignores, errors for unknown keys.

Pure tests (no broker) but the last one, which starts ``odradek serve`` and reads its log.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from odradek.broker.config import BrokerConfig, ConfigError, ignored_key_warning
from odradek.broker.config_sources import (
    env_name,
    environment_properties,
    key_from_env,
    parse_properties,
    read_properties,
)
from odradek.cli import cluster, serve
from odradek.cli.main import build_parser
from tests.broker.process import BrokerProcess

# -- the properties file ---------------------------------------------------------------------------------------


def test_separators_comments_and_blank_lines() -> None:
    text = (
        "# a comment\n"
        "! also a comment\n"
        "\n"
        "num.partitions=3\n"
        "log.dirs : /tmp/a\n"
        "broker.id 7\n"
        "   auto.create.topics.enable   =   false   \n"
        "cluster.id=\n"
    )
    assert parse_properties(text) == {
        "num.partitions": "3",
        "log.dirs": "/tmp/a",
        "broker.id": "7",
        "auto.create.topics.enable": "false   ",  # trailing spaces are the value's, as in Java
        "cluster.id": "",
    }
    assert (
        BrokerConfig.from_properties({"auto.create.topics.enable": "false   "}).values["auto.create.topics.enable"]
        is False
    )


def test_line_continuations_join_lines_without_leading_space() -> None:
    text = "listeners=PLAINTEXT://127.0.0.1:9092,\\\n          SSL://127.0.0.1:9093\nnext=1\n"
    assert parse_properties(text) == {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093", "next": "1"}


def test_escapes_and_unicode_escapes() -> None:
    text = "a\\=b\\:c\\ d=x\\=y\ntab=1\\t2\nname=caf\\u00e9\nraw=café\n"
    assert parse_properties(text) == {"a=b:c d": "x=y", "tab": "1\t2", "name": "café", "raw": "café"}


def test_a_key_given_twice_keeps_the_last_value() -> None:
    assert parse_properties("num.partitions=1\nnum.partitions=4\n") == {"num.partitions": "4"}


def test_a_malformed_escape_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("sasl.jaas.config=\\uZZZZ\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"server\.properties"):
        read_properties(path)


def test_a_file_that_is_not_utf8_is_read_as_java_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes("broker.rack=café\n".encode("iso-8859-1"))
    assert read_properties(path) == {"broker.rack": "café"}
    path.write_bytes("broker.rack=café\n".encode())
    assert read_properties(path) == {"broker.rack": "café"}


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        read_properties(tmp_path / "nope.properties")


# -- the environment ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NUM_PARTITIONS", "num.partitions"),
        ("ADVERTISED_LISTENERS", "advertised.listeners"),
        ("LOG_CLEANER_MIN_CLEANABLE_RATIO", "log.cleaner.min.cleanable.ratio"),
        (
            "LISTENER_NAME_SASL__SSL_SCRAM___SHA___256_SASL_JAAS_CONFIG",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config",
        ),
    ],
)
def test_env_names_map_to_keys_and_back(name: str, key: str) -> None:
    assert key_from_env(name) == key
    assert env_name(key) == "ODRADEK_CFG_" + name


def test_only_prefixed_variables_are_read() -> None:
    environ = {
        "ODRADEK_CFG_NUM_PARTITIONS": "5",
        "ODRADEK_BOOTSTRAP_SERVER": "127.0.0.1:9092",
        "ODRADEK_CFG_": "nothing",
        "NUM_PARTITIONS": "9",
        "PATH": "/usr/bin",
    }
    props, origins = environment_properties(environ)
    assert props == {"num.partitions": "5"}
    assert origins == {"num.partitions": "environment variable ODRADEK_CFG_NUM_PARTITIONS"}


def _serve_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *argv])


def test_precedence_file_then_environment_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=2\ndefault.replication.factor=1\nlog.retention.hours=10\n", encoding="utf-8")
    environ = {"ODRADEK_CFG_NUM_PARTITIONS": "5", "ODRADEK_CFG_LOG_RETENTION_HOURS": "20"}
    config = serve.build_config(
        _serve_args("--config", str(path), "--override", "log.retention.hours=30", "--data-dir", str(tmp_path)),
        environ,
    )
    assert config.values["num.partitions"] == 5  # the environment over the file
    assert config.values["log.retention.hours"] == 30  # --override over the environment
    assert config.values["default.replication.factor"] == 1  # the file alone


def test_an_unknown_environment_key_names_the_variable_and_suggests_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        serve.build_config(_serve_args("--data-dir", str(tmp_path)), {"ODRADEK_CFG_NUM_PARTITONS": "5"})
    text = str(info.value)
    assert "unknown config key 'num.partitons'" in text
    assert "did you mean 'num.partitions'?" in text
    assert "environment variable ODRADEK_CFG_NUM_PARTITONS" in text


def test_an_unknown_key_of_the_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=2\nlog.retention.hour=5\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        serve.build_config(_serve_args("--config", str(path), "--data-dir", str(tmp_path)), {})
    assert "did you mean 'log.retention.hours'?" in str(info.value)
    assert f"(set by --config {path})" in str(info.value)


def test_a_bad_environment_value_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"num\.partitions='many' is invalid.*ODRADEK_CFG_NUM_PARTITIONS"):
        serve.build_config(_serve_args("--data-dir", str(tmp_path)), {"ODRADEK_CFG_NUM_PARTITIONS": "many"})


# -- unknown and ignored keys ------------------------------------------------------------------------------------


def test_an_unknown_key_suggests_a_close_one() -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_properties({"log.retention.hour": "1"})
    assert str(info.value).startswith("unknown config key 'log.retention.hour': did you mean 'log.retention.hours'?")


def test_an_unknown_key_far_from_any_says_to_check_the_spelling() -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_properties({"completely.made.up": "1"})
    assert "unknown config key 'completely.made.up': check its spelling" in str(info.value)
    assert "did you mean" not in str(info.value)


def test_ignored_keys_are_listed_and_their_warning_names_them() -> None:
    config = BrokerConfig.from_properties({"num.io.threads": "16", "num.partitions": "2", "process.roles": "broker"})
    assert config.ignored_keys == ("num.io.threads", "process.roles")
    text = ignored_key_warning("num.io.threads")
    assert text.startswith("config key 'num.io.threads' is accepted for compatibility with Kafka but has no effect")


def test_serve_logs_a_warning_per_ignored_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real ``odradek serve`` with one ignored key from the environment and one from --override."""
    monkeypatch.setenv("ODRADEK_CFG_NUM_NETWORK_THREADS", "8")
    monkeypatch.setenv("ODRADEK_CFG_NUM_PARTITIONS", "3")
    b = BrokerProcess(tmp_path / "data", tmp_path / "broker.log", ["num.io.threads=16"]).start()
    try:
        b.wait_for_log("started", timeout=20)
    finally:
        assert b.stop() == 0
    log = b.log()
    warnings = [line for line in log.splitlines() if "WARNING" in line and "has no effect" in line]
    assert len(warnings) == 2, log
    assert any("'num.network.threads'" in w for w in warnings)
    assert any("'num.io.threads'" in w for w in warnings)
    assert "num.partitions" not in " ".join(warnings)


def test_serve_stops_on_an_unknown_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    code = serve.run(_serve_args("--data-dir", str(tmp_path), "--override", "num.partitons=3"))
    assert code == 2
    err = capsys.readouterr().err
    assert "invalid configuration: unknown config key 'num.partitons': did you mean 'num.partitions'?" in err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_cluster_up_checks_the_environment_its_brokers_will_apply(tmp_path: Path) -> None:
    environ = {"ODRADEK_CFG_LOG_RETENTION_HOUR": "1"}
    with pytest.raises(cluster.ClusterError) as info:
        cluster.plan_brokers(1, tmp_path, 19092, "127.0.0.1:12181", {}, environ)
    assert "did you mean 'log.retention.hours'?" in str(info.value)
    assert "environment variable ODRADEK_CFG_LOG_RETENTION_HOUR" in str(info.value)
    plans = cluster.plan_brokers(1, tmp_path, 19092, "127.0.0.1:12181", {}, {"ODRADEK_CFG_NUM_PARTITIONS": "4"})
    assert "num.partitions" not in plans[0].properties  # each broker's serve applies its environment itself
