"""A TCP proxy between real clients and the broker that can lose Produce responses on purpose.

The broker advertises the proxy's address (``advertised.listeners``), so every connection a client
opens goes through it. Requests pass unchanged; the proxy notes each request's api key by
correlation id. When ``cut_produce_responses`` is above zero, the next Produce response is dropped
and the client's connection closed instead: the broker appended, the client never heard, and
retries. Every socket has a timeout; the proxy threads end when ``close`` is called.
"""

from __future__ import annotations

import socket
import struct
import threading
from types import TracebackType

PRODUCE = 0


class LossyProxy:
    def __init__(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.2)
        self.port: int = self.listener.getsockname()[1]
        self.target: tuple[str, int] | None = None
        self.cut_produce_responses = 0
        self.produce_requests = 0
        self.responses_cut = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            for s in self._sockets:
                s.close()
        self.listener.close()
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> LossyProxy:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            if self.target is None:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.settimeout(0.5)
            with self._lock:
                self._sockets += [client, upstream]
            apis: dict[int, int] = {}
            for args in ((client, upstream, apis, True), (upstream, client, apis, False)):
                t = threading.Thread(target=self._pump, args=args, daemon=True)
                self._threads.append(t)
                t.start()

    def _read_frame(self, src: socket.socket) -> bytes | None:
        buf = b""
        want = 4
        while len(buf) < want:
            if self._closed.is_set():
                return None
            try:
                chunk = src.recv(want - len(buf))
            except TimeoutError:
                continue
            except OSError:
                return None
            if not chunk:
                return None
            buf += chunk
            if want == 4 and len(buf) == 4:
                want = 4 + struct.unpack(">i", buf)[0]
        return buf

    def _pump(self, src: socket.socket, dst: socket.socket, apis: dict[int, int], requests: bool) -> None:
        while True:
            frame = self._read_frame(src)
            if frame is None:
                break
            if requests:
                api_key, _version, cid = struct.unpack_from(">hhi", frame, 4)
                apis[cid] = api_key
                if api_key == PRODUCE:
                    with self._lock:
                        self.produce_requests += 1
            else:
                (cid,) = struct.unpack_from(">i", frame, 4)
                if apis.pop(cid, None) == PRODUCE:
                    with self._lock:
                        cut = self.cut_produce_responses > 0
                        if cut:
                            self.cut_produce_responses -= 1
                            self.responses_cut += 1
                    if cut:
                        break  # drop the response: the connection closes below
            try:
                dst.sendall(frame)
            except OSError:
                break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
