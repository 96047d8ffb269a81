"""The cluster member's image against a real ZooKeeper: a change that lands while the member loads its first
image is not overwritten by the older value that load read (seen in the cluster benchmark as a broker whose
Metadata said "no controller" long after one was elected)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from odradek.clock import SYSTEM_CLOCK
from odradek.cluster.member import ClusterMember, MemberConfig
from odradek.cluster.model import Endpoint
from odradek.cluster.zk.client import ZkClient
from odradek.replica.manager import ReplicaManager
from odradek.storage.config import LogConfig
from odradek.storage.manager import LogManager
from tests.cluster.conftest import ZkClientFactory


def test_a_controller_elected_during_the_first_load_is_not_lost(zk_chroot: str, zk_client: ZkClientFactory,
                                                                tmp_path: Path) -> None:
    other = zk_client()
    other.ensure_paths()

    async def main() -> int:
        logs = LogManager([tmp_path], LogConfig(), clock=SYSTEM_CLOCK)
        replicas = ReplicaManager(7, logs, clock=SYSTEM_CLOCK, replicated=True, notify=lambda t, p: None)
        member = ClusterMember(
            MemberConfig(7, zk_chroot, 6000, 6000, (Endpoint("PLAINTEXT", "127.0.0.1", 9),), None, "PLAINTEXT"),
            replicas, on_topic_gone=lambda name, count: None, on_topic_configs=lambda name: None)
        original = ZkClient.topic_names

        def topic_names_then_elect(self: ZkClient, watch: object = None) -> list[str]:
            # the member has read /controller (none yet): a controller is elected before it installs its image
            assert other.elect_controller(3) is not None
            return original(self, watch)  # type: ignore[arg-type]

        ZkClient.topic_names = topic_names_then_elect  # type: ignore[method-assign]
        try:
            await member.start(None)
        finally:
            ZkClient.topic_names = original  # type: ignore[method-assign]
        try:
            for _ in range(100):  # the watch's change is applied on the loop, right after the load
                if member.controller_id == 3:
                    break
                await asyncio.sleep(0.02)
            return member.controller_id
        finally:
            await member.close()
            logs.shutdown()

    assert asyncio.run(main()) == 3
