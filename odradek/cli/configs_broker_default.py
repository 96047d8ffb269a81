"""``odradek configs describe|alter --entity-type brokers --entity-default``: the cluster-wide dynamic broker
defaults, as kafka-configs.sh names them (the BROKER config resource named ``""``).

Every broker of the cluster applies these below its own dynamic configs (``--entity-name <id>``) and above its
``server.properties``; only the broker keys that may change at runtime can be set. describe prints::

    Default configs for brokers in the cluster are:
      log.retention.ms=3600000 source=DYNAMIC_DEFAULT_BROKER_CONFIG default=false sensitive=false read-only=false

alter prints ``Completed updating default config for brokers in the cluster.``

Invariants:
- The requests (built here; ``configs.py`` sends them through kafka-python's connection manager) are raw
  DescribeConfigs and IncrementalAlterConfigs requests: confluent-kafka refuses a ``ConfigResource`` with an
  empty name.
- One IncrementalAlterConfigs request carries every SET and DELETE, so the other defaults stay as they are.
- A broker's error on the resource is a ``CliError`` with the broker's own message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confluent_kafka.admin import ConfigSource
from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

BROKER_RESOURCE = 4
DEFAULT_ENTITY = ""
OP_SET, OP_DELETE = 0, 1


def describe_request() -> DescribeConfigsRequest:
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=BROKER_RESOURCE, resource_name=DEFAULT_ENTITY, configuration_keys=None
    )
    return DescribeConfigsRequest(resources=[resource], include_synonyms=False, include_documentation=False)


def alter_request(to_set: dict[str, str], to_delete: Sequence[str]) -> IncrementalAlterConfigsRequest:
    op = IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig
    configs = [op(name=k, config_operation=OP_SET, value=v) for k, v in to_set.items()]
    configs += [op(name=k, config_operation=OP_DELETE, value=None) for k in to_delete]
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=BROKER_RESOURCE, resource_name=DEFAULT_ENTITY, configs=configs
    )
    return IncrementalAlterConfigsRequest(resources=[resource], validate_only=False)


def source_name(raw: int) -> str:
    try:
        return ConfigSource(raw).name
    except ValueError:
        return f"UNKNOWN({raw})"


def format_config(c: Any) -> str:
    """One config as ``configs describe`` prints it for topics and brokers."""
    source = getattr(c, "config_source", None)
    is_default = source == ConfigSource.DEFAULT_CONFIG.value
    value = "null" if c.value is None else c.value
    return (
        f"{c.name}={value} source={source_name(source) if source is not None else 'UNKNOWN'} "
        f"default={str(is_default).lower()} sensitive={str(bool(c.is_sensitive)).lower()} "
        f"read-only={str(bool(c.read_only)).lower()}"
    )


def describe_lines(result: Any, overrides_only: bool) -> list[str]:
    """What describe prints for the DescribeConfigs result of the default entity."""
    lines = ["Default configs for brokers in the cluster are:"]
    for c in sorted(result.configs, key=lambda c: c.name):
        if overrides_only and getattr(c, "config_source", None) == ConfigSource.DEFAULT_CONFIG.value:
            continue
        lines.append("  " + format_config(c))
    return lines


ALTERED = "Completed updating default config for brokers in the cluster."
