"""kafka-python's ``KafkaAdminClient`` for the verbs that need an admin API confluent-kafka lacks
(transactions, partition reassignments): its configuration from the verbs' options, bounded calls, and
its errors as ``CliError``s.

Invariants:
- Every call is bounded (twice ``--request-timeout-ms`` plus 5 s: a call may need a Metadata or
  FindCoordinator round trip first) and runs on a daemon thread, so a call that never returns cannot keep
  the process alive.
- ``--command-config``/``--client-property`` take librdkafka's (or Kafka's) property names like the other
  verbs; those kafka-python has an equivalent for are translated, the others are ignored with a warning.
- kafka-python's own log lines are shown only with ``--log-level DEBUG``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import kafka.errors as kerrors
from kafka import KafkaAdminClient

from odradek.cli import _client
from odradek.cli._client import CliError

log = logging.getLogger(__name__)
T = TypeVar("T")

ErrorMapper = Callable[[BaseException, argparse.Namespace, str, "str | None"], CliError]


def quiet_kafka_python() -> None:
    """kafka-python logs every failed connection attempt; the verbs report what matters themselves."""
    debug = logging.getLogger().isEnabledFor(logging.DEBUG)
    logging.getLogger("kafka").setLevel(logging.DEBUG if debug else logging.CRITICAL + 1)


# librdkafka's (and Kafka's) property names → kafka-python's, where the name is not just dots → underscores.
_ALIASES = {
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
}
# kafka-python settings that are objects, not values a properties file can hold.
_NOT_SETTABLE = frozenset({"selector", "kafka_client", "socket_options", "ssl_context", "metric_reporters",
                           "sasl_oauth_token_provider"})


def client_config(args: argparse.Namespace, verb: str) -> dict[str, Any]:
    """KafkaAdminClient's keyword arguments: the shared options, then ``--command-config`` and properties."""
    conf: dict[str, Any] = {
        "bootstrap_servers": [s.strip() for s in args.bootstrap_server.split(",") if s.strip()],
        "client_id": f"odradek-{verb}",
        "request_timeout_ms": args.request_timeout_ms,
        "bootstrap_timeout_ms": args.request_timeout_ms,
        "reconnect_backoff_max_ms": 1000,
    }
    props: dict[str, str] = {}
    if args.command_config is not None:
        props.update(_client.read_properties(args.command_config))
    for item in args.client_properties:
        key, value = _client.split_key_value(item, "--client-property")
        props[key] = value
    for key, value in props.items():
        name, converted = _translate(key, value)
        if name is None:
            print(f"odradek {verb}: warning: ignoring client config {key!r}: kafka-python, which this verb "
                  "uses, has no such setting", file=sys.stderr)
            continue
        conf[name] = converted
    return conf


def _translate(key: str, value: str) -> tuple[str | None, Any]:
    """(kafka-python name, typed value) of one client property; name None when it has no equivalent."""
    if key == "ssl.endpoint.identification.algorithm":
        return "ssl_check_hostname", value.strip().lower() == "https"
    name = _ALIASES.get(key, key.replace(".", "_"))
    defaults = KafkaAdminClient.DEFAULT_CONFIG
    if name not in defaults or name in _NOT_SETTABLE:
        return None, None
    if name == "bootstrap_servers":
        return name, [s.strip() for s in value.split(",") if s.strip()]
    if name == "api_version":
        try:
            return name, tuple(int(x) for x in value.split("."))
        except ValueError:
            raise CliError(f"client config api.version={value!r} is not a version like 3.9",
                           exit_code=2) from None
    default = defaults[name]
    if isinstance(default, bool):
        if value.strip().lower() not in ("true", "false"):
            raise CliError(f"client config {key}={value!r} must be true or false", exit_code=2)
        return name, value.strip().lower() == "true"
    if isinstance(default, int):
        try:
            return name, int(value)
        except ValueError:
            raise CliError(f"client config {key}={value!r} must be an integer", exit_code=2) from None
    return name, value


UNREACHABLE = (kerrors.KafkaTimeoutError, kerrors.KafkaConnectionError, kerrors.NodeNotReadyError,
               kerrors.RequestTimedOutError, kerrors.MetadataEmptyBrokerList, TimeoutError)


def bounded(fn: Callable[[], T], seconds: float) -> T:
    """``fn()`` on a daemon thread, waited for at most ``seconds`` (``TimeoutError`` then).

    A daemon thread, not an executor: a call that never returns must not keep the process alive.
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised on the caller's thread
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=target, name="odradek-admin-call", daemon=True).start()
    if not done.wait(seconds):
        raise TimeoutError(f"no answer within {seconds:g}s")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def describe_error(e: BaseException) -> str:
    if isinstance(e, kerrors.BrokerResponseError) and e.message:
        return f"{e.description.rstrip('.')} ({e.message})" if e.description else e.message
    text = str(e)
    # kafka-python prefixes its messages with the class name ("KafkaTimeoutError: ...").
    name = type(e).__name__
    return text[len(name) + 2:] if text.startswith(name + ": ") else text or name


def generic_error(e: BaseException, args: argparse.Namespace, what: str) -> CliError:
    """The ``CliError`` for a failure no verb-specific rule covers: unreachable, or the broker's error."""
    if isinstance(e, CliError):
        return e
    if isinstance(e, UNREACHABLE):
        err = _client.unreachable(args, f"{what}: {describe_error(e)}")
        err.code = getattr(e, "errno", None)
        return err
    return CliError(f"cannot {what}: {describe_error(e)}", code=getattr(e, "errno", None))


class Admin:
    """A ``KafkaAdminClient`` whose calls are bounded and whose failures are ``CliError``s (``error_from`` maps
    them, falling back on ``generic_error``)."""

    def __init__(self, args: argparse.Namespace, verb: str, error_from: ErrorMapper | None = None) -> None:
        self.args = args
        self.error_from: ErrorMapper = error_from or (lambda e, a, what, subject: generic_error(e, a, what))
        conf = client_config(args, verb)
        self.call_limit_s = 2 * _client.timeout_s(args) + 5
        try:
            self.client: KafkaAdminClient = bounded(lambda: KafkaAdminClient(**conf), self.call_limit_s)
        except kerrors.KafkaConfigurationError as e:
            raise CliError(f"invalid client configuration: {e}",
                           "check --client-property/--command-config", exit_code=2) from None
        except Exception as e:
            raise self.error_from(e, args, "connect", None) from None

    def call(self, what: str, fn: Callable[[KafkaAdminClient], T], *, subject: str | None = None) -> T:
        try:
            return bounded(lambda: fn(self.client), self.call_limit_s)
        except Exception as e:
            raise self.error_from(e, self.args, what, subject) from None

    def close(self) -> None:
        try:
            bounded(self.client.close, 5)
        except Exception as e:  # nothing left to report to: the verb's answer is already out
            log.debug("closing the admin client failed: %s", e)
