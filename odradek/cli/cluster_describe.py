"""``odradek cluster describe``: the brokers (with racks), the controller, and the partitions that are not
healthy (under-replicated, under min ISR, offline), through confluent-kafka's ``AdminClient``
(DescribeCluster, Metadata, DescribeConfigs for each topic's ``min.insync.replicas``).

Output::

    ClusterId: lNm4...
    Controller: 2
    Broker: 1  Host: 127.0.0.1:9092  Rack: r1
    Broker: 2  Host: 127.0.0.1:9093  Rack: r2
    Topics: 3  Partitions: 12  UnderReplicated: 1  UnderMinIsr: 0  Offline: 0
    <TAB>Topic: orders<TAB>Partition: 0<TAB>Leader: 1<TAB>Replicas: 1,2,3<TAB>Isr: 1,2<TAB>Status: under-replicated

The exit code is 0 even when partitions are unhealthy: the verb reports, it does not judge.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource

from odradek.cli import _client, _health
from odradek.cli.topics import min_isr_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--exclude-internal", action="store_true", help="leave out internal topics' partitions")
    _client.add_common_options(p)
    p.set_defaults(func=lambda args: _client.run_verb("cluster describe", run, args))


def run(args: argparse.Namespace) -> int:
    admin = _client.make_client(AdminClient, _client.base_config(args))
    md = _client.check_reachable(admin, args)
    cluster = _client.wait(admin.describe_cluster(request_timeout=_client.timeout_s(args)), args,
                           "describe the cluster")
    topics = {name: t for name, t in md.topics.items()
              if t.error is None and not (args.exclude_internal and name.startswith("__"))}
    resources = {name: ConfigResource("topic", name) for name in topics}
    futures: dict[Any, Any] = (
        admin.describe_configs(list(resources.values()), request_timeout=_client.timeout_s(args)) if resources else {})
    live = {n.id for n in cluster.nodes}
    print(f"ClusterId: {cluster.cluster_id}")
    print(f"Controller: {cluster.controller.id if cluster.controller is not None else 'none'}")
    for n in sorted(cluster.nodes, key=lambda n: n.id):
        print(f"Broker: {n.id}  Host: {n.host}:{n.port}  Rack: {n.rack or '-'}")
    counts = {_health.UNDER_REPLICATED: 0, _health.UNDER_MIN_ISR: 0, _health.UNAVAILABLE: 0}
    lines: list[str] = []
    total = 0
    for name in sorted(topics):
        configs: dict[str, Any] = _client.wait(futures[resources[name]], args, f"describe the configs of '{name}'")
        min_isr = min_isr_of(configs)
        for pid, p in sorted(topics[name].partitions.items()):
            total += 1
            flags = _health.PartitionHealth(p.leader, list(p.replicas), list(p.isrs), min_isr).flags(live)
            flags.discard(_health.AT_MIN_ISR)
            for f in flags:
                counts[f] += 1
            if flags:
                lines.append(f"\tTopic: {name}\tPartition: {pid}\tLeader: {p.leader if p.leader >= 0 else 'none'}\t"
                             f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isrs))}\t"
                             f"Status: {','.join(sorted(flags))}")
    print(f"Topics: {len(topics)}  Partitions: {total}  UnderReplicated: {counts[_health.UNDER_REPLICATED]}  "
          f"UnderMinIsr: {counts[_health.UNDER_MIN_ISR]}  Offline: {counts[_health.UNAVAILABLE]}")
    for line in lines:
        print(line)
    return 0
