"""``odradek configs describe|alter`` for client quotas (users, clients, (user, client-id) pairs, ips).

The pure parts need no broker: pairing of --entity-type/--entity-name/--entity-default, key and value checks,
the DescribeClientQuotas/AlterClientQuotas requests built (and decoded by the broker's own decoder, so a null
default name survives the wire), Java's double formatting and kafka-configs' output wording from response
objects; the verb itself runs in-process with the broker exchange replaced by canned responses.

The end-to-end tests run the verb as a subprocess, as a user runs it, against one real broker process for the
module. Entity names are unique per test; the default entities are changed by one test only.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

from odradek.cli import configs
from odradek.cli._client import CliError
from odradek.cli.main import build_parser, main
from odradek.protocol import apis
from tests.broker.process import BrokerProcess, free_port, serving
from tests.cli.test_cli import Cli

CLIENT_KEYS = "producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate"


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["configs", *argv])


def entities(*argv: str) -> list[tuple[str, str | None, bool]]:
    return [(e.kind, e.name, e.default) for e in configs.pair_entities(parse(*argv).entity_parts)]


def usage_error(*argv: str) -> CliError:
    with pytest.raises(CliError) as info:
        configs.pair_entities(parse(*argv).entity_parts)
    assert info.value.exit_code == 2
    return info.value


# -- pairing --------------------------------------------------------------------------------------------


def test_each_entity_type_takes_the_name_or_default_after_it() -> None:
    assert entities("describe", "--entity-type", "users", "--entity-name", "alice",
                    "--entity-type", "clients", "--entity-default") == [
        ("user", "alice", False), ("client-id", None, True)]
    assert entities("describe", "--entity-type", "users", "--entity-default",
                    "--entity-type", "clients", "--entity-name", "app") == [
        ("user", None, True), ("client-id", "app", False)]
    # the second type without a name: every client-id of alice (describe)
    assert entities("describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients") == [
        ("user", "alice", False), ("client-id", None, False)]
    # kafka-configs would pair the name with the first type; here it belongs to the type before it
    assert entities("describe", "--entity-type", "users", "--entity-type", "clients", "--entity-name", "app") == [
        ("user", None, False), ("client-id", "app", False)]
    assert entities("describe", "--entity-type", "ips", "--entity-name", "::1") == [("ip", "::1", False)]
    assert entities("describe", "--entity-type", "ip", "--entity-default") == [("ip", None, True)]


def test_a_single_type_takes_its_name_in_any_order_as_before() -> None:
    assert entities("describe", "--entity-name", "orders", "--entity-type", "topics") == [("topic", "orders", False)]
    assert entities("describe", "--entity-type", "brokers") == [("broker", None, False)]
    assert entities("alter", "--entity-name", "app", "--entity-type", "clients") == [("client-id", "app", False)]
    args = parse("describe", "--entity-name", "orders", "--entity-type", "topics", "--overrides-only")
    assert args.overrides_only and args.action == "describe"


@pytest.mark.parametrize(("argv", "needle"), [
    (("--entity-type", "clients", "--entity-name", "a", "--entity-name", "b"),
     "--entity-type clients is given two names: --entity-name 'a' and --entity-name 'b'"),
    (("--entity-type", "clients", "--entity-name", "a", "--entity-default"), "given two names"),
    (("--entity-name", "a", "--entity-type", "users", "--entity-type", "clients"), "comes before any --entity-type"),
    (("--entity-type", "topics", "--entity-type", "users"), "only users and clients can be given together"),
    (("--entity-type", "clients", "--entity-type", "clients"), "only users and clients can be given together"),
    (("--entity-type", "users", "--entity-type", "ips"), "only users and clients can be given together"),
    (("--entity-type", "topics", "--entity-default"), "--entity-default is for brokers, users, clients and ips"),
    (("--entity-type", "users", "--entity-name", ""), "has an empty --entity-name"),
    (("--entity-type", "ips", "--entity-name", "not-an-ip"), "is not an IP address"),
])
def test_bad_entity_options_are_usage_errors(argv: tuple[str, ...], needle: str) -> None:
    assert needle in usage_error("describe", *argv).message


def test_an_unknown_entity_type_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse("describe", "--entity-type", "groups")
    assert info.value.code == 2
    assert "invalid choice: 'groups'" in capsys.readouterr().err


# -- keys and values ------------------------------------------------------------------------------------


def changes(types: tuple[str, ...], add: list[str], delete: list[str] | None = None
            ) -> tuple[dict[str, float], list[str]]:
    ents = [configs.EntityArg(t, configs.ENTITY_TYPES[t], name="x") for t in types]
    return configs.quota_changes(ents, add, delete or [])


def test_quota_changes_parse_numbers_and_keys() -> None:
    assert changes(("clients",), ["producer_byte_rate=1048576,consumer_byte_rate=2e6", "request_percentage=.5"],
                   ["controller_mutation_rate"]) == (
        {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2e6, "request_percentage": 0.5},
        ["controller_mutation_rate"])
    assert changes(("users", "clients"), [], ["producer_byte_rate, consumer_byte_rate", "producer_byte_rate"]) == (
        {}, ["producer_byte_rate", "consumer_byte_rate"])
    assert changes(("ips",), ["connection_creation_rate=10"]) == ({"connection_creation_rate": 10.0}, [])


@pytest.mark.parametrize(("types", "add", "delete", "needle"), [
    (("clients",), ["retention.ms=1"], [], f"'retention.ms' is not a quota config of clients; the valid ones are: "
                                           f"{CLIENT_KEYS}"),
    (("users", "clients"), ["connection_creation_rate=1"], ["nope"],
     f"'connection_creation_rate', 'nope' are not quota configs of users and clients; the valid ones are: "
     f"{CLIENT_KEYS}"),
    (("ips",), ["producer_byte_rate=1"], [],
     "'producer_byte_rate' is not a quota config of ips; the valid ones are: connection_creation_rate"),
    (("ips",), [], ["request_percentage"], "the valid ones are: connection_creation_rate"),
    (("clients",), ["producer_byte_rate=fast"], [],
     "--add-config producer_byte_rate='fast': the value is not a number"),
    (("clients",), ["producer_byte_rate=1,2"], [], "the value is not a number"),
    (("clients",), ["producer_byte_rate=nan"], [], "the value is not a number"),
    (("clients",), ["producer_byte_rate="], [], "the value is not a number"),
    (("clients",), ["producer_byte_rate=1"], ["producer_byte_rate"], "producer_byte_rate is both added and deleted"),
    (("clients",), [], [], "configs alter needs --add-config and/or --delete-config"),
])
def test_bad_quota_changes_are_usage_errors(types: tuple[str, ...], add: list[str], delete: list[str],
                                            needle: str) -> None:
    with pytest.raises(CliError) as info:
        changes(types, add, delete)
    assert info.value.exit_code == 2
    assert needle in info.value.message


@pytest.mark.parametrize(("value", "text"), [
    (1048576.0, "1048576.0"), (2097152.0, "2097152.0"), (50.0, "50.0"), (0.5, "0.5"), (2.5, "2.5"),
    (9999999.0, "9999999.0"), (10485760.0, "1.048576E7"), (1e7, "1.0E7"), (1.5e9, "1.5E9"), (1e16, "1.0E16"),
    (0.001, "0.001"), (1e-4, "1.0E-4"), (1.25e-5, "1.25E-5"), (0.0, "0.0"), (-3.0, "-3.0"), (-1e8, "-1.0E8"),
    (float("inf"), "Infinity"), (float("nan"), "NaN"),
])
def test_values_print_as_java_doubles(value: float, text: str) -> None:
    assert configs.java_double(value) == text


# -- requests and output ----------------------------------------------------------------------------------


def _arg(kind: str, name: str | None = None, default: bool = False) -> configs.EntityArg:
    return configs.EntityArg(kind, configs.ENTITY_TYPES[kind], name, default)


def test_describe_request_filters_strictly_with_kafka_match_types() -> None:
    req = configs.describe_request([_arg("users", "alice"), _arg("clients", default=True)])
    assert req.strict is True
    assert [(c.entity_type, c.match_type, c.match) for c in req.components] == [
        ("user", 0, "alice"), ("client-id", 1, None)]
    req = configs.describe_request([_arg("ips")])
    assert [(c.entity_type, c.match_type, c.match) for c in req.components] == [("ip", 2, None)]


@pytest.mark.parametrize("version", [0, 1])
def test_requests_decode_as_the_broker_reads_them(version: int) -> None:
    """kafka-python's encoding of our requests, read by odradek's own decoder: null default names included."""
    req = configs.describe_request([_arg("users", "alice"), _arg("clients", default=True)])
    decoded = apis.decode_request(apis.DESCRIBE_CLIENT_QUOTAS, version, bytes(req.encode(version=version)), 0)
    assert decoded.strict is True
    assert [(c.entity_type, c.match_type, c.match) for c in decoded.components] == [
        ("user", 0, "alice"), ("client-id", 1, None)]

    alter = configs.alter_request([_arg("users", default=True), _arg("clients", "app")],
                                  {"producer_byte_rate": 1048576.0}, ["request_percentage"])
    decoded = apis.decode_request(apis.ALTER_CLIENT_QUOTAS, version, bytes(alter.encode(version=version)), 0)
    assert decoded.validate_only is False
    (entry,) = decoded.entries
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("user", None), ("client-id", "app")]
    assert [(o.key, o.value, o.remove) for o in entry.ops] == [
        ("producer_byte_rate", 1048576.0, False), ("request_percentage", 0.0, True)]


def describe_entry(components: list[tuple[str, str | None]], values: list[tuple[str, float]]) -> Any:
    e = DescribeClientQuotasResponse.EntryData
    return e(entity=[e.EntityData(entity_type=t, entity_name=n) for t, n in components],
             values=[e.ValueData(key=k, value=v) for k, v in values])


def test_output_follows_kafka_configs_wording() -> None:
    entries = [
        describe_entry([("client-id", "app"), ("user", "alice")], [("producer_byte_rate", 10485760.0)]),
        describe_entry([("client-id", "app")], [("producer_byte_rate", 1048576.0), ("consumer_byte_rate", 2097152.0)]),
        describe_entry([("user", "alice"), ("client-id", None)], [("request_percentage", 50.0)]),
        describe_entry([("client-id", None)], [("producer_byte_rate", 500.0)]),
        describe_entry([("user", None)], [("controller_mutation_rate", 2.5)]),
        describe_entry([("ip", "127.0.0.1")], [("connection_creation_rate", 10.0)]),
        describe_entry([("ip", None)], [("connection_creation_rate", 100.0)]),
    ]
    assert configs.format_quota_lines(entries) == [
        "Quota configs for the default ip are connection_creation_rate=100.0",
        "Quota configs for ip '127.0.0.1' are connection_creation_rate=10.0",
        "Quota configs for the default client-id are producer_byte_rate=500.0",
        "Quota configs for client-id 'app' are producer_byte_rate=1048576.0, consumer_byte_rate=2097152.0",
        "Quota configs for the default user-principal are controller_mutation_rate=2.5",
        "Quota configs for user-principal 'alice', the default client-id are request_percentage=50.0",
        "Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1.048576E7",
    ]
    assert configs.format_quota_lines(None) == []


# -- the verb in-process, with canned broker answers -----------------------------------------------------------


class FakeAdmin:
    def __init__(self, args: argparse.Namespace, verb: str, error_from: Any = None) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Broker:
    """Answers the requests ``configs.send`` would send, recording them."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, Any]] = []

    def __call__(self, admin: Any, what: str, request: Any) -> Any:
        self.sent.append((what, request))
        return self.answers.pop(0)


@pytest.fixture
def fake_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def install(*answers: Any) -> Broker:
        b = Broker(*answers)
        monkeypatch.setattr(configs, "send", b)
        monkeypatch.setattr(configs, "Admin", FakeAdmin)
        return b

    yield install


def described(*entries: Any, error_code: int = 0, error_message: str | None = None) -> Any:
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=error_code, error_message=error_message,
                                        entries=list(entries))


def altered(components: list[tuple[str, str | None]], error_code: int = 0, error_message: str | None = None) -> Any:
    e = AlterClientQuotasResponse.EntryData
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=[e(
        error_code=error_code, error_message=error_message,
        entity=[e.EntityData(entity_type=t, entity_name=n) for t, n in components])])


def verb(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["configs", *argv, "--bootstrap-server", "127.0.0.1:1"])
    out, err = capsys.readouterr()
    return code, out, err


def test_describe_prints_the_brokers_entries(fake_broker: Any, capsys: pytest.CaptureFixture[str]) -> None:
    b = fake_broker(described(describe_entry([("user", "alice"), ("client-id", None)], [("request_percentage", 50.0)])))
    code, out, _ = verb(capsys, "describe", "--entity-type", "users", "--entity-name", "alice",
                        "--entity-type", "clients")
    assert code == 0
    assert out == "Quota configs for user-principal 'alice', the default client-id are request_percentage=50.0\n"
    ((what, req),) = b.sent
    assert what == "describe the quotas of user-principal 'alice', every client-id"
    assert isinstance(req, DescribeClientQuotasRequest) and req.strict


def test_describe_shows_the_brokers_error(fake_broker: Any, capsys: pytest.CaptureFixture[str]) -> None:
    fake_broker(described(error_code=42, error_message="unknown match type 7"))
    code, out, err = verb(capsys, "describe", "--entity-type", "clients")
    assert code == 1 and out == ""
    assert "odradek configs: error: cannot describe the quotas of every client-id: unknown match type 7 " \
           "(INVALID_REQUEST)" in err


def test_alter_sends_one_entry_and_confirms(fake_broker: Any, capsys: pytest.CaptureFixture[str]) -> None:
    b = fake_broker(altered([("user", "alice"), ("client-id", None)]))
    code, out, _ = verb(capsys, "alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type",
                        "clients", "--entity-default", "--add-config", "request_percentage=50")
    assert code == 0
    assert out == "Completed updating config for user-principal 'alice', the default client-id.\n"
    ((what, req),) = b.sent
    assert what == "alter the quotas of user-principal 'alice', the default client-id"
    assert isinstance(req, AlterClientQuotasRequest) and req.validate_only is False
    (entry,) = req.entries
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("user", "alice"), ("client-id", None)]
    assert [(o.key, o.value, o.remove) for o in entry.ops] == [("request_percentage", 50.0, False)]


@pytest.mark.parametrize(("argv", "confirmation"), [
    (("--entity-type", "clients", "--entity-name", "app"), "client-id 'app'"),
    (("--entity-type", "clients", "--entity-default"), "the default client-id"),
    (("--entity-type", "users", "--entity-name", "alice"), "user-principal 'alice'"),
    (("--entity-type", "users", "--entity-default"), "the default user-principal"),
])
def test_alter_confirmation_names_the_entity(fake_broker: Any, capsys: pytest.CaptureFixture[str],
                                             argv: tuple[str, ...], confirmation: str) -> None:
    fake_broker(altered([]))
    code, out, _ = verb(capsys, "alter", *argv, "--add-config", "producer_byte_rate=1")
    assert code == 0 and out == f"Completed updating config for {confirmation}.\n"


def test_delete_checks_the_key_is_set_first(fake_broker: Any, capsys: pytest.CaptureFixture[str]) -> None:
    b = fake_broker(described(describe_entry([("client-id", None)], [("consumer_byte_rate", 5.0)])))
    code, _, err = verb(capsys, "alter", "--entity-type", "clients", "--entity-default",
                        "--delete-config", "producer_byte_rate")
    assert code == 1
    assert "cannot delete producer_byte_rate: not set for the default client-id" in err
    assert "`odradek configs describe --entity-type clients --entity-default`" in err
    assert len(b.sent) == 1  # nothing altered

    b = fake_broker(described(describe_entry([("client-id", None)], [("producer_byte_rate", 5.0)])),
                    altered([("client-id", None)]))
    code, out, _ = verb(capsys, "alter", "--entity-type", "clients", "--entity-default",
                        "--delete-config", "producer_byte_rate")
    assert code == 0 and out == "Completed updating config for the default client-id.\n"
    ops = b.sent[1][1].entries[0].ops
    assert [(o.key, o.remove) for o in ops] == [("producer_byte_rate", True)]


def test_alter_shows_the_brokers_per_entity_error(fake_broker: Any, capsys: pytest.CaptureFixture[str]) -> None:
    fake_broker(altered([("client-id", "app")], error_code=42,
                        error_message="producer_byte_rate must be a whole number, got 1.5"))
    code, out, err = verb(capsys, "alter", "--entity-type", "clients", "--entity-name", "app",
                          "--add-config", "producer_byte_rate=1.5")
    assert code == 1 and out == ""
    assert ("odradek configs: error: cannot alter the quotas of client-id 'app': producer_byte_rate must be a "
            "whole number, got 1.5 (INVALID_REQUEST)") in err


def test_usage_errors_need_no_broker(fake_broker: Any, capsys: pytest.CaptureFixture[str]) -> None:
    b = fake_broker()
    code, _, err = verb(capsys, "alter", "--entity-type", "clients", "--add-config", "producer_byte_rate=1")
    assert code == 2 and "needs an --entity-name or --entity-default after --entity-type clients" in err
    code, _, err = verb(capsys, "alter", "--entity-type", "ips", "--entity-name", "10.0.0.1",
                        "--add-config", "producer_byte_rate=1")
    assert code == 2 and "the valid ones are: connection_creation_rate" in err
    code, _, err = verb(capsys, "describe", "--entity-type", "clients", "--add-config", "producer_byte_rate=1")
    assert code == 2 and "--add-config/--delete-config are for alter" in err
    assert b.sent == []


def test_unreachable_broker_fails_within_the_timeout() -> None:
    cli = Cli(f"127.0.0.1:{free_port()}")  # nothing listens there
    started = time.monotonic()
    r = cli("configs", "describe", "--entity-type", "clients", "--request-timeout-ms", "800", timeout=20)
    assert time.monotonic() - started < 10
    assert r.returncode == 1
    assert "cannot reach a broker at 127.0.0.1:" in r.stderr and "odradek serve" in r.stderr


# -- end to end ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serving(tmp_path_factory.mktemp("quota-broker"))


@pytest.fixture(scope="module")
def cli(quota_broker: BrokerProcess) -> Cli:
    return Cli(quota_broker.bootstrap)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def quotas(cli: Cli, *argv: str) -> dict[str, dict[str, str]]:
    """``describe`` output as {entity words: {key: value as printed}}; every line must be a quota line."""
    out = cli.ok("configs", "describe", *argv)
    result: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        assert line.startswith("Quota configs for "), line
        who, _, values = line[len("Quota configs for "):].partition(" are ")
        assert who not in result, f"{who} printed twice:\n{out}"
        result[who] = dict(v.split("=", 1) for v in values.split(", "))
    return result


def test_client_and_user_quotas_round_trip(cli: Cli) -> None:
    app, alice = unique("app"), unique("alice")
    out = cli.ok("configs", "alter", "--entity-type", "clients", "--entity-name", app,
                 "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert out == f"Completed updating config for client-id '{app}'.\n"
    assert quotas(cli, "--entity-type", "clients", "--entity-name", app) == {
        f"client-id '{app}'": {"producer_byte_rate": "1048576.0", "consumer_byte_rate": "2097152.0"}}

    out = cli.ok("configs", "alter", "--entity-type", "users", "--entity-name", alice,
                 "--add-config", "consumer_byte_rate=10485760")
    assert out == f"Completed updating config for user-principal '{alice}'.\n"
    out = cli.ok("configs", "alter", "--entity-type", "users", "--entity-name", alice, "--entity-type", "clients",
                 "--entity-name", app, "--add-config", "request_percentage=50,controller_mutation_rate=2.5")
    assert out == f"Completed updating config for user-principal '{alice}', client-id '{app}'.\n"

    # strict filters: each describe lists only entities of exactly the types given
    assert quotas(cli, "--entity-type", "users", "--entity-name", alice) == {
        f"user-principal '{alice}'": {"consumer_byte_rate": "1.048576E7"}}
    assert quotas(cli, "--entity-type", "users", "--entity-name", alice, "--entity-type", "clients",
                  "--entity-name", app) == {
        f"user-principal '{alice}', client-id '{app}'": {"request_percentage": "50.0",
                                                         "controller_mutation_rate": "2.5"}}
    # every client-id of alice, and every (user, client-id) pair
    assert quotas(cli, "--entity-type", "users", "--entity-name", alice, "--entity-type", "clients") == {
        f"user-principal '{alice}', client-id '{app}'": {"request_percentage": "50.0",
                                                         "controller_mutation_rate": "2.5"}}
    pairs = quotas(cli, "--entity-type", "users", "--entity-type", "clients")
    assert f"user-principal '{alice}', client-id '{app}'" in pairs
    assert all(", " in who for who in pairs)
    every_client = quotas(cli, "--entity-type", "clients")
    assert every_client[f"client-id '{app}'"] == {"producer_byte_rate": "1048576.0", "consumer_byte_rate": "2097152.0"}
    assert all(who.startswith(("client-id ", "the default client-id")) for who in every_client)

    # delete one key: the other stays; deleting it again is refused
    out = cli.ok("configs", "alter", "--entity-type", "clients", "--entity-name", app,
                 "--delete-config", "producer_byte_rate")
    assert out == f"Completed updating config for client-id '{app}'.\n"
    assert quotas(cli, "--entity-type", "clients", "--entity-name", app) == {
        f"client-id '{app}'": {"consumer_byte_rate": "2097152.0"}}
    r = cli("configs", "alter", "--entity-type", "clients", "--entity-name", app, "--delete-config",
            "producer_byte_rate")
    assert r.returncode == 1 and f"cannot delete producer_byte_rate: not set for client-id '{app}'" in r.stderr

    # set and delete in one alter; deleting the last key removes the entity from describe
    cli.ok("configs", "alter", "--entity-type", "clients", "--entity-name", app,
           "--add-config", "request_percentage=25", "--delete-config", "consumer_byte_rate")
    assert quotas(cli, "--entity-type", "clients", "--entity-name", app) == {
        f"client-id '{app}'": {"request_percentage": "25.0"}}
    cli.ok("configs", "alter", "--entity-type", "clients", "--entity-name", app,
           "--delete-config", "request_percentage")
    assert quotas(cli, "--entity-type", "clients", "--entity-name", app) == {}


def test_default_quotas(cli: Cli) -> None:
    alice = unique("alice")
    out = cli.ok("configs", "alter", "--entity-type", "clients", "--entity-default",
                 "--add-config", "producer_byte_rate=500")
    assert out == "Completed updating config for the default client-id.\n"
    out = cli.ok("configs", "alter", "--entity-type", "users", "--entity-name", alice, "--entity-type", "clients",
                 "--entity-default", "--add-config", "request_percentage=50")
    assert out == f"Completed updating config for user-principal '{alice}', the default client-id.\n"
    cli.ok("configs", "alter", "--entity-type", "users", "--entity-default", "--add-config", "consumer_byte_rate=700")

    assert quotas(cli, "--entity-type", "clients", "--entity-default") == {
        "the default client-id": {"producer_byte_rate": "500.0"}}
    assert quotas(cli, "--entity-type", "users", "--entity-default") == {
        "the default user-principal": {"consumer_byte_rate": "700.0"}}
    assert quotas(cli, "--entity-type", "users", "--entity-name", alice, "--entity-type", "clients",
                  "--entity-default") == {
        f"user-principal '{alice}', the default client-id": {"request_percentage": "50.0"}}
    # listing every entity of a type includes its default, printed first
    every = list(quotas(cli, "--entity-type", "clients"))
    assert every[0] == "the default client-id"

    cli.ok("configs", "alter", "--entity-type", "clients", "--entity-default", "--delete-config", "producer_byte_rate")
    assert quotas(cli, "--entity-type", "clients", "--entity-default") == {}
    cli.ok("configs", "alter", "--entity-type", "users", "--entity-default", "--delete-config", "consumer_byte_rate")
    assert quotas(cli, "--entity-type", "users", "--entity-default") == {}


def test_ip_quotas(cli: Cli) -> None:
    out = cli.ok("configs", "alter", "--entity-type", "ips", "--entity-name", "127.0.0.1",
                 "--add-config", "connection_creation_rate=10")
    assert out == "Completed updating config for ip '127.0.0.1'.\n"
    assert quotas(cli, "--entity-type", "ips", "--entity-name", "127.0.0.1") == {
        "ip '127.0.0.1'": {"connection_creation_rate": "10.0"}}
    assert "ip '127.0.0.1'" in quotas(cli, "--entity-type", "ips")
    cli.ok("configs", "alter", "--entity-type", "ips", "--entity-name", "127.0.0.1",
           "--delete-config", "connection_creation_rate")
    assert quotas(cli, "--entity-type", "ips", "--entity-name", "127.0.0.1") == {}


def test_errors(cli: Cli) -> None:
    app = unique("app")
    # the broker's own message, per entity
    r = cli("configs", "alter", "--entity-type", "clients", "--entity-name", app, "--add-config",
            "producer_byte_rate=1.5")
    assert r.returncode == 1
    assert f"odradek configs: error: cannot alter the quotas of client-id '{app}': " in r.stderr
    assert "producer_byte_rate" in r.stderr and "(INVALID_REQUEST)" in r.stderr
    r = cli("configs", "alter", "--entity-type", "clients", "--entity-name", app, "--add-config",
            "consumer_byte_rate=0")
    assert r.returncode == 1 and "(INVALID_REQUEST)" in r.stderr
    assert quotas(cli, "--entity-type", "clients", "--entity-name", app) == {}  # nothing was applied
    # refused here, before anything is sent
    r = cli("configs", "alter", "--entity-type", "clients", "--entity-name", app, "--add-config", "retention.ms=1")
    assert r.returncode == 2 and f"the valid ones are: {CLIENT_KEYS}" in r.stderr
    r = cli("configs", "alter", "--entity-type", "ips", "--entity-name", "127.0.0.1", "--add-config",
            "request_percentage=1")
    assert r.returncode == 2 and "the valid ones are: connection_creation_rate" in r.stderr


def test_topic_configs_still_work_beside_quotas(cli: Cli) -> None:
    topic = unique("cfg")
    cli.ok("topics", "create", "--topic", topic, "--partitions", "1")
    out = cli.ok("configs", "alter", "--entity-name", topic, "--entity-type", "topics",
                 "--add-config", "retention.ms=1234")
    assert out == f"Completed updating config for topic {topic}.\n"
    out = cli.ok("configs", "describe", "--entity-type", "topics", "--entity-name", topic, "--overrides-only")
    assert out.splitlines()[0] == f"Non-default configs for topic {topic} are:"
    assert "retention.ms=1234" in out
