"""Small HTTP helpers for the HTTP listener's tests: GET with optional TLS and Basic credentials, and /metrics parsed
into {(sample name, labels): value}."""

from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(
    url: str, *, auth: tuple[str, str] | None = None, context: ssl.SSLContext | None = None, timeout: float = 10.0
) -> tuple[int, dict[str, str], str]:
    """(status, headers, body) of a GET; an HTTP error status is returned, not raised."""
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def metrics(base_url: str, **kwargs: object) -> Samples:
    status, headers, body = get(base_url + "/metrics", **kwargs)  # type: ignore[arg-type]
    assert status == 200, body
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    out: Samples = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))
