"""``odradek configs`` for users' SCRAM credentials, as kafka-configs takes them: the pure checks of
``--add-config 'SCRAM-SHA-256=[iterations=N,password=P]'``/``--delete-config`` (no broker), then the verb as a user
runs it (a subprocess) against one broker process for the module, with a login over SASL_PLAINTEXT to show the
credential the CLI made is the one the broker checks. No password ever appears in the output.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek.cli._client import CliError
from odradek.cli.configs_scram import ScramChanges, parse_value, scram_changes
from tests.broker.process import BrokerProcess, free_port
from tests.broker.scram_listeners import scram_wrap
from tests.cli.test_cli import Cli
from tests.compat.secure_clients import Security, roundtrip

ADD = "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]"


def changes(kinds: list[str], add: dict[str, str], delete: list[str], default: bool = False) -> ScramChanges | None:
    return scram_changes(kinds, default, add, delete)


def refused(kinds: list[str], add: dict[str, str], delete: list[str], default: bool = False) -> str:
    with pytest.raises(CliError) as info:
        changes(kinds, add, delete, default)
    assert info.value.exit_code == 2
    return info.value.message


def test_values_and_their_defaults() -> None:
    assert parse_value("SCRAM-SHA-256", "[iterations=8192,password=a,b=c]") == (8192, "a,b=c")
    assert parse_value("SCRAM-SHA-256", "[password=p]") == (4096, "p")
    assert parse_value("SCRAM-SHA-256", "iterations=-1,password=p") == (4096, "p")
    for bad in ("[iterations=8192]", "[pw=hunter2]", "[password=]", "[iterations=x,password=hunter2]"):
        with pytest.raises(CliError) as info:
            parse_value("SCRAM-SHA-256", bad)
        assert "hunter2" not in info.value.message and info.value.exit_code == 2
    with pytest.raises(CliError, match="less than the minimum 4096"):
        parse_value("SCRAM-SHA-512", "[iterations=4095,password=p]")


def test_scram_keys_only_for_a_named_user_alone() -> None:
    assert changes(["user"], {"producer_byte_rate": "1"}, []) is None  # quotas: not ours
    got = changes(["user"], {"SCRAM-SHA-256": "[password=p]"}, ["SCRAM-SHA-512"])
    assert got == ScramChanges({"SCRAM-SHA-256": (4096, "p")}, ["SCRAM-SHA-512"])
    assert "'p'" not in repr(got) and "SCRAM-SHA-256" in repr(got)
    assert "belong to a user alone" in refused(["user", "client-id"], {"SCRAM-SHA-256": "[password=p]"}, [])
    assert "belong to a user alone" in refused(["client-id"], {}, ["SCRAM-SHA-256"])
    assert "default user" in refused(["user"], {"SCRAM-SHA-256": "[password=p]"}, [], default=True)
    assert "both quota and SCRAM" in refused(["user"], {"SCRAM-SHA-256": "[password=p]"}, ["producer_byte_rate"])
    assert "both added and deleted" in refused(["user"], {"SCRAM-SHA-256": "[password=p]"}, ["SCRAM-SHA-256"])


# -- end to end ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    base = tmp_path_factory.mktemp("scram-cli")
    sasl_port = free_port()
    b = BrokerProcess(base / "data", base / "broker.log", ["num.partitions=1"], wrap=scram_wrap(sasl_port)).start()
    try:
        yield b, sasl_port
    finally:
        assert b.stop() == 0


def test_alter_describe_and_delete_like_kafka_configs(node: tuple[BrokerProcess, int]) -> None:
    broker, sasl_port = node
    cli = Cli(broker.bootstrap)
    user = ["--entity-type", "users", "--entity-name", "alice"]
    out = cli.ok("configs", "alter", *user, "--add-config", ADD)
    assert out == "Completed updating config for user-principal 'alice'.\n"
    cli.ok("configs", "alter", *user, "--add-config", "producer_byte_rate=1048576")
    assert cli.ok("configs", "describe", *user).splitlines() == [
        "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0",
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, "
        "SCRAM-SHA-512=iterations=4096"]
    security = Security("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", "alice-secret")
    assert roundtrip("confluent", f"127.0.0.1:{sasl_port}", security, "cli-login", [b"x"]) == [b"x"]
    cli.ok("configs", "alter", "--entity-type", "users", "--entity-name", "bob", "--add-config",
           "SCRAM-SHA-512=[password=bob-secret]")
    assert cli.ok("configs", "describe", "--entity-type", "users").splitlines() == [
        "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0",
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, "
        "SCRAM-SHA-512=iterations=4096",
        "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-512=iterations=4096"]
    cli.ok("configs", "alter", *user, "--delete-config", "SCRAM-SHA-512")
    r = cli("configs", "alter", *user, "--delete-config", "SCRAM-SHA-512")
    assert r.returncode == 1 and "RESOURCE_NOT_FOUND" in r.stderr
    r = cli("configs", "alter", *user, "--add-config", "SCRAM-SHA-256=[iterations=20000,password=alice-secret]")
    assert r.returncode == 1 and "Too many iterations (UNACCEPTABLE_CREDENTIAL)" in r.stderr
    assert "secret" not in r.stderr + r.stdout
    assert cli.ok("configs", "describe", *user).splitlines() == [
        "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0",
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192"]
    assert cli.ok("configs", "describe", "--entity-type", "users", "--entity-name", "nobody") == ""
    r = cli("configs", "alter", "--entity-type", "users", "--entity-default",
            "--add-config", "SCRAM-SHA-256=[password=p]")
    assert r.returncode == 2 and "default user" in r.stderr
