"""The HTTP listener's lifecycle: bound and served on the broker's event loop, started and stopped by the server.

``http.listeners`` (``broker/config.py``) lists ``http://HOST:PORT`` and ``https://HOST:PORT`` addresses; empty, none
is served. HTTPS takes the broker's TLS settings as a TLS Kafka listener does (``security/tls.py``): those of the
first SSL or SASL_SSL listener, its ``listener.name.<l>.ssl.*`` overrides applied, else the broker-wide ``ssl.*``
keys. With a SASL listener, every request needs HTTP Basic credentials of a SASL user (``http/auth.py``).

Invariants:
- Every misconfiguration (an https listener without a key store...) is a ``ConfigError`` raised when this object
  is made, i.e. with the server's, before anything is bound.
- ``start`` binds every address or none (a failure closes what was bound and raises ``OSError``, so the broker
  does not start half-observable); a port 0 is replaced by the bound one in ``urls``, which is logged.
- ``stop`` closes the sockets and gives in-flight requests ``SHUTDOWN_TIMEOUT_S`` to finish.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from odradek.broker.config import BrokerConfig, ConfigError, HttpListener
from odradek.broker.listener_security import ListenerSecurity, tls_keys
from odradek.http.app import build_app
from odradek.http.auth import BasicAuth
from odradek.security.tls import ReloadingServerContext, SslConfigError

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 1.0


class HttpServer:
    def __init__(self, broker: Broker, security: dict[str, ListenerSecurity]) -> None:
        self.broker = broker
        config = broker.config
        self.listeners: list[HttpListener] = list(config.http_listeners)
        self.reloading = tls_context(config) if any(h.scheme == "https" for h in self.listeners) else None
        self.tls = self.reloading.context if self.reloading is not None else None
        sasl = [s.sasl for s in security.values() if s.sasl is not None]
        self.auth = BasicAuth(sasl, int(config.values["connection.failed.authentication.delay.ms"])) if sasl else None
        self.urls: list[str] = []  # bound addresses, in http.listeners order (set by start)
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        if not self.listeners:
            return
        runner = web.AppRunner(
            build_app(self.broker, auth=self.auth), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S
        )
        await runner.setup()
        self._runner = runner
        try:
            for h in self.listeners:
                site = web.TCPSite(
                    runner,
                    h.host or None,
                    h.port,
                    ssl_context=self.tls if h.scheme == "https" else None,
                    reuse_address=True,
                )
                try:
                    await site.start()
                except OSError as e:
                    raise OSError(
                        e.errno,
                        f"http.listeners: cannot listen on {h.url}: {e.strerror or e} (choose another port, "
                        "port 0 for a free one, or leave http.listeners empty)",
                    ) from e
                port = runner.addresses[-1][1]
                self.urls.append(HttpListener(h.scheme, h.host or "0.0.0.0", port).url)
        except BaseException:
            await self.stop()
            raise
        log.info(
            "HTTP on %s (/metrics, /healthz, /readyz%s)%s",
            ", ".join(self.urls),
            ", console" if _has_console() else "",
            "; Basic authentication with the SASL users" if self.auth is not None else "",
        )

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()


def tls_context(config: BrokerConfig) -> ReloadingServerContext:
    """The server side of the https listeners (see the module; new connections follow the store files when they are
    replaced); ``ConfigError`` when it cannot be made."""
    tls_listener = next((lst.name for lst in config.listeners if lst.security_protocol in ("SSL", "SASL_SSL")), None)
    where = f"the TLS settings of listener {tls_listener}" if tls_listener else "the ssl.* keys"
    try:
        return ReloadingServerContext(tls_keys(config, tls_listener), "https listeners")
    except SslConfigError as e:
        raise ConfigError(f"http.listeners has an https listener, but {where} do not make a TLS server: {e}") from None


def _has_console() -> bool:
    try:
        import odradek.console  # noqa: F401
    except ImportError:
        return False
    return True
