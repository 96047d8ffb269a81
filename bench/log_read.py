"""Read throughput: ``Log.read`` + ``os.sendfile`` into a loopback TCP socket, against raw sendfile.

Run (from the repository root)::

    PYTHONPATH=. python -m bench.log_read            # full: 2 GiB log, 128 MiB slices, 3 passes (~1 min)
    PYTHONPATH=. python -m bench.log_read --quick    # 256 MiB log, 32 MiB slices, 2 passes (~5 s)

Set-up (untimed): a ``Log`` with the default config (segment.bytes 1 GiB) is filled with 2 GiB of
16 KiB uncompressed v2 batches (``--batch`` to change), then ``os.sync()`` so its pages are clean,
and one untimed pass sends it all so the whole log is in the page cache (warm-cache figures: what a
consumer that keeps up with producers sees). A drain process (a separate Python process, so it has
its own GIL) connects to a 127.0.0.1 listener and reads everything into a 1 MiB buffer; after each
transfer it acknowledges with one byte. A timed transfer runs from its first byte to that
acknowledgement, so bytes still in socket buffers are counted.

The log is cut into slices (128 MiB; segment files hold whole slices' worth of batches). Each slice
is sent three ways, back to back, in rotating order; that is repeated for every slice, ``--passes``
times. Short alternating transfers keep the three kinds under the same conditions on this shared
2-CPU VM, where other sessions' load comes and goes.

- **log**: ``region = Log.read(offset, 1 MiB)`` then ``os.sendfile(sock, region.file, position,
  length)`` until the slice is sent; the next fetch offset is the one after the last batch of the
  region (looked up in a table made while filling the log -- the consumer's job, not the log's).
- **raw**: ``os.sendfile`` of the same file range in 1 MiB chunks: the machine's limit for
  file -> socket, the baseline of the goal.
- **memory**: ``socket.sendall`` of a 1 MiB in-memory buffer: the loopback TCP limit when sending
  from memory (a copy per byte; sendfile of cached pages avoids it, so it is not an upper bound).

Figures: MB/s = 10^6 bytes/s, median over transfers. Ratio = median over slices of log/raw measured
back to back on the same slice; the goal is >= 0.9. Every transfer is bounded by
``--max-seconds``; one cut short pads the rest from memory so the drain stays in step, and reports
only the bytes sent before the deadline.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    DEFAULT_TMP_ROOT,
    CpuWatch,
    GiB,
    KiB,
    MiB,
    bytearrays,
    distinct_batches,
    human,
    machine_facts,
    mbps,
    median,
    print_facts,
    scratch_dir,
    settle,
    verdict,
    wait_for_idle,
)
from odradek.storage.config import LogConfig
from odradek.storage.log import Log

GOAL = 0.9
CHUNK = 1 * MiB
KINDS = ("raw", "log", "memory")

DRAIN = r"""
import os, socket, struct, sys
if len(sys.argv) > 2:
    os.sched_setaffinity(0, {int(sys.argv[2])})
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
buf = memoryview(bytearray(1 << 20))
def read_exact(n):
    got = 0
    while got < n:
        k = s.recv_into(buf[: min(len(buf), n - got)])
        if not k:
            raise SystemExit("sender closed the connection")
        got += k
    return got
while True:
    hdr = bytearray()
    while len(hdr) < 8:
        part = s.recv(8 - len(hdr))
        if not part:
            raise SystemExit(0)
        hdr += part
    (n,) = struct.unpack(">q", hdr)
    if n < 0:
        break
    read_exact(n)
    s.sendall(b"k")
"""


class Link:
    """A loopback TCP connection to the drain process."""

    def __init__(self, drain_cpu: int | None) -> None:
        lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        lst.settimeout(30)
        argv = [sys.executable, "-c", DRAIN, str(lst.getsockname()[1])]
        if drain_cpu is not None:
            argv.append(str(drain_cpu))
        self.proc = subprocess.Popen(argv)
        self.sock, _ = lst.accept()
        lst.close()
        self.sock.settimeout(None)
        self.fd = self.sock.fileno()

    def transfer(self, nbytes: int, send) -> tuple[int, float]:
        """Announce ``nbytes``, run ``send(deadline) -> bytes sent``, pad if it stopped early, and
        wait for the drain's acknowledgement. Returns (bytes sent by ``send``, seconds)."""
        self.sock.sendall(struct.pack(">q", nbytes))
        t0 = time.perf_counter()
        sent = send(t0)
        t1 = time.perf_counter()
        if sent < nbytes:  # cut short by the deadline: keep the drain in step, time what was done
            pad = bytes(CHUNK)
            left = nbytes - sent
            while left:
                left -= self.sock.send(pad[: min(left, CHUNK)])
        if self.sock.recv(1) != b"k":
            raise RuntimeError("drain process did not acknowledge")
        if sent >= nbytes:
            t1 = time.perf_counter()
        return sent, t1 - t0

    def close(self) -> None:
        try:
            self.sock.sendall(struct.pack(">q", -1))
            self.sock.close()
        finally:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def sendfile_all(sock_fd: int, file_fd: int, pos: int, length: int) -> None:
    while length > 0:
        k = os.sendfile(sock_fd, file_fd, pos, length)
        if k <= 0:
            raise RuntimeError("sendfile sent nothing")
        pos += k
        length -= k


def build_log(logdir: Path, total: int, batch: int) -> tuple[Log, dict[tuple[str, int], int]]:
    """Fill a log; return it and the map (segment path, end position of a batch) -> next offset."""
    lg = Log.open(logdir, LogConfig())
    ends: dict[tuple[str, int], int] = {}
    batches = distinct_batches(batch)
    step = max(batch, 256 * MiB // batch * batch)
    done = 0
    t0 = time.perf_counter()
    while done < total:
        if time.perf_counter() - t0 > 600:
            raise SystemExit(f"building the log took over 600 s; stopped at {done} bytes")
        bufs = bytearrays(batches, min(step, total - done))
        for b in bufs:
            info = lg.append(b)
            seg = lg.active_segment
            ends[(str(seg.log_path), seg.size)] = info.last_offset + 1
            done += len(b)
    return lg, ends


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="256 MiB log in 32 MiB slices, 2 passes")
    ap.add_argument("--total-mib", type=int, help="log size, MiB (default 2048, quick 256)")
    ap.add_argument("--slice-mib", type=int, help="bytes per timed transfer, MiB (default 128, quick 32)")
    ap.add_argument("--batch", type=int, default=16 * KiB, help="batch size in the log (default 16 KiB)")
    ap.add_argument(
        "--passes", type=int, help="passes over the log; each sends every slice once per kind (default 3, quick 2)"
    )
    ap.add_argument("--max-seconds", type=float, default=30.0, help="time bound of one transfer")
    ap.add_argument("--verbose", action="store_true", help="print every transfer")
    ap.add_argument(
        "--pin",
        action="store_true",
        help="pin the sender and the drain process to different CPUs (bad when others run)",
    )
    ap.add_argument("--wait-idle", type=float, help="wait up to this many s for an idle machine (default 600, quick 0)")
    ap.add_argument("--tmp", type=Path, default=DEFAULT_TMP_ROOT, help="scratch root (deleted after)")
    args = ap.parse_args()
    total = (args.total_mib or (256 if args.quick else 2048)) * MiB
    slice_bytes = (args.slice_mib or (32 if args.quick else 128)) * MiB
    passes = args.passes or (2 if args.quick else 3)
    if slice_bytes % CHUNK or CHUNK % args.batch:
        raise SystemExit("the slice must be a multiple of 1 MiB and 1 MiB a multiple of the batch size")

    args.tmp.mkdir(parents=True, exist_ok=True)
    print_facts(machine_facts(args.tmp))
    wait = args.wait_idle if args.wait_idle is not None else (0 if args.quick else 600)
    if wait > 0:
        print("# " + wait_for_idle(wait), flush=True)
    watch = CpuWatch()

    with scratch_dir(args.tmp, "log_read", total + 256 * MiB) as d:
        t = time.perf_counter()
        lg, ends = build_log(d / "read-0", total, args.batch)
        settle()
        log_bytes = lg.size
        # Slices: (segment file, start position, length, offset of the batch at that position).
        slices: list[tuple[int, int, int, int]] = []
        fds = [os.open(str(s.log_path), os.O_RDONLY) for s in lg.segments]
        for seg, fd in zip(lg.segments, fds, strict=True):
            for pos in range(0, seg.size, slice_bytes):
                first = seg.base_offset if pos == 0 else ends[(str(seg.log_path), pos)]
                slices.append((fd, pos, min(slice_bytes, seg.size - pos), first))
        print(
            f"# log: {log_bytes / GiB:.2f} GiB of {human(args.batch)} batches in {len(fds)} segment(s), "
            f"offsets [{lg.log_start_offset}, {lg.next_offset}), built in {time.perf_counter() - t:.1f} s; "
            f"reads of {human(CHUNK)}; {len(slices)} slices of {human(slice_bytes)} x {passes} passes per kind"
        )
        cpus = sorted(os.sched_getaffinity(0))
        pinned = args.pin and len(cpus) >= 2
        if pinned:
            os.sched_setaffinity(0, {cpus[0]})
        link = Link(cpus[1] if pinned else None)
        print(
            f"# sender on CPU {cpus[0]}, drain process on CPU {cpus[1]}"
            if pinned
            else "# sender and drain process not pinned (the scheduler places them)",
            flush=True,
        )
        block = memoryview(bytes(CHUNK))
        read = lg.read
        read_time = [0.0, 0]  # seconds inside Log.read, calls (timed transfers only)
        try:

            def raw(sl: tuple[int, int, int, int]):
                fd, start, length, _ = sl

                def send(t0: float) -> int:
                    deadline = t0 + args.max_seconds
                    sent = 0
                    for pos in range(start, start + length, CHUNK):
                        n = min(CHUNK, start + length - pos)
                        sendfile_all(link.fd, fd, pos, n)
                        sent += n
                        if time.perf_counter() > deadline:
                            break
                    return sent

                return send

            def via_log(sl: tuple[int, int, int, int]):
                length, first = sl[2], sl[3]

                def send(t0: float) -> int:
                    deadline = t0 + args.max_seconds
                    sent = 0
                    offset = first
                    while sent < length:
                        t = time.perf_counter()
                        region = read(offset, CHUNK)
                        read_time[0] += time.perf_counter() - t
                        read_time[1] += 1
                        if region is None:
                            break
                        sendfile_all(link.fd, region.file.fileno(), region.position, region.length)
                        sent += region.length
                        offset = ends[(region.file.name, region.position + region.length)]
                        if time.perf_counter() > deadline:
                            break
                    return sent

                return send

            def memory(sl: tuple[int, int, int, int]):
                length = sl[2]

                def send(t0: float) -> int:
                    deadline = t0 + args.max_seconds
                    sent = 0
                    while sent < length:
                        n = min(CHUNK, length - sent)
                        link.sock.sendall(block[:n])
                        sent += n
                        if time.perf_counter() > deadline:
                            break
                    return sent

                return send

            senders = {"raw": raw, "log": via_log, "memory": memory}
            for sl in slices:  # warm-up: page cache, socket buffers, drain process
                link.transfer(sl[2], raw(sl))
            rates: dict[str, list[float]] = {k: [] for k in KINDS}
            log_secs = 0.0
            read_time[:] = [0.0, 0]
            n = 0
            for p in range(passes):
                for sl in slices:
                    order = KINDS[n % 3 :] + KINDS[: n % 3]
                    n += 1
                    for kind in order:
                        sent, secs = link.transfer(sl[2], senders[kind](sl))
                        if kind == "log" and sent != sl[2] and secs < args.max_seconds:
                            raise AssertionError(f"log reads returned {sent} bytes for a {sl[2]}-byte slice")
                        rates[kind].append(mbps(sent, secs))
                        if kind == "log":
                            log_secs += secs
                        if args.verbose:
                            print(
                                f"#   pass {p} slice at {sl[1]:>10} {kind:>6}: {rates[kind][-1]:.0f} MB/s", flush=True
                            )
        finally:
            link.close()
            for fd in fds:
                os.close(fd)
            lg.close()
            shutil.rmtree(d / "read-0", ignore_errors=True)

    med = {k: median(v) for k, v in rates.items()}
    paired = sorted(a / b for a, b in zip(rates["log"], rates["raw"], strict=True))
    ratio = median(paired)
    q1, q3 = paired[len(paired) // 4], paired[(3 * len(paired)) // 4]
    print()
    cols = (
        f"{'loopback TCP limit (memory)':>27} | {'raw sendfile':>12} | {'Log.read+sendfile':>17} | "
        f"{'ratio':>5} | {'goal 0.9':>8} | {'ratio of medians':>16} | paired ratios IQR"
    )
    print(cols)
    print("-" * len(cols))
    print(
        f"{med['memory']:>22.0f} MB/s | {med['raw']:>7.0f} MB/s | {med['log']:>12.0f} MB/s | "
        f"{ratio:>5.3f} | {verdict(ratio, GOAL):>8} | {med['log'] / med['raw']:>16.3f} | {q1:.2f} - {q3:.2f}"
    )
    print()
    print(
        f"time inside Log.read: {read_time[0] / log_secs:.1%} of the log transfers' time, "
        f"{read_time[0] / read_time[1] * 1e6:.1f} us per {human(CHUNK)} read ({read_time[1]} reads) -- "
        "the engine's whole share of the read path; the rest is sendfile and the socket"
    )
    print(
        f"MB/s = 10^6 B/s, median over {len(rates['raw'])} transfers of {human(slice_bytes)} per kind; "
        "ratio = median over slices of log/raw measured back to back on the same slice"
    )
    print(
        f"other CPU use during the run (not this process nor its drain process): {watch.other_share():.0%} "
        f"of {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
