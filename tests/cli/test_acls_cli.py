"""``odradek acls`` as a user runs it (a subprocess) against one broker process with an authorizer: kafka-acls'
output for --add/--list/--remove, the --producer/--consumer expansions, the confirmation prompt, usage errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.broker.process import BrokerProcess
from tests.cli.test_cli import Cli


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    base = tmp_path_factory.mktemp("acls-cli")
    b = BrokerProcess(base / "data", base / "broker.log", [
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:ANONYMOUS"]).start()
    try:
        yield Cli(b.bootstrap)
    finally:
        assert b.stop() == 0


ORDERS = "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)"


def entry(principal: str, op: str, permission: str = "ALLOW", host: str = "*") -> str:
    return f" \t(principal={principal}, host={host}, operation={op}, permissionType={permission}) "


def test_add_list_and_remove_like_kafka_acls(cli: Cli) -> None:
    out = cli.ok("acls", "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders")
    assert out.splitlines()[:2] == [f"Adding ACLs for resource `{ORDERS}`: ", entry("User:alice", "READ")]
    assert f"Current ACLs for resource `{ORDERS}`: " in out
    cli.ok("acls", "--add", "--allow-principal", "User:bob", "--consumer", "--topic", "orders", "--group", "billing")
    cli.ok("acls", "--add", "--allow-principal", "User:carol", "--producer", "--topic", "ord",
           "--resource-pattern-type", "prefixed", "--transactional-id", "tx", "--idempotent")
    cli.ok("acls", "--add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.9", "--topic", "orders")
    listed = cli.ok("acls", "--list", "--topic", "orders", "--resource-pattern-type", "match").splitlines()
    for line in (entry("User:alice", "READ"), entry("User:bob", "READ"), entry("User:bob", "DESCRIBE"),
                 entry("User:mallory", "ALL", "DENY", "10.0.0.9"), entry("User:carol", "WRITE"),
                 entry("User:carol", "DESCRIBE"), entry("User:carol", "CREATE"),
                 "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=ord, patternType=PREFIXED)`: "):
        assert line in listed
    everything = cli.ok("acls", "--list")
    for resource in ("resourceType=GROUP, name=billing, patternType=LITERAL",
                     "resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL",
                     "resourceType=TRANSACTIONAL_ID, name=tx, patternType=PREFIXED"):
        assert resource in everything
    assert entry("User:carol", "IDEMPOTENT_WRITE") in everything.splitlines()
    assert "User:bob" not in cli.ok("acls", "--list", "--principal", "User:alice")
    # --remove asks first: anything but y keeps the ACLs
    out = cli.ok("acls", "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders",
                 input="n\n")
    assert "Are you sure you want to remove ACLs: " in out and entry("User:alice", "READ") in out.splitlines()
    cli.ok("acls", "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders",
           input="y\n")
    assert "User:alice" not in cli.ok("acls", "--list", "--topic", "orders")
    cli.ok("acls", "--remove", "--topic", "orders", "--force")
    assert cli.ok("acls", "--list", "--topic", "orders").strip() == ""


@pytest.mark.parametrize(("args", "message"), [
    (["--add", "--topic", "t"], "--allow-principal or --deny-principal"),
    (["--add", "--allow-principal", "User:a"], "you must specify a resource"),
    (["--add", "--allow-principal", "alice", "--topic", "t"], "is not TYPE:NAME"),
    (["--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"], "unknown operation"),
    (["--add", "--allow-principal", "User:a", "--operation", "ClusterAction", "--topic", "t"],
     "not a valid operation for resource type TOPIC"),
    (["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"], "--group"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"],
     "not valid when adding"),
])
def test_usage_errors(cli: Cli, args: list[str], message: str) -> None:
    r = cli("acls", *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr
