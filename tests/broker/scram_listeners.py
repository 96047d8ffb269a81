"""A broker process with a SASL_PLAINTEXT listener for SCRAM beside its PLAINTEXT one, for SCRAM tests.

``BrokerProcess`` starts ``odradek serve --host H --port P``, which makes a single PLAINTEXT listener; ``scram_wrap``
turns that command into one with both listeners (PLAINTEXT on P, where admin requests go and which the process
fixtures wait for, and SASL_PLAINTEXT on ``sasl_port``), SCRAM-SHA-256 and SCRAM-SHA-512 enabled.
"""

from __future__ import annotations

from collections.abc import Callable

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def scram_wrap(sasl_port: int) -> Callable[[list[str]], list[str]]:
    return listeners_wrap(lambda host, port: {
        "listeners": f"PLAINTEXT://{host}:{port},SASL_PLAINTEXT://{host}:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "connection.failed.authentication.delay.ms": "50",
    })


def listeners_wrap(props: Callable[[str, str], dict[str, str]]) -> Callable[[list[str]], list[str]]:
    """A ``BrokerProcess`` command rewriter: ``--host H --port P`` replaced by the overrides ``props(H, P)`` gives
    (which keep a PLAINTEXT listener on P, where the process fixtures wait)."""
    def wrap(cmd: list[str]) -> list[str]:
        host_at, port_at = cmd.index("--host"), cmd.index("--port")
        host, port = cmd[host_at + 1], cmd[port_at + 1]
        kept = [c for i, c in enumerate(cmd) if i not in (host_at, host_at + 1, port_at, port_at + 1)]
        return kept + [arg for k, v in props(host, port).items() for arg in ("--override", f"{k}={v}")]

    return wrap
