"""Odradek's ZooKeeper store in Kafka's ZooKeeper layout.

- ``layout``: the znode paths and their JSON encodings, byte for byte as Kafka 3.x writes them (pure).
- ``client``: ``ZkClient``, blocking reads, writes and watches on kazoo, fenced by the controller epoch.
- ``server``: ``ZooKeeperServer``, a standalone ZooKeeper child process for tests and local clusters.

The submodules are imported explicitly (``from odradek.cluster.zk.client import ZkClient``) so that the
pure layout can be used without loading kazoo.
"""
