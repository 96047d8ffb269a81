"""This machine's raw limits for a broker's two data paths, each between two processes over 127.0.0.1:

- **tcp->file** (the produce side): one process ``sendall``s a 1 MiB in-memory buffer over a
  loopback TCP socket; the other ``recv_into``s a 1 MiB buffer and appends what it got to a file
  with ``os.write`` (page cache, no fsync: the broker does not fsync either).
- **sendfile** (the consume side): one process ``os.sendfile``s that file (in the page cache) into
  a loopback TCP socket in 1 MiB chunks; the other ``recv_into``s and discards.

The receiver times from its first byte to the sender's EOF (all bytes written / read). Every loop
stops at its byte count or at ``max_seconds``, whichever comes first.

Run as ``python -m bench._raw_net recv OUT_PATH|- MAX_SECONDS`` (the receiver role; prints its port,
then one line ``bytes seconds``); the sender role is the functions below.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import REPO, MiB

CHUNK = 1 * MiB


def _receiver(out: str, max_seconds: float) -> None:
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    lst.settimeout(30)
    print(lst.getsockname()[1], flush=True)
    conn, _ = lst.accept()
    conn.settimeout(max_seconds + 30)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644) if out != "-" else -1
    buf = bytearray(CHUNK)
    mv = memoryview(buf)
    total = 0
    t0 = 0.0
    while True:
        n = conn.recv_into(mv)
        if not n:
            break
        if not total:
            t0 = time.perf_counter()
        if fd >= 0:
            k = os.write(fd, mv[:n])
            while k < n:
                k += os.write(fd, mv[k:n])
        total += n
    t1 = time.perf_counter()
    if fd >= 0:
        os.close(fd)
    print(f"{total} {t1 - t0:.6f}", flush=True)


class _Receiver:
    def __init__(self, out: str, max_seconds: float) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, "-m", "bench._raw_net", "recv", out, str(max_seconds)],
                                     stdout=subprocess.PIPE, text=True, cwd=str(REPO), env=env)
        assert self.proc.stdout is not None
        port = int(self.proc.stdout.readline())
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.max_seconds = max_seconds

    def result(self) -> tuple[int, float]:
        self.sock.shutdown(socket.SHUT_WR)
        try:
            out, _ = self.proc.communicate(timeout=self.max_seconds + 60)
        finally:
            self.sock.close()
        nbytes, secs = out.split()
        return int(nbytes), float(secs)


def tcp_to_file(path: Path, total: int, max_seconds: float) -> tuple[int, float]:
    """Bytes and seconds of ``total`` bytes sent over loopback TCP and appended to ``path``."""
    rx = _Receiver(str(path), max_seconds)
    block = memoryview(os.urandom(CHUNK))
    deadline = time.perf_counter() + max_seconds
    sent = 0
    while sent < total and time.perf_counter() < deadline:
        n = min(CHUNK, total - sent)
        rx.sock.sendall(block[:n])
        sent += n
    return rx.result()


def sendfile_to_socket(path: Path, max_seconds: float) -> tuple[int, float]:
    """Bytes and seconds of ``path`` sent with ``os.sendfile`` into loopback TCP and drained."""
    rx = _Receiver("-", max_seconds)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        deadline = time.perf_counter() + max_seconds
        pos = 0
        while pos < size and time.perf_counter() < deadline:
            k = os.sendfile(rx.sock.fileno(), fd, pos, min(CHUNK, size - pos))
            if k <= 0:
                raise RuntimeError("sendfile sent nothing")
            pos += k
    finally:
        os.close(fd)
    return rx.result()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "recv":
        _receiver(sys.argv[2], float(sys.argv[3]))
    else:
        raise SystemExit(__doc__)
