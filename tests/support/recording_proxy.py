"""A TCP proxy in front of a broker that notes the (api key, version) of every request.

For tests that must show which request versions an outside client really sends (kafka-python
pinned to an old ``api_version`` picks its versions itself): bytes pass through unchanged, the
request frames' first four bytes after the size are read on the way. The broker's answers
carry the broker's own address, so a client that follows them leaves the proxy; point the
broker's advertised listener at the proxy to keep it in the path.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter


class RecordingProxy:
    def __init__(self, upstream_port: int, port: int = 0, host: str = "127.0.0.1") -> None:
        self.upstream = (host, upstream_port)
        self.listener = socket.create_server((host, port))
        self.port = self.listener.getsockname()[1]
        self.seen: Counter[tuple[int, int]] = Counter()
        self._lock = threading.Lock()
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def versions(self, api_key: int) -> set[int]:
        with self._lock:
            return {v for k, v in self.seen if k == api_key}

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            self._sockets += [client, server]
            threading.Thread(target=self._requests, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client), daemon=True).start()

    def _requests(self, src: socket.socket, dst: socket.socket) -> None:
        """Forward client bytes frame by frame, noting each request's api key and version."""
        buf = bytearray()
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= 8:
                    size = struct.unpack_from(">i", buf)[0]
                    if len(buf) < 4 + size:
                        break
                    key, version = struct.unpack_from(">hh", buf, 4)
                    with self._lock:
                        self.seen[(key, version)] += 1
                    dst.sendall(bytes(buf[: 4 + size]))
                    del buf[: 4 + size]
        except OSError:
            pass
        finally:
            _close(src, dst)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            _close(src, dst)

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        for s in self._sockets:
            _close(s)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass
