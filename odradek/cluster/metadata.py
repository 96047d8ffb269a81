"""Cluster metadata of a single-node cluster: the cluster id and the topics (id, partitions, configs).

Kafka keeps this in its KRaft metadata log; a one-broker Odradek keeps it in one JSON document,
``odradek-metadata.json`` in the first log directory, replaced atomically on every change, and a
``meta.properties`` (cluster.id, node.id) in every log directory, as Kafka does.

Invariants:
- Topic names follow Kafka's rules: 1..249 characters of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``,
  and no two topics collide once ``.`` and ``_`` are treated alike.
- A topic's id never changes; a re-created topic gets a new id.
- Configs stored per topic are only the overrides; effective values come from ``LogConfig``.
- Dynamic broker configs (``broker_configs``: ``""`` for the cluster-wide default, a node id for
  one broker) and client quotas (``client_quotas``: entity components and their configs) are kept in
  the same document; files without the fields have none.
- SCRAM credentials (``scram_credentials``: user -> mechanism -> Kafka's credential string, salt and keys only,
  never a password) are kept there too, apart from the quotas of the same user.
- ACLs (``acls``: Kafka's stored form per resource pattern, ``security/acl_stored.py`` reads and writes it) are
  kept there too, as the authorizer's single-node storage.
- Every change is persisted before it is visible to requests (``write_atomically``).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaError,
    TopicExistsError,
    UnknownTopicError,
)

__all__ = [
    "InvalidPartitionsError",
    "InvalidReplicationFactorError",
    "InvalidTopicError",
    "Topic",
    "TopicExistsError",
    "TopicRegistry",
    "UnknownTopicError",
    "validate_topic_name",
]
from odradek.storage.checkpoint import write_atomically

METADATA_FILE = "odradek-metadata.json"
META_PROPERTIES = "meta.properties"
MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")



def validate_topic_name(name: str) -> None:
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicError(f"topic name is {len(name)} characters long; the limit is {MAX_TOPIC_NAME}")
    if not _LEGAL.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} contains characters other than ASCII letters, digits, '.', '_' and '-'"
        )


def check_name_free(name: str, existing: Iterable[str]) -> None:
    """A valid name that no existing topic has or collides with (``.`` and ``_`` treated alike), or the error."""
    validate_topic_name(name)
    names = set(existing)
    if name in names:
        raise TopicExistsError(f"topic '{name}' already exists")
    folded = name.replace(".", "_")
    for other in names:
        if other.replace(".", "_") == folded:
            raise InvalidTopicError(
                f"topic '{name}' collides with existing topic '{other}' ('.' and '_' are treated alike)"
            )


@dataclass(slots=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False


class TopicRegistry:
    """The topics of the cluster, persisted in ``<dir>/odradek-metadata.json``."""

    def __init__(self, directory: Path, *, cluster_id: str | None, node_id: int, log_dirs: list[Path]) -> None:
        self.path = directory / METADATA_FILE
        self.topics: dict[str, Topic] = {}
        # Dynamic broker configs by entity: "" (cluster-wide default) or a node id as a string.
        self.broker_configs: dict[str, dict[str, str]] = {}
        self.client_quotas: dict[tuple[tuple[str, str | None], ...], dict[str, str]] = {}  # quota entity -> configs
        self.scram_credentials: dict[str, dict[str, str]] = {}  # user -> mechanism -> credential string
        self.acls: list[Any] = []  # ACLs per resource pattern, as security/acl_stored.py writes them
        self._by_id: dict[uuid.UUID, Topic] = {}
        self.cluster_id = self._load(cluster_id)
        for d in log_dirs:
            self._check_meta_properties(d, node_id)

    # -- persistence -----------------------------------------------------------------------------

    def _load(self, cluster_id: str | None) -> str:
        if self.path.exists():
            try:
                doc = json.loads(self.path.read_text(encoding="utf-8"))
                stored = doc["cluster_id"]
                for t in doc["topics"]:
                    topic = Topic(t["name"], uuid.UUID(t["id"]), int(t["partitions"]), dict(t["configs"]),
                                  bool(t.get("internal", False)))
                    self.topics[topic.name] = topic
                    self._by_id[topic.topic_id] = topic
                # Absent from files written before dynamic broker configs existed.
                for entity, configs in dict(doc.get("broker_configs", {})).items():
                    if configs:
                        self.broker_configs[str(entity)] = {str(k): str(v) for k, v in dict(configs).items()}
                for q in doc.get("client_quotas", []):  # absent from files written before client quotas
                    key = tuple((str(t), None if n is None else str(n)) for t, n in q["entity"])
                    self.client_quotas[key] = {str(k): str(v) for k, v in dict(q["configs"]).items()}
                for user, credentials in dict(doc.get("scram_credentials", {})).items():  # absent from older files
                    if credentials:
                        self.scram_credentials[str(user)] = {str(m): str(c) for m, c in dict(credentials).items()}
                self.acls = list(doc.get("acls", []))  # absent from older files
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise KafkaError(f"cluster metadata file {self.path} is unreadable: {e}") from e
            if cluster_id and cluster_id != stored:
                raise KafkaError(
                    f"cluster.id={cluster_id} does not match {stored} stored in {self.path}: "
                    "this data belongs to another cluster"
                )
            return str(stored)
        new_id = cluster_id or _new_cluster_id()
        self.cluster_id = new_id
        self._save()
        return new_id

    def _save(self) -> None:
        doc = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "topics": [
                {"name": t.name, "id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs,
                 "internal": t.internal}
                for t in sorted(self.topics.values(), key=lambda t: t.name)
            ],
            "broker_configs": {e: c for e, c in sorted(self.broker_configs.items()) if c},
            "client_quotas": [{"entity": [list(c) for c in e], "configs": c}
                              for e, c in sorted(self.client_quotas.items(), key=lambda i: repr(i[0])) if c],
            "scram_credentials": {u: dict(sorted(c.items())) for u, c in sorted(self.scram_credentials.items()) if c},
            "acls": self.acls,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, json.dumps(doc, indent=1).encode())

    def _check_meta_properties(self, d: Path, node_id: int) -> None:
        check_meta_properties(d, self.cluster_id, node_id)

    # -- queries and changes -----------------------------------------------------------------------

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def check_new(self, name: str, partitions: int, replication_factor: int) -> None:
        """Raise the error Kafka gives for creating this topic, or return if it may be created."""
        check_name_free(name, self.topics)
        if partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, got {partitions}")
        if replication_factor < 1:
            raise InvalidReplicationFactorError(f"replication factor must be at least 1, got {replication_factor}")
        if replication_factor > 1:
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is larger than the 1 available broker"
            )

    def add(self, name: str, partitions: int, configs: dict[str, str], *, internal: bool = False) -> Topic:
        topic = Topic(name, uuid.uuid4(), partitions, dict(configs), internal)
        self.topics[name] = topic
        self._by_id[topic.topic_id] = topic
        self._save()
        return topic

    def remove(self, name: str) -> Topic:
        topic = self.topics.pop(name)
        self._by_id.pop(topic.topic_id, None)
        self._save()
        return topic

    def set_partitions(self, name: str, partitions: int) -> None:
        self.topics[name].partitions = partitions
        self._save()

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.topics[name].configs = dict(configs)
        self._save()

    def set_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        """Replace the dynamic broker configs of ``entity`` ("" or a node id); persisted at once."""
        if configs:
            self.broker_configs[entity] = dict(configs)
        else:
            self.broker_configs.pop(entity, None)
        self._save()


    def set_client_quota(self, entity: tuple[tuple[str, str | None], ...], configs: dict[str, str]) -> None:
        """Replace the configs of a client quota entity (none: the entity is gone); persisted at once."""
        if configs:
            self.client_quotas[entity] = dict(configs)
        else:
            self.client_quotas.pop(entity, None)
        self._save()

    def set_scram_credentials(self, user: str, credentials: dict[str, str]) -> None:
        """Replace a user's SCRAM credentials (mechanism -> credential string; none: the user has none left);
        persisted at once."""
        if credentials:
            self.scram_credentials[user] = dict(credentials)
        else:
            self.scram_credentials.pop(user, None)
        self._save()

    def set_acls(self, acls: list[Any]) -> None:
        """Replace every stored ACL (``security/acl_stored.py``'s document); persisted at once."""
        self.acls = list(acls)
        self._save()


def check_meta_properties(d: Path, cluster_id: str, node_id: int) -> None:
    """Check (or write) ``meta.properties`` of a log directory: it must belong to this cluster and broker."""
    path = d / META_PROPERTIES
    if path.exists():
        props = dict(
            line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and line[0] != "#"
        )
        if props.get("cluster.id") not in (None, cluster_id):
            raise KafkaError(f"{path} belongs to cluster {props.get('cluster.id')}, not {cluster_id}: "
                             "this data belongs to another cluster; use another log.dirs")
        stored = props.get("node.id", props.get("broker.id"))
        if stored not in (None, str(node_id)):
            raise KafkaError(
                f"{path} was written by node.id={stored}, but this broker is node.id={node_id}: "
                "use the same node.id (broker.id) or another log.dirs"
            )
        return
    d.mkdir(parents=True, exist_ok=True)
    write_atomically(path, f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n".encode())


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
