"""The controller: pure decisions (replica placement, leader election, ISR changes) kept apart from ZooKeeper I/O.

Modules here take plain values from ``odradek.cluster.model`` and return new values; they never read the clock,
the network or ZooKeeper. The code that applies their results (conditional writes keyed by ``zk_version``,
LeaderAndIsr/UpdateMetadata to brokers) lives beside them and is the only part that does I/O.
"""
