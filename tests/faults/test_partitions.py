"""The partition-tolerance suite: Jepsen's questions asked of a real Odradek cluster.

Three brokers and a three-node ZooKeeper ensemble, each in its own network namespace (``netns.py``); the
clients (``workload.py``: two idempotent producers, a transactional producer committing and aborting, a
read_committed consumer) stay in the root namespace and can always reach every broker. One topic, 3
partitions, replication factor 3, ``min.insync.replicas=2``, unclean elections off. Each broker's first log
directory is a tmpfs of its own. The topic is created with partition 0 alone, which therefore lands in every
broker's first directory, and grown to 3 partitions once it is there (a broker learns a new topic's partitions
from ZooKeeper in no fixed order, and each goes to whichever directory holds fewest). Partition 0 is never
reassigned, so it stays in the tmpfs for the disk faults.

The nemesis runs each fault of ``SCHEDULE`` in turn (in a shuffled order per round after the first), heals
it, waits until every broker is registered and every partition's ISR is full again, and requires the
workload to make progress before the next fault:

- network partitions (nftables drop rules): the leader of partition 0 cut off from ZooKeeper only, from the
  followers only (Jepsen's 2013 case), from both; one-way, leader to followers; a partial partition between
  two brokers that both still reach the third; a ZooKeeper minority (its leader) cut from the majority, alone
  and together with a partition leader;
- process pauses (SIGSTOP/SIGCONT) of a leader and of the controller past the ZooKeeper session timeout;
- kill -9 and restart of random brokers in a loop while partitions are reassigned (a replica dropped and
  added back, so data is copied) and preferred leaders elected;
- a follower's, then the leader's, log directory filling up (the tmpfs filled by a file), repaired by
  removing the file and restarting those brokers.

After the last fault the history is checked (``checker.py``): every acknowledged record present exactly
once at its acknowledged offset, no read record vanished, per-producer order, definite failures absent,
no aborted reads, committed transactions whole; unavailability windows are reported. The summary goes to
the test's output and to ``--jepsen-report`` when given. ``--jepsen-rounds N`` runs the schedule N times
(the README's test command runs 1; docs/partition-tolerance.md records a long run).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import NewPartitions
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition

from tests.cluster.brokers import Cluster, ClusterBroker, wait_until
from tests.faults.checker import check
from tests.faults.netns import Host, Network
from tests.faults.workload import Workload, final_read
from tests.faults.zk_ensemble import ZooKeeperEnsemble
from tests.storage.helpers import fill_disk, tmpfs

pytestmark = pytest.mark.slow

SESSION_S = 4.0  # zookeeper.session.timeout.ms of tests/cluster/brokers.py
LAG_S = 3.0  # replica.lag.time.max.ms
PARTITIONS = 3
DISK = "64m"
RECOVERY_S = 120.0
PROGRESS_S = 60.0


@dataclass
class World:
    net: Network
    zk: ZooKeeperEnsemble
    cluster: Cluster
    broker_hosts: dict[int, Host]
    zk_hosts: list[Host]
    disks: dict[int, Path]
    topic: str = ""
    fillers: list[Path] = field(default_factory=list)

    def host(self, broker_id: int) -> Host:
        return self.broker_hosts[broker_id]

    def broker(self, broker_id: int) -> ClusterBroker:
        return self.cluster.brokers[broker_id]

    def others(self, broker_id: int) -> list[int]:
        return [b for b in self.cluster.brokers if b != broker_id]

    def leader(self, partition: int = 0) -> int:
        return wait_until(lambda: self.cluster.leader_now(self.topic, partition) > 0, timeout_s=RECOVERY_S,
                          what=f"a leader for {self.topic}-{partition}")

    def controller(self) -> int:
        return int(wait_until(lambda: (c := self.cluster.controller_now()) > 0 and c, timeout_s=RECOVERY_S,
                              what="a controller"))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("jepsen")
    with Network("odrj") as net, contextlib.ExitStack() as stack:
        zk_hosts = [net.add_host(f"zk{i}") for i in (1, 2, 3)]
        broker_hosts = {i: net.add_host(f"b{i}") for i in (1, 2, 3)}
        zk = ZooKeeperEnsemble(base / "zk", zk_hosts).start(timeout_s=90)
        stack.callback(zk.stop)
        disks = {i: stack.enter_context(tmpfs(base / f"disk-{i}", DISK)) for i in broker_hosts}
        cluster = Cluster(base, f"{zk.connect_string}/jepsen")
        for i, b in cluster.brokers.items():
            h = broker_hosts[i]
            b.host, b.fixed_port, b.wrap = h.ip, 9092, h.wrap
            b.overrides.append(f"log.dirs={disks[i]},{base / f'broker-{i}'}")
        try:
            cluster.start()
            yield World(net, zk, cluster, broker_hosts, zk_hosts, disks)
        finally:
            net.heal()
            for b in cluster.each():
                if b.running:
                    os.kill(b.pid, signal.SIGCONT)
            failures = cluster.stop()
            for b in cluster.each():
                b.kill()
            # Clients left in reference cycles (admin clients of the faults, replaced producers) would go on
            # reconnecting to the hosts' addresses once the namespaces are gone, out through the default route:
            # collected here, while the addresses still lead to the closed hosts.
            gc.collect()
    assert not failures, "\n".join(failures)


# -- recovery between faults ----------------------------------------------------------------------------------


def _restart_if_dead(w: World, b: ClusterBroker) -> None:
    if not b.running:
        w.cluster.start_when_deregistered(b, 4 * SESSION_S)


def _recovered(w: World) -> None:
    for b in w.cluster.each():
        _restart_if_dead(w, b)
    wait_until(lambda: w.cluster.live_ids() == set(w.cluster.brokers), timeout_s=RECOVERY_S,
               what="every broker registered after healing")
    wait_until(lambda: all(len(w.cluster.isr_now(w.topic, p)) == 3 and w.cluster.leader_now(w.topic, p) > 0
                           for p in range(PARTITIONS)), timeout_s=RECOVERY_S,
               what=f"full ISRs for {w.topic} after healing")


def _progress(wl: Workload, what: str) -> None:
    before = wl.acked_count()
    wait_until(lambda: wl.acked_count() >= before + 20 or wl.errors, timeout_s=PROGRESS_S,
               what=f"the producers to make progress after {what}")
    assert not wl.errors, wl.errors


# -- the faults -------------------------------------------------------------------------------------------------

Heal = Callable[[], None]


def _hold(seconds: float) -> None:
    """A fault stays in place this long (the only fixed waits of the suite: how long a fault lasts)."""
    time.sleep(seconds)


def leader_cut_from_zookeeper(w: World, rng: random.Random) -> Heal:
    w.net.isolate(w.host(w.leader()), w.zk_hosts)
    _hold(SESSION_S + 3)
    return w.net.heal


def leader_cut_from_followers(w: World, rng: random.Random) -> Heal:
    lead = w.leader()
    w.net.isolate(w.host(lead), [w.host(b) for b in w.others(lead)])
    _hold(LAG_S + 4)
    return w.net.heal


def leader_cut_from_everyone(w: World, rng: random.Random) -> Heal:
    lead = w.leader()
    w.net.isolate(w.host(lead), [*w.zk_hosts, *(w.host(b) for b in w.others(lead))])
    _hold(SESSION_S + 3)
    return w.net.heal


def leader_one_way_to_followers(w: World, rng: random.Random) -> Heal:
    lead = w.leader()
    for b in w.others(lead):
        w.net.cut_one_way(w.host(lead), w.host(b))
    _hold(LAG_S + 4)
    return w.net.heal


def partial_partition(w: World, rng: random.Random) -> Heal:
    a, b = rng.sample(sorted(w.cluster.brokers), 2)
    w.net.cut(w.host(a), w.host(b))  # both still reach the third broker and ZooKeeper
    _hold(LAG_S + 4)
    return w.net.heal


def zookeeper_minority(w: World, rng: random.Random) -> Heal:
    i = w.zk.leader_index()
    i = rng.randrange(3) if i is None else i
    w.net.isolate(w.zk_hosts[i], [h for j, h in enumerate(w.zk_hosts) if j != i])
    _hold(SESSION_S + 4)
    return w.net.heal


def zookeeper_minority_with_a_leader(w: World, rng: random.Random) -> Heal:
    i = w.zk.leader_index()
    i = rng.randrange(3) if i is None else i
    lead = w.leader()
    minority = [w.zk_hosts[i], w.host(lead)]
    majority = [h for j, h in enumerate(w.zk_hosts) if j != i] + [w.host(b) for b in w.others(lead)]
    w.net.partition(minority, majority)
    _hold(SESSION_S + 4)
    return w.net.heal


def _pause(w: World, broker_id: int) -> Heal:
    b = w.broker(broker_id)
    os.kill(b.pid, signal.SIGSTOP)
    _hold(SESSION_S + 2)
    return lambda: os.kill(b.pid, signal.SIGCONT)


def pause_leader(w: World, rng: random.Random) -> Heal:
    return _pause(w, w.leader(1))


def pause_controller(w: World, rng: random.Random) -> Heal:
    return _pause(w, w.controller())


def kill_loop_with_reassignments_and_elections(w: World, rng: random.Random) -> Heal:
    admin = KafkaAdminClient(bootstrap_servers=w.cluster.bootstrap, request_timeout_ms=20000)
    try:
        for _ in range(3):
            victim = w.broker(rng.choice(sorted(w.cluster.brokers)))
            victim.kill()
            p = rng.randrange(1, PARTITIONS)  # partition 0 stays in the tmpfs for the disk faults
            tp = KTopicPartition(w.topic, p)
            replicas = list(w.cluster.partitions(w.topic)[p].replicas)
            keep = [r for r in replicas if r != victim.broker_id] or replicas[:2]
            with contextlib.suppress(Exception):  # refused while a broker is down: Kafka's answer, fine
                admin.alter_partition_reassignments({tp: keep[:2]})
            _hold(1.0)
            _restart_if_dead(w, victim)
            wait_until(lambda v=victim.broker_id: v in w.cluster.live_ids(), timeout_s=RECOVERY_S,  # type: ignore[misc]
                       what=f"broker {victim.broker_id} registered again")
            back = keep[:2] + [r for r in replicas if r not in keep[:2]]  # the dropped replica: its data copied again
            wait_until(lambda tp=tp, back=back: _reassigned(admin, tp, back), timeout_s=30,  # type: ignore[misc]
                       what=f"the reassignment of {tp} back to {back} accepted")
            with contextlib.suppress(Exception):
                w.cluster.admin().elect_leaders(ElectionType.PREFERRED, [CTopicPartition(w.topic, p)]).result(
                    timeout=20)
        wait_until(lambda: not admin.list_partition_reassignments(), timeout_s=RECOVERY_S,
                   what="the reassignments to finish")
        for p in range(PARTITIONS):
            assert len(w.cluster.partitions(w.topic)[p].replicas) == 3, "a reassignment left a partition short"
    finally:
        admin.close()
    return lambda: None


def _reassigned(admin: KafkaAdminClient, tp: KTopicPartition, target: list[int]) -> bool:
    try:
        return admin.alter_partition_reassignments({tp: target}).get(tp) is None
    except Exception:  # the controller moving meanwhile: ask again
        return False


def follower_then_leader_disk_full(w: World, rng: random.Random) -> Heal:
    lead = w.leader(0)
    follower = rng.choice(w.others(lead))
    for b in (follower, lead):
        assert (w.disks[b] / f"{w.topic}-0").is_dir(), f"{w.topic}-0 is not in broker {b}'s tmpfs"
    fillers = [fill_disk(w.disks[follower])]
    wait_until(lambda: follower not in w.cluster.isr_now(w.topic, 0), timeout_s=30,
               what=f"broker {follower}'s full disk to take its replica out of the ISR")
    fillers.append(fill_disk(w.disks[lead]))
    wait_until(lambda: w.cluster.leader_now(w.topic, 0) != lead, timeout_s=30,
               what=f"broker {lead}'s full disk to move the leadership away")
    _hold(2.0)

    def repair() -> None:
        for f in fillers:
            f.unlink()
        for b in (follower, lead):  # a failed directory comes back with a restart, as in Kafka
            broker = w.broker(b)
            assert broker.stop() == 0, f"broker {b} did not stop cleanly:\n{broker.log()[-3000:]}"
            broker.start()
    return repair


def _create_topic_with_partition_0_in_the_tmpfs(w: World) -> None:
    w.cluster.create_topic(w.topic, partitions=1, replication_factor=3,
                           config={"min.insync.replicas": "2", "unclean.leader.election.enable": "false"})
    wait_until(lambda: all((d / f"{w.topic}-0").is_dir() for d in w.disks.values()), timeout_s=30,
               what=f"{w.topic}-0 in every broker's tmpfs")
    admin = w.cluster.admin()
    admin.create_partitions([NewPartitions(w.topic, PARTITIONS)], operation_timeout=20)[w.topic].result(timeout=30)
    wait_until(lambda: len(w.cluster.partitions(w.topic)) == PARTITIONS and all(
        p.leader >= 0 and len(p.isrs) == 3 for p in w.cluster.partitions(w.topic).values()), timeout_s=30,
        what=f"leaders and full ISRs for the {PARTITIONS} partitions of {w.topic}")


SCHEDULE: list[Callable[[World, random.Random], Heal]] = [
    leader_cut_from_zookeeper,
    leader_cut_from_followers,
    leader_cut_from_everyone,
    leader_one_way_to_followers,
    partial_partition,
    zookeeper_minority,
    zookeeper_minority_with_a_leader,
    pause_leader,
    pause_controller,
    kill_loop_with_reassignments_and_elections,
    follower_then_leader_disk_full,
]


# -- the test ---------------------------------------------------------------------------------------------------


def test_nothing_acknowledged_is_lost_through_partitions_pauses_crashes_and_full_disks(
    world: World, request: pytest.FixtureRequest
) -> None:
    rounds = int(request.config.getoption("--jepsen-rounds"))
    report_path = request.config.getoption("--jepsen-report")
    rng = random.Random(int(request.config.getoption("--jepsen-seed")))
    w = world
    w.topic = f"jepsen-{uuid.uuid4().hex[:8]}"
    _create_topic_with_partition_0_in_the_tmpfs(w)
    wl = Workload(w.cluster.bootstrap, w.topic, PARTITIONS, deadline_s=rounds * 1800.0).start()
    faults: list[dict[str, Any]] = []
    try:
        _progress(wl, "the start")
        for r in range(rounds):
            order = list(SCHEDULE)
            if r:
                rng.shuffle(order)
            for fault in order:
                began = wl.now()
                heal = fault(w, rng)
                healed_at = wl.now()
                heal()
                _recovered(w)
                _progress(wl, fault.__name__)
                faults.append({"round": r, "fault": fault.__name__, "start_s": round(began, 2),
                               "healed_s": round(healed_at, 2), "recovered_s": round(wl.now(), 2)})
    finally:
        wl.stop()
    _recovered(w)
    report = check(wl.history(final_read(w.cluster.bootstrap, w.topic, PARTITIONS)), unavailable_gap_s=1.0)
    summary = report.summary()
    timeline = "\n".join(f"  round {f['round']} {f['fault']}: {f['start_s']}-{f['healed_s']} s, "
                         f"recovered at {f['recovered_s']} s" for f in faults)
    fatal = "\n".join(f"  {when} s {who}: {err}" for when, who, err in wl.fatal) or "  none"
    print(f"\n{summary}\nfaults:\n{timeline}\nfatal client errors (the producer replaced):\n{fatal}")
    if report_path:
        Path(report_path).write_text(json.dumps({"rounds": rounds, "faults": faults, "report": report.as_dict(),
                                                 "summary": summary, "fatal_client_errors": wl.fatal}, indent=1),
                                     encoding="utf-8")
    assert not wl.errors, wl.errors
    assert report.ok, f"{summary}\nfaults:\n{timeline}"
    assert report.info["sends_ok"] > 1000 and report.info["txns_committed"] > 10, summary
