"""Where a broker's ``server.properties`` keys come from: a Java properties file and the environment.

Both give plain ``{key: value}`` strings; ``BrokerConfig.from_properties`` checks and parses them. ``odradek
serve`` layers them, lowest precedence first: Kafka's defaults, the ``--config`` file, the environment, the
``--override`` options, the ``--port``/``--host``/``--data-dir`` shortcuts.

The file (``read_properties``) is read by jproperties, which follows ``java.util.Properties.load``: ``key=value``,
``key: value`` and ``key value``; ``#`` and ``!`` comments; a line ending in ``\\`` continues on the next; escapes
(``\\t``, ``\\n``, ``\\=``, ``\\:``, ``\\ `` and ``\\uXXXX``). The file is read as UTF-8, or, when it is not
valid UTF-8, as ISO-8859-1 as Java reads it (both read ASCII and ``\\uXXXX`` escapes alike). A key given twice
keeps its last value, as in Java.

The environment (``environment_properties``), as Kafka's container images take it: every variable named
``ODRADEK_CFG_<NAME>`` sets one key, the name turned into the key by

- lower-casing it,
- reading its underscores left to right: ``___`` is ``-``, ``__`` is ``_``, ``_`` is ``.``.

So ``ODRADEK_CFG_NUM_PARTITIONS=5`` is ``num.partitions=5`` and
``ODRADEK_CFG_LISTENER_NAME_SASL__SSL_SCRAM___SHA___256_SASL_JAAS_CONFIG`` is
``listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config`` (the escapes of Confluent's and Bitnami's images).
Variables without the prefix are never read: the CLI's ``ODRADEK_BOOTSTRAP_SERVER`` is not a broker key.

Invariants:
- Reading never validates keys or values (``BrokerConfig.from_properties`` does, naming where a bad key
  came from through ``origins``); an unreadable or malformed file is a ``ConfigError`` naming the file.
- ``env_name(key)`` and ``key_from_env(name)`` are inverse for every key in which no ``-`` or ``_`` stands next
  to a ``.`` (every key Kafka and Odradek have; ``env_name`` writes ``-`` and ``_`` with the escapes above).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from jproperties import ParseError, Properties

from odradek.broker.config import ConfigError

ENV_PREFIX = "ODRADEK_CFG_"
_UNDERSCORES = re.compile(r"___|__|_")
_FROM_ENV = {"___": "-", "__": "_", "_": "."}


def parse_properties(text: str, source: str = "<text>") -> dict[str, str]:
    """The keys and values of Java properties ``text``; ``ConfigError`` naming ``source`` if it does not parse."""
    props = Properties()
    try:
        props.load(text, "utf-8")
    except (ParseError, ValueError, UnicodeError) as e:
        raise ConfigError(f"cannot parse {source}: {e}") from None
    return {key: value.data for key, value in props.items()}


def read_properties(path: Path) -> dict[str, str]:
    """The keys and values of the properties file at ``path`` (``ConfigError`` if unreadable or malformed)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")  # not UTF-8: read it as Java does (every byte is a character)
    return parse_properties(text, str(path))


def key_from_env(name: str) -> str:
    """The config key an environment variable's name (without ``ENV_PREFIX``) stands for: ``NUM_PARTITIONS`` →
    ``num.partitions``."""
    return _UNDERSCORES.sub(lambda m: _FROM_ENV[m.group(0)], name.lower())


def env_name(key: str) -> str:
    """The environment variable that sets ``key``: ``num.partitions`` → ``ODRADEK_CFG_NUM_PARTITIONS``."""
    escaped = key.replace("_", "__").replace("-", "___").replace(".", "_")
    return ENV_PREFIX + escaped.upper()


def environment_properties(environ: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(``{key: value}``, ``{key: variable name}``) of every ``ODRADEK_CFG_*`` variable in ``environ``."""
    props: dict[str, str] = {}
    origins: dict[str, str] = {}
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
            key = key_from_env(name[len(ENV_PREFIX) :])
            props[key] = environ[name]
            origins[key] = f"environment variable {name}"
    return props, origins
