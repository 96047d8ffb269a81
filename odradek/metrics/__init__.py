"""Counters and histograms the hot path bumps cheaply (plain ints on broker-owned objects); the HTTP listener
(``odradek/http/``) turns them into Prometheus metric families at scrape time."""
