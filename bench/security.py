"""Security (issue 16): produce and consume over TLS and SASL_SSL beside PLAINTEXT, what TLS itself costs on this
machine, and how long an authenticated connection takes to set up.

Run (from the repository root, under the benchmarks' shared lock)::

    flock /tmp/odradek-bench.lock python -m bench.security            # full, 7 rounds (~8 min)
    flock /tmp/odradek-bench.lock python -m bench.security --quick    # smoke test, 3 rounds (~2 min)
    python -m bench.security --only handshake                         # a subset (throughput,handshake)
    python -m bench.security --profile    # py-spy profiles of the broker, PLAINTEXT and SSL, same loads

One broker process (``odradek serve``) with four listeners on 127.0.0.1: PLAINTEXT (admin requests, and the
baseline), SSL (server certificate only), SASL_PLAINTEXT and SASL_SSL, each SASL listener offering PLAIN (users in
its JAAS line) and SCRAM-SHA-256/512 (credentials made with ``odradek configs alter`` before the run). The
certificates come from ``tests/security/certs.py``: a CA and a server certificate for 127.0.0.1 (EC P-256 keys
unless ``--key-type rsa``), the server's key store PKCS12, the clients trusting the CA's PEM.

- **throughput**: ``rdkafka_performance`` as ``bench.broker_throughput`` runs it (``produce_once``/``consume_once``
  with the listener's address and ``-X security.protocol=... sasl.* ssl.ca.location=...``), 1 KiB records, acks=1,
  one partition, over four client paths: PLAINTEXT, SSL, SASL_SSL with SCRAM-SHA-256 and SASL_SSL with PLAIN.
  Produce writes ``count`` records (quick 500,000, full 2,000,000) into a fresh topic per path and round (deleted
  after it, so the disk stays flat); consume reads ``consume`` records (quick 600,000, full 1,800,000) of one
  topic, filled once over PLAINTEXT before the rounds, so every path reads the same bytes, from the beginning. A run
  that moves fewer records than asked is reported as failed, not counted. Rounds alternate the paths' order
  (forward, then backward); figures are medians of ``--rounds`` (quick 3, full 7). Goals: produce >= 0.6x and
  consume >= 0.4x PLAINTEXT's MB/s, for SSL and for both SASL_SSL paths (a TLS connection cannot use
  ``sendfile``: the broker copies every fetched byte through the TLS layer).
- **raw limits**, measured in the same run between the rounds: loopback TCP into a file
  (``bench.broker_throughput.phase_raw_tcp``, produce's limit), and TLS over loopback with Python's ``ssl``
  (``tls_loopback``: one process encrypts a 1 MiB buffer again and again into a TLS connection, another decrypts
  and discards; the same OpenSSL and the same cipher the broker negotiates). Beside them, ``openssl speed -evp``
  of that cipher on 16 KiB blocks (one core, crypto alone), and Python's ``ssl`` decrypting in memory on one core
  (``tls_decrypt``) 16 KiB records and the records librdkafka's producer writes for 1 KiB messages (a ~14 B and a
  1,000 B record per message): decryption is per TLS record, so the second is the ceiling of the broker's
  event-loop thread taking in such a producer's requests.
- **handshake**: ``--handshakes`` (quick 60, full 210) complete connection setups per path, timed by a client in
  this process: Odradek's own client connection (``odradek.client.connection.BrokerConnection``, asyncio, the
  one brokers use towards each other) does TCP connect, a full TLS handshake (no session resumption: a fresh
  connection each time), ApiVersions, then SaslHandshake and SaslAuthenticate with the project's sans-IO SASL
  clients (``PlainClient``, ``ScramClient``: PBKDF2 of the password, 4096 iterations, on the client for every
  SCRAM login, as librdkafka does it). Paths: PLAINTEXT, SSL, SASL_PLAINTEXT/PLAIN, SASL_SSL/PLAIN,
  SASL_SSL/SCRAM-SHA-256, SASL_SSL/SCRAM-SHA-512, in blocks of 10 rotating over the paths. Median and p99 in ms,
  with the broker's CPU per setup. The issue names no bound for it: the figures stand beside PLAINTEXT's.
- **acl**: produce and consume as one authenticated user (SASL_PLAINTEXT, PLAIN; not a super user) on two brokers,
  one without an authorizer and one with Kafka's ``AclAuthorizer`` and 1,000 ACLs (the user's own on its topics and
  groups, the rest other users' literal, prefixed and DENY ACLs on other topics and groups), runs alternating
  between the two, medians of ``--rounds``; goal: >= 0.95x of no authorizer.

Every transfer is bounded by ``--max-seconds``; the broker runs in a fresh scratch directory removed on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import multiprocessing
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    DEFAULT_TMP_ROOT,
    GB,
    REPO,
    CpuWatch,
    MiB,
    guarded,
    machine_facts,
    median,
    percentile,
    print_facts,
    scratch_dir,
    verdict,
)
from bench._kafka import Broker, PerfTool, build_rdkafka_performance, cpu_split, free_port
from bench.broker_throughput import (
    OUT,
    PySpy,
    Run,
    consume_once,
    phase_raw_tcp,
    produce_once,
    wait_for_quiet_machine,
)
from odradek.client.connection import BrokerConnection, ClientSecurity
from odradek.protocol.sasl import PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, PlainClient, SaslClient, ScramClient
from tests.security import certs

RECORD = 1024
USER, PASSWORD = "alice", "alice-secret"
STORE_PASSWORD = "store-pw"
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
GOALS = {"produce": 0.6, "consume": 0.4}
CONSUME_TOPIC = "consume"
CHUNK = 1 * MiB
DECRYPT_BYTES = 64 * MiB  # encrypted in memory first, then timed while decrypted


# -- the setup: certificates, the broker and its listeners ------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    """The files of one run: the CA the clients trust, the server's PKCS12 key store, and the same key and chain
    as PEM for the raw TLS baseline."""

    cafile: Path
    keystore: Path
    key_pem: Path
    chain_pem: Path

    @classmethod
    def make(cls, d: Path, key_type: str) -> Certificates:
        ca = certs.make_ca(key_type=key_type)
        server = certs.issue(ca, "localhost", sans=("localhost", "127.0.0.1"))
        return cls(certs.write_cert_pem(d / "ca.pem", ca),
                   certs.write_pkcs12(d / "server.p12", server, STORE_PASSWORD.encode()),
                   certs.write_key_pem(d / "server-key.pem", server),
                   certs.write_cert_pem(d / "server-chain.pem", server))

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cafile))

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.chain_pem), str(self.key_pem))
        return ctx


def broker_properties(ports: dict[str, int], c: Certificates) -> dict[str, str]:
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{USER}="{PASSWORD}";'
    return {
        "listeners": ",".join(f"{name}://127.0.0.1:{ports[name]}" for name in LISTENERS),
        "listener.security.protocol.map": ",".join(f"{name}:{name}" for name in LISTENERS),
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(c.keystore),
        "ssl.keystore.password": STORE_PASSWORD,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(c.cafile),
        "sasl.enabled.mechanisms": f"{PLAIN},{SCRAM_SHA_256},{SCRAM_SHA_512}",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
        "num.partitions": "1",
    }


@dataclass
class SecureBroker(Broker):
    """An Odradek broker with all four listeners. ``odradek serve --port`` would replace them by a single PLAINTEXT
    listener, so this start passes ``listeners`` alone; ``port`` (what ``bootstrap`` and the admin requests use) is
    the PLAINTEXT listener's."""

    certificates: Certificates | None = None
    ports: dict[str, int] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)  # more server.properties keys (the ACL phase's authorizer)

    def start(self, timeout: float = 30) -> SecureBroker:
        assert self.certificates is not None
        self.ports = {name: free_port() for name in LISTENERS}
        self.port = self.ports["PLAINTEXT"]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.odradek.log"
        props = {**broker_properties(self.ports, self.certificates), "log.dirs": str(self.data_dir / "data"),
                 "http.listeners": "", **self.extra}
        cmd = [sys.executable, "-m", "odradek.cli.main", "--log-level", "WARNING", "serve",
               *(arg for k, v in props.items() for arg in ("--override", f"{k}={v}"))]
        with open(self.log_path, "wb") as logf:
            self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=str(REPO),
                                         env={**os.environ, "PYTHONPATH": str(REPO), **self.env},
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        waiting = set(self.ports.values())
        while waiting:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the broker did not open its listeners within {timeout:.0f} s:\n{self.log_tail()}")
            for port in list(waiting):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                    waiting.discard(port)
            time.sleep(0.05)
        return self

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def add_scram_credentials(self) -> None:
        """``odradek configs alter`` through the PLAINTEXT listener, as an operator would."""
        config = ",".join(f"{m}=[password={PASSWORD}]" for m in (SCRAM_SHA_256, SCRAM_SHA_512))
        out = subprocess.run([sys.executable, "-m", "odradek.cli.main", "configs", "alter", "--entity-type", "users",
                              "--entity-name", USER, "--add-config", config, "--bootstrap-server", self.bootstrap],
                             capture_output=True, text=True, timeout=60, cwd=REPO)
        if out.returncode:
            raise RuntimeError(f"odradek configs alter failed: {out.stderr[-2000:]}")

    def delete_topic(self, name: str, timeout: float = 30) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        admin.delete_topics([name], operation_timeout=timeout)[name].result(timeout=timeout)


@dataclass(frozen=True)
class ClientPath:
    """How a client reaches the broker: a listener and, on SASL listeners, a mechanism."""

    listener: str
    mechanism: str | None = None

    @property
    def name(self) -> str:
        return f"{self.listener}/{self.mechanism}" if self.mechanism else self.listener

    @property
    def tls(self) -> bool:
        return self.listener.endswith("SSL")

    def librdkafka_options(self, c: Certificates) -> list[str]:
        """``-X`` options of rdkafka_performance for this path."""
        conf = {"security.protocol": self.listener.lower()}
        if self.tls:
            conf["ssl.ca.location"] = str(c.cafile)
        if self.mechanism:
            conf |= {"sasl.mechanism": self.mechanism, "sasl.username": USER, "sasl.password": PASSWORD}
        return [arg for k, v in conf.items() for arg in ("-X", f"{k}={v}")]

    def client_security(self, c: Certificates) -> ClientSecurity:
        """The same settings for Odradek's own client connection."""
        tls = c.client_context() if self.tls else None
        mechanism = self.mechanism
        if mechanism is None:
            return ClientSecurity(tls)

        def new_client() -> SaslClient:
            return PlainClient(USER, PASSWORD) if mechanism == PLAIN else ScramClient(mechanism, USER, PASSWORD)

        return ClientSecurity(tls, mechanism, new_client)


PLAINTEXT = ClientPath("PLAINTEXT")
THROUGHPUT_PATHS = (PLAINTEXT, ClientPath("SSL"), ClientPath("SASL_SSL", SCRAM_SHA_256), ClientPath("SASL_SSL", PLAIN))
HANDSHAKE_PATHS = (PLAINTEXT, ClientPath("SSL"), ClientPath("SASL_PLAINTEXT", PLAIN), ClientPath("SASL_SSL", PLAIN),
                   ClientPath("SASL_SSL", SCRAM_SHA_256), ClientPath("SASL_SSL", SCRAM_SHA_512))


# -- raw limits ------------------------------------------------------------------------------------------------


def _tls_receiver(listener: socket.socket, ctx: ssl.SSLContext, max_seconds: float,
                  result: multiprocessing.Queue) -> None:
    listener.settimeout(30)
    conn, _ = listener.accept()
    conn.settimeout(max_seconds + 30)
    with ctx.wrap_socket(conn, server_side=True) as tls:
        buf = memoryview(bytearray(CHUNK))
        total, t0 = 0, 0.0
        while n := tls.recv_into(buf):
            if not total:
                t0 = time.perf_counter()
            total += n
        result.put((total, time.perf_counter() - t0, tls.cipher()[0]))


def tls_loopback(c: Certificates, total: int, max_seconds: float) -> tuple[float, str]:
    """MB/s of ``total`` bytes encrypted by this process into a loopback TLS connection and decrypted (and dropped)
    by a forked one, first to last byte as the receiver sees them; and the negotiated cipher."""
    listener = socket.create_server(("127.0.0.1", 0))
    result: multiprocessing.Queue = multiprocessing.get_context("fork").Queue()
    rx = multiprocessing.get_context("fork").Process(
        target=_tls_receiver, args=(listener, c.server_context(), max_seconds, result), daemon=True)
    rx.start()
    try:
        raw = socket.create_connection(listener.getsockname(), timeout=max_seconds + 30)
        with c.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            block = memoryview(os.urandom(CHUNK))
            deadline = time.perf_counter() + max_seconds
            sent = 0
            while sent < total and time.perf_counter() < deadline:
                tls.sendall(block[: min(CHUNK, total - sent)])
                sent += min(CHUNK, total - sent)
            tls.shutdown(socket.SHUT_WR)
            nbytes, seconds, cipher = result.get(timeout=max_seconds + 60)
    finally:
        listener.close()
        rx.join(timeout=30)
        if rx.is_alive():
            rx.kill()
    return nbytes / seconds / 1e6, cipher


# The record pattern librdkafka's producer sends over TLS for 1 KiB messages (seen by counting the broker's TLS reads):
# a message's few header bytes and its value go out as two TLS records, so a produce request of 1 KiB messages
# arrives as ~1 KiB and ~14 B records, one decryption each, beside whole 16 KiB records for the parts it copied.
SMALL_RECORDS = (14, 1000)


def tls_decrypt(c: Certificates, pieces: tuple[int, ...], total: int) -> float:
    """MB/s at which Python's ``ssl`` decrypts, on one core and in memory (no sockets), a stream made of TLS
    records of the sizes in ``pieces`` (repeated): what the broker's event-loop thread can at best take in over
    TLS when a client writes records of those sizes."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    server = c.server_context().wrap_bio(s_in, s_out, server_side=True)
    client = c.client_context().wrap_bio(c_in, c_out, server_hostname="127.0.0.1")
    for _ in range(10):
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    data = os.urandom(max(pieces))
    written = 0
    while written < total:
        for n in pieces:
            client.write(data[:n])
            written += n
    wire = c_out.read()
    buf = memoryview(bytearray(CHUNK))
    got = 0
    t0 = time.perf_counter()
    for off in range(0, len(wire), CHUNK):
        s_in.write(wire[off:off + CHUNK])
        with contextlib.suppress(ssl.SSLWantReadError):
            while True:
                got += server.read(CHUNK, buf)
    seconds = time.perf_counter() - t0
    assert got == written, f"decrypted {got} of {written} bytes"
    return got / seconds / 1e6


def openssl_speed(cipher: str) -> str:
    """``openssl speed -evp`` of the AEAD behind a TLS cipher name, 16 KiB blocks, one core (or why not)."""
    evp = "aes-256-gcm" if "AES_256_GCM" in cipher or "AES256-GCM" in cipher else \
        "aes-128-gcm" if "AES_128_GCM" in cipher or "AES128-GCM" in cipher else \
        "chacha20-poly1305" if "CHACHA20" in cipher else None
    if evp is None or not shutil.which("openssl"):
        return f"openssl speed: not run (cipher {cipher})"
    try:
        out = subprocess.run(["openssl", "speed", "-evp", evp, "-seconds", "2", "-bytes", "16384"],
                             capture_output=True, text=True, timeout=60).stdout
    except subprocess.TimeoutExpired:
        return "openssl speed: timed out"
    m = re.search(rf"^{re.escape(evp)}\s+([\d.]+)k\s*$", out, re.M | re.I)
    return f"openssl speed -evp {evp}: {float(m.group(1)) * 1e3 / 1e6:,.0f} MB/s (16 KiB blocks, one core)" if m \
        else f"openssl speed -evp {evp}: unreadable output"


# -- throughput ------------------------------------------------------------------------------------------------


@dataclass
class Figures:
    produce: dict[str, list[Run]] = field(default_factory=dict)
    consume: dict[str, list[Run]] = field(default_factory=dict)
    raw_tcp: list[float] = field(default_factory=list)
    raw_tls: list[float] = field(default_factory=list)
    decrypt_16k: list[float] = field(default_factory=list)
    decrypt_small: list[float] = field(default_factory=list)
    cipher: str = "?"
    acl_produce: dict[str, dict[str, list[Run]]] = field(default_factory=dict)  # broker ("none"/"acls") -> path
    acl_consume: dict[str, dict[str, list[Run]]] = field(default_factory=dict)


def phase_throughput(a: argparse.Namespace, tool: PerfTool, b: SecureBroker, scratch: Path, figs: Figures) -> None:
    c = b.certificates
    assert c is not None
    b.create_topic(CONSUME_TOPIC)
    produce_once(tool, b, RECORD, "1", a.consume, a.max_seconds * 3, scratch, topic=CONSUME_TOPIC)
    for r in range(a.rounds):
        figs.raw_tcp.append(phase_raw_tcp(scratch, a.raw_bytes, a.max_seconds))
        tls, figs.cipher = tls_loopback(c, a.raw_bytes, a.max_seconds)
        figs.raw_tls.append(tls)
        figs.decrypt_16k.append(tls_decrypt(c, (16384,), DECRYPT_BYTES))
        figs.decrypt_small.append(tls_decrypt(c, SMALL_RECORDS, DECRYPT_BYTES))
        print(f"#   round {r + 1}: raw loopback TCP->file {figs.raw_tcp[-1]:,.0f} MB/s, raw TLS {tls:,.0f} MB/s "
              f"({figs.cipher}); decrypt 16 KiB records {figs.decrypt_16k[-1]:,.0f} MB/s, 14 B + 1,000 B records "
              f"{figs.decrypt_small[-1]:,.0f} MB/s", flush=True)
        order = THROUGHPUT_PATHS if r % 2 == 0 else THROUGHPUT_PATHS[::-1]
        for path in order:
            topic = f"produce-{path.name.replace('/', '-').lower()}-{r}"
            b.create_topic(topic)
            try:
                record(figs.produce, r, "produce", path, a.count, functools.partial(
                    produce_once, tool, b, RECORD, "1", a.count, a.max_seconds, scratch, topic=topic,
                    bootstrap=b.address(path.listener), extra=path.librdkafka_options(c)))
            finally:
                b.delete_topic(topic)
        for path in order:
            record(figs.consume, r, "consume", path, a.consume, functools.partial(
                consume_once, tool, b, a.consume, a.max_seconds, topic=CONSUME_TOPIC,
                bootstrap=b.address(path.listener), extra=path.librdkafka_options(c)))


def record(into: dict[str, list[Run]], r: int, what: str, path: ClientPath, count: int,
           measure: Callable[[], Run]) -> None:
    """One run: kept if it moved all ``count`` records within its bound, else reported as failed."""
    run = guarded(f"round {r + 1}: {what} {path.name}", measure, None)
    if run is not None and run.rps * run.seconds < count * 0.999:
        print(f"#   round {r + 1}: {what} {path.name} FAILED: {run.rps * run.seconds:,.0f} of {count:,} records "
              f"in {run.seconds:.1f} s", flush=True)
        run = None
    into.setdefault(path.name, [])
    if run is not None:
        into[path.name].append(run)
        print(f"#   round {r + 1}: {what} {path.name}: {run.mbps:,.0f} MB/s ({run.rps:,.0f} rec/s, "
              f"{run.seconds:.2f} s), broker {run.broker_cores:.2f} cores, client {run.client_cores:.2f}", flush=True)


def run_profiles(a: argparse.Namespace, tool: PerfTool, b: SecureBroker, scratch: Path) -> None:
    """``--profile``: py-spy on the broker (``bench.broker_throughput.PySpy``) while PLAINTEXT and SSL produce and
    consume the throughput phase's loads, three runs each; figures under py-spy are not the benchmark's."""
    c = b.certificates
    assert c is not None and b.proc is not None
    OUT.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    b.create_topic(CONSUME_TOPIC)
    produce_once(tool, b, RECORD, "1", a.consume, a.max_seconds * 3, scratch, topic=CONSUME_TOPIC)
    for what in ("produce", "consume"):
        for path in (PLAINTEXT, ClientPath("SSL")):
            opts = {"bootstrap": b.address(path.listener), "extra": path.librdkafka_options(c)}
            out = OUT / f"pyspy-{stamp}-security-{what}-{path.listener.lower()}.txt"
            spy = PySpy(b.proc.pid, out, 3 * a.max_seconds + 60)
            u0, s0 = cpu_split(b.proc.pid)
            runs = []
            for i in range(3):
                if what == "produce":
                    topic = f"profile-{path.listener.lower()}-{i}"
                    b.create_topic(topic)
                    runs.append(produce_once(tool, b, RECORD, "1", a.count, a.max_seconds, scratch, topic=topic,
                                             **opts))
                    b.delete_topic(topic)
                else:
                    runs.append(consume_once(tool, b, a.consume, a.max_seconds, topic=CONSUME_TOPIC,
                                             **opts))
            u1, s1 = cpu_split(b.proc.pid)
            summary = spy.stop(sum(r.seconds for r in runs))
            print(f"\n## {what} {path.name}, 3 runs under py-spy: {median([r.mbps for r in runs]):,.0f} MB/s (median), "
                  f"broker user {u1 - u0:.2f} s, system {s1 - s0:.2f} s\n  collapsed stacks: "
                  f"{out.relative_to(REPO)}\n{summary}", flush=True)


ACL_PATH = ClientPath("SASL_PLAINTEXT", PLAIN)  # an authenticated user who is not a super user
ACL_COUNT = 1_000
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "super.users": "User:ANONYMOUS"}  # the benchmark's own PLAINTEXT admin requests


def create_acls(b: SecureBroker, topics: Sequence[str]) -> int:
    """``ACL_COUNT`` ACLs: what the benchmark's user needs on ``topics`` (WRITE, READ, DESCRIBE, and READ on every
    group) and, around them, ACLs of other users on other topics, prefixes and groups, as a shared cluster has."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    allow = AclPermissionType.ALLOW
    lit, pre = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    bindings = [AclBinding(ResourceType.TOPIC, t, lit, f"User:{USER}", "*", op, allow)
                for t in topics for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)]
    bindings.append(AclBinding(ResourceType.GROUP, "*", lit, f"User:{USER}", "*", AclOperation.READ, allow))
    i = 0
    while len(bindings) < ACL_COUNT:
        kind = i % 4
        if kind == 0:
            bindings.append(AclBinding(ResourceType.TOPIC, f"team-{i}", lit, f"User:user-{i % 97}", "*",
                                       AclOperation.READ, allow))
        elif kind == 1:
            bindings.append(AclBinding(ResourceType.TOPIC, f"app-{i}-", pre, f"User:user-{i % 97}", "*",
                                       AclOperation.WRITE, allow))
        elif kind == 2:
            bindings.append(AclBinding(ResourceType.GROUP, f"group-{i}", lit, f"User:user-{i % 97}", "*",
                                       AclOperation.READ, allow))
        else:
            bindings.append(AclBinding(ResourceType.TOPIC, f"team-{i}", lit, f"User:user-{i % 97}", "10.0.0.1",
                                       AclOperation.ALL, AclPermissionType.DENY))
        i += 1
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})
    for f in admin.create_acls(bindings, request_timeout=60).values():
        f.result(timeout=60)
    return len(bindings)


def phase_acl_overhead(a: argparse.Namespace, tool: PerfTool, brokers: dict[str, SecureBroker], scratch: Path,
                       figs: Figures) -> None:
    """Produce and consume as the same authenticated user (SASL_PLAINTEXT, PLAIN) on a broker without an authorizer
    and on one with Kafka's authorizer and ``ACL_COUNT`` ACLs, runs alternating between the two; goal: >= 0.95x."""
    for name, b in brokers.items():
        b.create_topic(CONSUME_TOPIC)
        produce_once(tool, b, RECORD, "1", a.consume, a.max_seconds * 3, scratch, topic=CONSUME_TOPIC)
        print(f"# {name}: consume topic filled", flush=True)
    c = brokers["none"].certificates
    assert c is not None
    topics = [CONSUME_TOPIC, *(f"acl-produce-{r}" for r in range(a.rounds))]
    print(f"# {create_acls(brokers['acls'], topics):,} ACLs created on the authorizing broker", flush=True)
    for r in range(a.rounds):
        order = ("none", "acls") if r % 2 == 0 else ("acls", "none")
        for name in order:
            b = brokers[name]
            path = ACL_PATH
            topic = f"acl-produce-{r}"
            b.create_topic(topic)
            try:
                record(figs.acl_produce.setdefault(name, {}), r, "produce", path, a.count, functools.partial(
                    produce_once, tool, b, RECORD, "1", a.count, a.max_seconds, scratch, topic=topic,
                    bootstrap=b.address(path.listener), extra=path.librdkafka_options(c)))
            finally:
                b.delete_topic(topic)
        for name in order:
            b = brokers[name]
            record(figs.acl_consume.setdefault(name, {}), r, "consume", ACL_PATH, a.consume, functools.partial(
                consume_once, tool, b, a.consume, a.max_seconds, topic=CONSUME_TOPIC,
                bootstrap=b.address(ACL_PATH.listener), extra=ACL_PATH.librdkafka_options(c)))


def print_acl_overhead(figs: Figures) -> None:
    print()
    for what, runs in (("produce", figs.acl_produce), ("consume", figs.acl_consume)):
        free = median([x.mbps for x in runs["none"][ACL_PATH.name]])
        acls = median([x.mbps for x in runs["acls"][ACL_PATH.name]])
        print(f"{what} over {ACL_PATH.name} with an authorizer and {ACL_COUNT:,} ACLs: {acls:,.0f} MB/s vs "
              f"{free:,.0f} MB/s without = {acls / free:.3f}x (goal >= 0.95: {verdict(acls / free, 0.95)})")
        print("  runs (MB/s): " + "; ".join(f"{n} " + ", ".join(f"{x.mbps:,.0f}" for x in rs[ACL_PATH.name])
                                             for n, rs in runs.items()))


# -- handshakes ------------------------------------------------------------------------------------------------


@dataclass
class Setups:
    ms: list[float] = field(default_factory=list)
    broker_cpu: float = 0.0  # CPU seconds of the broker over all of them

    @property
    def cpu_ms_each(self) -> float:
        return self.broker_cpu / len(self.ms) * 1e3 if self.ms else float("nan")


async def _connect_times(b: SecureBroker, path: ClientPath, security: ClientSecurity, n: int,
                         timeout_ms: int) -> list[float]:
    host, port = b.address(path.listener).rsplit(":", 1)
    out = []
    for _ in range(n):
        conn = BrokerConnection(host, int(port), client_id="bench-security", connect_timeout_ms=timeout_ms,
                                security=security)
        t0 = time.perf_counter()
        await conn.connect()
        out.append((time.perf_counter() - t0) * 1e3)
        await conn.close()
    return out


def phase_handshake(a: argparse.Namespace, b: SecureBroker) -> dict[str, Setups]:
    c = b.certificates
    assert c is not None
    results = {p.name: Setups() for p in HANDSHAKE_PATHS}
    security = {p.name: p.client_security(c) for p in HANDSHAKE_PATHS}
    block = 10
    for i in range(max(1, a.handshakes // block)):
        for path in HANDSHAKE_PATHS if i % 2 == 0 else HANDSHAKE_PATHS[::-1]:
            cpu0 = b.cpu()
            results[path.name].ms += asyncio.run(_connect_times(b, path, security[path.name], block,
                                                                int(a.max_seconds * 1000)))
            results[path.name].broker_cpu += b.cpu() - cpu0
    return results


# -- report ----------------------------------------------------------------------------------------------------


def print_throughput(figs: Figures, rounds: int) -> None:
    print()
    tcp, tls = median(figs.raw_tcp), median(figs.raw_tls)
    print(f"raw limits (median of {rounds}): loopback TCP -> file {tcp:,.0f} MB/s; TLS over loopback (Python ssl, "
          f"{figs.cipher}) {tls:,.0f} MB/s = {tls / tcp:.2f}x TCP")
    print(f"  {openssl_speed(figs.cipher)}")
    print(f"  Python ssl decrypting on one core, in memory: 16 KiB records {median(figs.decrypt_16k):,.0f} MB/s; "
          f"the records librdkafka sends for 1 KiB messages (14 B + 1,000 B each) {median(figs.decrypt_small):,.0f} "
          f"MB/s")
    cols = (f"{'1 KiB, acks=1':<14} | {'path':<24} | {'MB/s':>6} {'rec/s':>10} | {'cores broker':>12} {'client':>6} | "
            f"{'vs PLAINTEXT':>12} | {'goal':>6} | {'met?':<7}")
    print(cols)
    print("-" * len(cols))
    for what, runs in (("produce", figs.produce), ("consume", figs.consume)):
        base = median([x.mbps for x in runs[PLAINTEXT.name]])
        for name, rs in runs.items():
            mb = median([x.mbps for x in rs])
            ratio, goal = mb / base, GOALS[what]
            ok = "" if name == PLAINTEXT.name else verdict(ratio, goal)
            print(f"{what:<14} | {name:<24} | {mb:>6,.0f} {median([x.rps for x in rs]):>10,.0f} | "
                  f"{median([x.broker_cores for x in rs]):>12.2f} {median([x.client_cores for x in rs]):>6.2f} | "
                  f"{ratio:>12.2f} | {'' if ok == '' else f'>={goal}':>6} | {ok:<7}")
        print("  runs (MB/s): " + "; ".join(f"{n} " + ", ".join(f"{x.mbps:,.0f}" for x in rs)
                                             for n, rs in runs.items()))


def print_handshakes(results: dict[str, Setups]) -> None:
    print()
    base = median(results[PLAINTEXT.name].ms)
    cols = (f"{'connection setup':<24} | {'n':>4} | {'median ms':>9} {'p99 ms':>8} | {'vs PLAINTEXT':>12} | "
            f"{'broker CPU ms each':>18}")
    print(cols)
    print("-" * len(cols))
    for name, s in results.items():
        print(f"{name:<24} | {len(s.ms):>4} | {median(s.ms):>9.2f} {percentile(s.ms, 99):>8.2f} | "
              f"{median(s.ms) / base:>12.1f} | {s.cpu_ms_each:>18.2f}")
    print("  (client: odradek.client.connection.BrokerConnection, TCP + TLS + ApiVersions + SASL; no goal set)")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds of 200,000 records, 60 handshakes per path")
    ap.add_argument("--only", default="throughput,handshake,acl", help="phases: throughput,handshake,acl")
    ap.add_argument("--rounds", type=int, help="rounds of every throughput run (default 7, quick 3)")
    ap.add_argument("--handshakes", type=int, help="connection setups per path (default 210, quick 60)")
    ap.add_argument("--profile", action="store_true", help="only py-spy profiles of the broker, PLAINTEXT and SSL")
    ap.add_argument("--broker-env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment of the broker process (repeatable), for experiments")
    ap.add_argument("--key-type", choices=("ec", "rsa"), default="ec", help="the certificates' keys (default ec)")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="time bound of any one transfer")
    ap.add_argument("--wait", type=float, default=0.0, help="wait up to this many s for an idle machine first")
    ap.add_argument("--tmp", type=Path, default=DEFAULT_TMP_ROOT, help="scratch root (deleted after)")
    a = ap.parse_args(argv)
    a.rounds = a.rounds or (3 if a.quick else 7)
    a.handshakes = a.handshakes or (60 if a.quick else 210)
    a.count = 500_000 if a.quick else 2_000_000
    a.consume = 600_000 if a.quick else 1_800_000
    a.raw_bytes = (256 if a.quick else 1024) * MiB
    phases = set(a.only.split(","))

    tool = build_rdkafka_performance()
    a.tmp.mkdir(parents=True, exist_ok=True)
    facts = machine_facts(a.tmp)
    facts["librdkafka"] = tool.librdkafka
    facts["openssl"] = ssl.OPENSSL_VERSION
    if a.broker_env:
        facts["broker env"] = " ".join(a.broker_env)
    print_facts(facts)
    if a.wait:
        wait_for_quiet_machine(a.wait)
    watch, started = CpuWatch(), time.monotonic()
    figs, setups = Figures(), None
    with scratch_dir(a.tmp, "bench-security", int((a.count + a.consume) * RECORD * 1.2) + GB) as scratch:
        certificates = Certificates.make(scratch, a.key_type)
        b = SecureBroker("odradek", scratch / "broker", env=dict(kv.split("=", 1) for kv in a.broker_env),
                         certificates=certificates)
        b.start()
        try:
            b.add_scram_credentials()
            if a.profile:
                run_profiles(a, tool, b, scratch)
                return
            if "handshake" in phases:
                print("# handshake", flush=True)
                setups = phase_handshake(a, b)
            if "throughput" in phases:
                print("# throughput", flush=True)
                phase_throughput(a, tool, b, scratch, figs)
        finally:
            b.stop()
        if "acl" in phases:
            print("# acl", flush=True)
            brokers = {name: SecureBroker("odradek", scratch / f"acl-{name}", certificates=certificates,
                                          extra=AUTHORIZER if name == "acls" else {}) for name in ("none", "acls")}
            try:
                for one in brokers.values():
                    one.start()
                phase_acl_overhead(a, tool, brokers, scratch, figs)
            finally:
                for one in brokers.values():
                    if one.proc is not None:
                        one.stop()
    if figs.produce:
        print_throughput(figs, a.rounds)
    if setups:
        print_handshakes(setups)
    if figs.acl_produce:
        print_acl_overhead(figs)
    print(f"\nother CPU use during the run: {watch.other_share():.0%} of {os.cpu_count()} CPUs; "
          f"run took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
