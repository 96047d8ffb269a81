"""``odradek serve``: run one broker until SIGTERM/SIGINT.

Settings come, in increasing precedence, from Kafka's defaults, ``--config server.properties``, the
``ODRADEK_CFG_*`` environment variables (``ODRADEK_CFG_NUM_PARTITIONS=5`` is ``num.partitions=5``; see
``broker/config_sources.py``), ``--override key=value`` options, and the ``--port``/``--host``/``--data-dir``
shortcuts. Kafka keys that Odradek accepts but ignores are logged as warnings, one per key; an unknown key
stops the start with an error naming it (and where it was set).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import logging
import os
import resource
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from odradek.broker.config import KEYS, BrokerConfig, ConfigError, ignored_key_warning, parse_listeners
from odradek.broker.config_sources import ENV_PREFIX, env_name, environment_properties, read_properties

log = logging.getLogger("odradek.serve")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "serve",
        help="run a broker (127.0.0.1:9092, data in ./data by default)",
        description="Run one Odradek broker that Kafka clients connect to.",
        epilog=f"Settings, lowest precedence first: Kafka's defaults, --config FILE, the environment, --override,\n"
               f"--port/--host/--data-dir. Each {ENV_PREFIX}<NAME> variable sets one key: the name lower-cased,\n"
               f"with '_' read as '.', '__' as '_' and '___' as '-' ({env_name('num.partitions')}=5 is\n"
               f"num.partitions=5).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", metavar="FILE", help="server.properties-style file (Kafka's keys)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="set one config key (repeatable), e.g. --override num.partitions=3")
    p.add_argument("--port", type=int, help="port to listen on (0 picks a free one)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--data-dir", help="data directory (log.dirs)")
    p.add_argument("--help-config", action="store_true", help="list the config keys and their defaults")
    p.set_defaults(func=run)


def build_config(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> BrokerConfig:
    """The broker's config from the file, the environment (``os.environ`` unless given) and the options."""
    props: dict[str, str] = {}
    origins: dict[str, str] = {}
    if args.config:
        props.update(read_properties(Path(args.config)))
        origins.update(dict.fromkeys(props, f"--config {args.config}"))
    env_props, env_origins = environment_properties(os.environ if environ is None else environ)
    props.update(env_props)
    origins.update(env_origins)
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--override {item!r} is not KEY=VALUE")
        props[key.strip()] = value.strip()
        origins.pop(key.strip(), None)
    if args.port is not None or args.host is not None:
        controllers = {n.strip().upper() for n in props.get("controller.listener.names", "").split(",")}
        listeners = parse_listeners(props.get("listeners", KEYS["listeners"].default), "listeners")
        base = next((lst for lst in listeners if lst.name not in controllers), listeners[0])
        host = args.host if args.host is not None else (base.host or "127.0.0.1")
        port = args.port if args.port is not None else base.port
        props["listeners"] = f"PLAINTEXT://{host}:{port}"
    if args.data_dir:
        props["log.dirs"] = args.data_dir
    return BrokerConfig.from_properties(props, origins)


def run(args: argparse.Namespace) -> int:
    if args.help_config:
        for key, spec in KEYS.items():
            note = " (accepted, no effect)" if spec.ignored else ""
            print(f"{key}={'' if spec.default is None else spec.default}  # {spec.doc}{note}")
        return 0
    try:
        config = build_config(args)
    except ConfigError as e:
        print(f"odradek serve: invalid configuration: {e}", file=sys.stderr)
        return 2
    for key in config.ignored_keys:
        log.warning(ignored_key_warning(key))
    if not tune_allocator():
        log.info("allocator tuning unavailable (not glibc); running with the default malloc settings")
    raise_open_files_limit()
    return asyncio.run(_serve(config))


def raise_open_files_limit() -> int:
    """Raise this process's soft open-files limit to its hard limit, as the JVM does for Kafka at start
    (``-XX:+MaxFDLimit``): each partition holds its active segment's log open, and every client connection is
    one more. Returns the soft limit now in force; a refusal leaves it as it was, with a log line."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:
            log.info("open-files limit stays at %d (cannot raise it to %d: %s)", soft, hard, e)
    return soft


# glibc returns freed blocks above M_MMAP_THRESHOLD to the kernel at once and trims the heap above
# M_TRIM_THRESHOLD, so every ~1 MB produce request would fault fresh pages in again for each copy of
# its bytes. Keeping such blocks for reuse made 1 KiB produce 1.4x faster (docs/performance.md).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 64 * 1024 * 1024
_TRIM_THRESHOLD_BYTES = 256 * 1024 * 1024


def tune_allocator() -> bool:
    """Keep request-sized blocks in the process for reuse (glibc only; a no-op elsewhere)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES) == 1
        return libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES) == 1 and ok
    except (OSError, AttributeError):
        return False


def freeze_startup_objects() -> None:
    """Move everything alive after start-up (modules, the protocol schemas' classes, the loaded logs) out of
    the cyclic garbage collector's view: a full collection then scans only what was made since, instead
    of stalling the event loop for tens of milliseconds (33 ms measured on a cluster leader)."""
    gc.collect()
    gc.freeze()


async def _serve(config: BrokerConfig) -> int:
    from odradek.broker.broker import Broker
    from odradek.broker.heap import HeapSettler
    from odradek.broker.server import Server
    from odradek.cluster.zk.layout import ZkError
    from odradek.protocol.errors import KafkaError

    server = Server(Broker(config))
    try:
        await server.start()
    except (KafkaError, OSError, ZkError) as e:
        # ZkError: ZooKeeper unreachable at zookeeper.connect, or this broker.id registered by another session.
        log.error("cannot start: %s", e)
        if server.broker.replicated:
            try:
                await server.broker.stop_cluster()
            except Exception as close_error:  # never hide the reason for not starting behind a second one
                log.warning("while giving up: %s", close_error)
        server.broker.stop()
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server.broker.on_fatal = lambda _why: stop.set()  # every log directory failed: stop, exit code 1
    if server.broker.fatal is not None:
        stop.set()
    freeze_startup_objects()
    settler = HeapSettler(loop)
    server.broker.replicas.on_partitions_added = settler.partitions_added
    server.broker.replicas.on_partitions_removed = settler.partitions_removed
    log.info("started (press Ctrl-C to stop)")
    await stop.wait()
    settler.cancel()
    await server.stop()
    return 1 if server.broker.fatal is not None else 0
