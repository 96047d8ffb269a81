"""``odradek reassign-partitions``, as ``kafka-reassign-partitions.sh``: generate, execute, verify, cancel and
list partition reassignments, with Kafka's JSON files.

It uses kafka-python's ``KafkaAdminClient`` (``cli/_kafka_python.py``): confluent-kafka's AdminClient has no
AlterPartitionReassignments (api 45) or ListPartitionReassignments (api 46). Both go to the controller.

Files, as Kafka's::

    topics to move:  {"version": 1, "topics": [{"topic": "orders"}]}
    reassignment:    {"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [2, 3],
                                                    "log_dirs": ["any", "any"]}]}

Usage::

    odradek reassign-partitions --generate --topics-to-move-json-file move.json --broker-list 2,3,4
    odradek reassign-partitions --execute --reassignment-json-file plan.json
    odradek reassign-partitions --verify --reassignment-json-file plan.json [--wait 600]
    odradek reassign-partitions --cancel --reassignment-json-file plan.json
    odradek reassign-partitions --list

Invariants:
- ``--generate`` changes nothing: it prints the current assignment and a proposal that places each topic's
  partitions on ``--broker-list`` with their current replication factor, by the rule the controller uses
  for new topics (``cluster/controller/assignment.py``: racks alternate when brokers have racks).
- ``--execute`` prints the current assignment first (to save for a rollback), then starts every
  reassignment in one request; it fails, starting nothing, when the file is invalid (unknown topic or
  partition, a broker twice, an empty list, a partition twice). ``log_dirs`` other than "any" are refused:
  moving replicas between log directories is AlterReplicaLogDirs's business.
- ``--verify`` exits 0 only when every partition of the file is done (no reassignment running and the
  replicas are the file's); it prints one line per partition either way. With ``--wait SECONDS`` it first
  checks again every second until none is running (or the time is up), showing the partitions completed as a
  progress bar on stderr (``_progress.py``: only on a terminal), then prints the lines once.
- Failures are ``CliError``s: exit code 1 for a broker error or an unreachable cluster, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka import TopicPartition

from odradek.cli import _client, _kafka_python, _progress
from odradek.cli._client import CliError
from odradek.cli._kafka_python import Admin
from odradek.cluster.controller.assignment import assign_replicas
from odradek.protocol.errors import KafkaError

Plan = dict[tuple[str, int], list[int]]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "reassign-partitions",
        help="move partition replicas between brokers (like kafka-reassign-partitions.sh)",
        description="Generate, execute, verify, cancel or list partition reassignments.",
        epilog="examples:\n"
        "  odradek reassign-partitions --generate --topics-to-move-json-file move.json --broker-list 2,3,4\n"
        "  odradek reassign-partitions --execute --reassignment-json-file plan.json\n"
        "  odradek reassign-partitions --verify --reassignment-json-file plan.json\n"
        "  odradek reassign-partitions --list",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--generate", action="store_true", help="propose a reassignment (changes nothing)")
    mode.add_argument("--execute", action="store_true", help="start the reassignment of --reassignment-json-file")
    mode.add_argument("--verify", action="store_true", help="check whether the reassignment is done")
    mode.add_argument("--cancel", action="store_true", help="cancel the running reassignments of the file")
    mode.add_argument("--list", action="store_true", help="list the running reassignments")
    p.add_argument("--topics-to-move-json-file", type=Path, metavar="FILE",
                   help='--generate: {"version":1,"topics":[{"topic":"NAME"}]}')
    p.add_argument("--broker-list", metavar="IDS", help="--generate: the brokers to place the replicas on, e.g. 1,2,3")
    p.add_argument("--reassignment-json-file", type=Path, metavar="FILE",
                   help="--execute/--verify/--cancel: the reassignment, as --generate proposes it")
    p.add_argument("--throttle", type=_client.positive_int, metavar="BYTES_PER_S",
                   help="--execute: cap the moving replicas' replication at this rate (leader and follower "
                        "side); --verify removes the throttle once the reassignment is complete")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="--verify: keep the throttles after completion")
    p.add_argument("--wait", type=_client.positive_int, metavar="SECONDS",
                   help="--verify: check again every second until no reassignment of the file is running, for at "
                        "most this long (a progress bar on stderr when it is a terminal)")
    _client.add_common_options(p)
    p.set_defaults(func=lambda args: _client.run_verb("reassign-partitions", run, args))


def run(args: argparse.Namespace) -> int:
    if args.throttle is not None and not args.execute:
        raise CliError("--throttle is for --execute", exit_code=2)
    if args.preserve_throttles and not args.verify:
        raise CliError("--preserve-throttles is for --verify", exit_code=2)
    if args.wait is not None and not args.verify:
        raise CliError("--wait is for --verify", exit_code=2)
    if args.generate and (args.topics_to_move_json_file is None or not args.broker_list):
        raise CliError("--generate needs --topics-to-move-json-file and --broker-list", exit_code=2)
    if (args.execute or args.verify or args.cancel) and args.reassignment_json_file is None:
        raise CliError("--execute, --verify and --cancel need --reassignment-json-file", exit_code=2)
    plan = read_plan(args.reassignment_json_file) if args.reassignment_json_file is not None else {}
    topics = read_topics(args.topics_to_move_json_file) if args.generate else []
    brokers = parse_broker_list(args.broker_list) if args.generate else []
    _kafka_python.quiet_kafka_python()
    admin = Admin(args, "reassign-partitions")
    try:
        if args.generate:
            return generate(admin, topics, brokers)
        if args.execute:
            current = current_assignment(admin, sorted({t for t, _ in plan}))
            if args.throttle is not None:
                set_throttles(args, plan, current, args.throttle)
            return execute(admin, plan, current)
        if args.verify:
            done = verify(admin, plan, args.wait)
            if done == 0 and not args.preserve_throttles:
                clear_throttles(args, plan)
            return done
        if args.cancel:
            return cancel(admin, plan)
        return list_running(admin)
    finally:
        admin.close()


# -- files ----------------------------------------------------------------------------------------------


def _load(path: Path) -> Any:
    return _client.read_json(path, "see `odradek reassign-partitions --help` for the format")


def read_topics(path: Path) -> list[str]:
    obj = _load(path)
    entries = obj.get("topics") if isinstance(obj, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CliError(f'{path}: expected {{"version":1,"topics":[{{"topic":"NAME"}}, ...]}}', exit_code=2)
    names = []
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("topic"), str):
            raise CliError(f"{path}: every entry of 'topics' needs a 'topic' name, got {e!r}", exit_code=2)
        names.append(e["topic"])
    return list(dict.fromkeys(names))


def read_plan(path: Path) -> Plan:
    obj = _load(path)
    entries = obj.get("partitions") if isinstance(obj, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CliError(f'{path}: expected {{"version":1,"partitions":[{{"topic":..,"partition":..,'
                       f'"replicas":[..]}}, ...]}}', exit_code=2)
    plan: Plan = {}
    for e in entries:
        ok = (isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)
              and isinstance(e.get("replicas"), list) and all(isinstance(r, int) for r in e["replicas"]))
        if not ok:
            raise CliError(f"{path}: each partition needs 'topic', 'partition' and a 'replicas' list of broker ids, "
                           f"got {e!r}", exit_code=2)
        tp = (e["topic"], e["partition"])
        replicas = list(e["replicas"])
        if tp in plan:
            raise CliError(f"{path}: partition {tp[0]}-{tp[1]} is listed twice", exit_code=2)
        if not replicas or len(set(replicas)) != len(replicas):
            raise CliError(f"{path}: the replicas of {tp[0]}-{tp[1]} must be distinct broker ids, got {replicas}",
                           exit_code=2)
        dirs = e.get("log_dirs", ["any"] * len(replicas))
        if not isinstance(dirs, list) or len(dirs) != len(replicas):
            raise CliError(f"{path}: 'log_dirs' of {tp[0]}-{tp[1]} must have one entry per replica", exit_code=2)
        if any(d != "any" for d in dirs):
            raise CliError(f"{path}: {tp[0]}-{tp[1]} names log directories; this tool moves replicas between "
                           "brokers only", 'use "any" for every log directory', exit_code=2)
        plan[tp] = replicas
    return plan


def parse_broker_list(text: str) -> list[int]:
    try:
        ids = [int(x) for x in _client.comma_words([text])]
    except ValueError:
        raise CliError(f"--broker-list {text!r} must be broker ids separated by commas, e.g. 1,2,3",
                       exit_code=2) from None
    if not ids or len(set(ids)) != len(ids):
        raise CliError(f"--broker-list {text!r} must name distinct brokers", exit_code=2)
    return ids


def plan_json(plan: Mapping[tuple[str, int], list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())]}, separators=(",", ":"))


# -- actions --------------------------------------------------------------------------------------------


def current_assignment(admin: Admin, topics: list[str]) -> Plan:
    described = admin.call("describe topics", lambda c: c.describe_topics(topics))
    out: Plan = {}
    for t in described:  # kafka-python's Metadata dicts: Kafka's schema names
        if t.get("error_code"):
            raise CliError(f"topic '{t.get('name')}' does not exist (UNKNOWN_TOPIC_OR_PARTITION)",
                           "`odradek topics list` shows the topics there are")
        for p in t.get("partitions") or ():
            out[(t["name"], p["partition_index"])] = list(p["replica_nodes"])
    return out


def generate(admin: Admin, topics: list[str], brokers: list[int]) -> int:
    current = current_assignment(admin, topics)
    cluster = admin.call("describe the cluster", lambda c: c.describe_cluster())
    racks = {int(b.get("broker_id", b.get("node_id", -1))): b.get("rack") for b in cluster["brokers"]}
    unknown = sorted(set(brokers) - set(racks))
    if unknown:
        raise CliError(f"--broker-list names brokers {unknown} that are not in the cluster "
                       f"(brokers: {sorted(racks)})", exit_code=2)
    proposed: Plan = {}
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        try:
            placed = assign_replicas({b: racks[b] for b in brokers}, len(parts), rf)
        except KafkaError as e:
            raise CliError(f"cannot place {topic}: {e.message}", exit_code=2) from None
        proposed.update({(topic, p): list(placed[i]) for i, p in enumerate(parts)})
    print("Current partition replica assignment")
    print(plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(proposed))
    return 0


def _failures(results: Mapping[Any, Any]) -> list[str]:
    return [f"{tp.topic}-{tp.partition}: {getattr(err, 'message', None) or err.__name__}"
            for tp, err in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)) if err is not None]


def execute(admin: Admin, plan: Plan, current: Plan) -> int:
    missing = [f"{t}-{p}" for t, p in plan if (t, p) not in current]
    if missing:
        raise CliError(f"unknown partitions: {', '.join(missing)}", "`odradek topics describe` shows the partitions")
    print("Current partition replica assignment")
    print()
    print(plan_json({tp: current[tp] for tp in plan}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    results = admin.call("alter partition reassignments", lambda c: c.alter_partition_reassignments(
        {TopicPartition(t, p): r for (t, p), r in plan.items()}))
    failed = _failures(results)
    if failed:
        raise CliError("the reassignment was refused for " + "; ".join(failed),
                       "fix the file (`--generate` proposes a valid one) and run --execute again")
    print("Successfully started partition reassignments for " + ",".join(f"{t}-{p}" for t, p in sorted(plan)))
    return 0


RUNNING, COMPLETED, DIFFERENT = "running", "completed", "different"


def statuses(admin: Admin, plan: Plan) -> dict[tuple[str, int], tuple[str, list[int] | None]]:
    """Each partition of ``plan``: (RUNNING, COMPLETED or DIFFERENT, its current replicas)."""
    running = admin.call("list partition reassignments", lambda c: c.list_partition_reassignments(
        [TopicPartition(t, p) for t, p in plan]))
    current = current_assignment(admin, sorted({t for t, _ in plan}))
    out: dict[tuple[str, int], tuple[str, list[int] | None]] = {}
    for (t, p), replicas in plan.items():
        now = current.get((t, p))
        state = RUNNING if TopicPartition(t, p) in running else COMPLETED if now == replicas else DIFFERENT
        out[(t, p)] = (state, now)
    return out


def wait_for(check: Callable[[], dict[Any, tuple[str, Any]]], timeout_s: float, *,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
             poll_s: float = 1.0, progress: Callable[[int], None] = lambda done: None) -> dict[Any, tuple[str, Any]]:
    """``check()`` again every ``poll_s`` until no partition is RUNNING or ``timeout_s`` has passed; ``progress``
    gets the number of COMPLETED partitions after each check. The last statuses."""
    deadline = clock() + timeout_s
    found = check()
    while True:
        progress(sum(1 for state, _ in found.values() if state == COMPLETED))
        if not any(state == RUNNING for state, _ in found.values()) or clock() >= deadline:
            return found
        sleep(max(0.0, min(poll_s, deadline - clock())))
        found = check()


def verify(admin: Admin, plan: Plan, wait_s: float | None = None) -> int:
    if wait_s is None:
        found = statuses(admin, plan)
    else:
        with _progress.bar(total=len(plan), desc="reassignments completed", unit="partition") as bar:
            def shown(done: int) -> None:
                bar.update(done - bar.n)

            found = wait_for(lambda: statuses(admin, plan), wait_s, progress=shown)
    print("Status of partition reassignment:")
    done = True
    for (t, p), replicas in sorted(plan.items()):
        state, current = found[(t, p)]
        if state == RUNNING:
            print(f"Reassignment of partition {t}-{p} is still in progress.")
            done = False
        elif state == COMPLETED:
            print(f"Reassignment of partition {t}-{p} is completed.")
        else:
            print(f"There is no active reassignment of partition {t}-{p}, but replica set is "
                  f"{current} rather than {replicas}.")
            done = False
    return 0 if done else 1


def cancel(admin: Admin, plan: Plan) -> int:
    results = admin.call("cancel partition reassignments", lambda c: c.alter_partition_reassignments(
        {TopicPartition(t, p): None for t, p in plan}))
    cancelled = sorted((tp.topic, tp.partition) for tp, err in results.items() if err is None)
    idle = sorted((tp.topic, tp.partition) for tp, err in results.items()
                  if err is not None and err.__name__ == "NoReassignmentInProgressError")
    failed = [f for f in _failures(results) if "NoReassignmentInProgress" not in f]
    if cancelled:
        print("Successfully cancelled partition reassignments for: " + ",".join(f"{t}-{p}" for t, p in cancelled))
    if idle:
        print("None of the specified partition reassignments are active: " + ",".join(f"{t}-{p}" for t, p in idle))
    if failed:
        raise CliError("cancelling failed for " + "; ".join(failed))
    return 0


def list_running(admin: Admin) -> int:
    running = admin.call("list partition reassignments", lambda c: c.list_partition_reassignments())
    if not running:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for tp, r in sorted(running.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        print(f"{tp.topic}-{tp.partition}: replicas: {_ids(r['replicas'])}. adding: {_ids(r['adding_replicas'])}. "
              f"removing: {_ids(r['removing_replicas'])}.")
    return 0


def _ids(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids)


# -- throttles (Kafka's --throttle): broker rates and topic replica lists, cleared by --verify ------------------

_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
_LEADER_LIST = "leader.replication.throttled.replicas"
_FOLLOWER_LIST = "follower.replication.throttled.replicas"


def throttle_lists(plan: Plan, current: Plan) -> dict[str, dict[str, str]]:
    """topic -> {leader list, follower list}: the leader side names each moving partition's current replicas
    (they send), the follower side the replicas it adds (they fetch), as Kafka's tool writes them."""
    out: dict[str, dict[str, str]] = {}
    for (t, p), target in sorted(plan.items()):
        existing = current.get((t, p), [])
        if target == existing:
            continue
        lists = out.setdefault(t, {_LEADER_LIST: "", _FOLLOWER_LIST: ""})
        lead = [f"{p}:{b}" for b in existing]
        follow = [f"{p}:{b}" for b in target if b not in existing]
        lists[_LEADER_LIST] = ",".join(x for x in (lists[_LEADER_LIST], *lead) if x)
        lists[_FOLLOWER_LIST] = ",".join(x for x in (lists[_FOLLOWER_LIST], *follow) if x)
    return out


def _alter(args: argparse.Namespace, admin: AdminClient, resources: list[ConfigResource], what: str) -> None:
    """IncrementalAlterConfigs: one call per broker resource (librdkafka sends each to that broker and allows one
    per call), the topics in one."""
    brokers = [r for r in resources if r.restype_int == ConfigResource.Type.BROKER.value]
    topics = [r for r in resources if r not in brokers]
    for batch in [[r] for r in brokers] + ([topics] if topics else []):
        futures = admin.incremental_alter_configs(batch, request_timeout=_client.timeout_s(args))
        for res, fut in futures.items():
            _client.wait(fut, args, f"{what} ({res.name})")


def set_throttles(args: argparse.Namespace, plan: Plan, current: Plan, rate: int) -> None:
    brokers = sorted({b for tp, r in plan.items() for b in (*r, *current.get(tp, []))})
    resources = [ConfigResource("broker", str(b), incremental_configs=[
        ConfigEntry(k, str(rate), incremental_operation=AlterConfigOpType.SET) for k in _RATES]) for b in brokers]
    resources += [ConfigResource("topic", t, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in lists.items() if v])
        for t, lists in throttle_lists(plan, current).items()]
    _alter(args, _client.make_client(AdminClient, _client.base_config(args)), resources,
           "set the replication throttle")
    print("Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle "
          "is removed.")
    print(f"The inter-broker throttle limit was set to {rate} B/s")


def clear_throttles(args: argparse.Namespace, plan: Plan) -> None:
    admin = _client.make_client(AdminClient, _client.base_config(args))
    md = _client.check_reachable(admin, args)
    brokers = sorted(md.brokers)
    topics = sorted({t for t, _ in plan})
    resources = [ConfigResource("broker", str(b), incremental_configs=[
        ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in _RATES]) for b in brokers]
    resources += [ConfigResource("topic", t, incremental_configs=[
        ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in (_LEADER_LIST, _FOLLOWER_LIST)])
        for t in topics]
    _alter(args, admin, resources, "clear the replication throttle")
    print(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}")
    for t in topics:
        print(f"Clearing topic-level throttles on topic {t}")
