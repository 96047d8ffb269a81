"""The broker's HTTP listener: Prometheus ``/metrics``, ``/healthz``, ``/readyz`` and, when installed, the web
console (``odradek/console/``). A client of the broker's parts, like the handlers; never imported by them."""
