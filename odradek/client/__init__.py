"""Kafka protocol clients the broker uses to talk to other brokers.

``connection.BrokerConnection`` is one pipelined TCP connection to one broker; ``pool.ConnectionPool``
keeps one per broker id, replaces broken ones and backs off between reconnects. Requests and
responses are kio's generated dataclasses (``odradek.protocol.apis``), never hand-written layouts.
"""
