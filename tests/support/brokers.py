"""Starting real brokers for tests: as a child process (`python -m broker`) or
in-process on the running event loop, always on 127.0.0.1 with a free port
and a temporary data directory; and a minimal blocking client on our codec.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shoal.protocol.api import api_by_name
from shoal.protocol.constants import IsolationLevel
from shoal.protocol.frames import decode_response, encode_request

ROOT = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"shoal broker listening on ([\d.]+):(\d+)")
_HTTP_LISTENING = re.compile(r"shoal http listening on ([\d.]+):(\d+)")
# The operations listener on a free port: parallel brokers never meet on 9644 (an override beats it).
HTTP_ANY_PORT = "shoal.http.listeners=http://127.0.0.1:0"


class BrokerProcess:
    """A broker in a child process. `start()` waits until it listens."""

    def __init__(self, data_dir: Path, overrides: Iterable[str] = (), port: int = 0) -> None:
        self.data_dir = Path(data_dir)
        self.overrides = list(overrides)
        self.port = port
        self.http_port = 0  # the operations listener's (/metrics, /health), once started; 0 when off
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self._log = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> BrokerProcess:
        args = [
            sys.executable,
            "-m",
            "shoal.broker",
            "--override",
            f"log.dirs={self.data_dir}",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "--override",
            HTTP_ANY_PORT,
        ]
        for o in self.overrides:
            args += ["--override", o]
        start_at = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, env=_env())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(start_at)
                text = f.read().decode(errors="replace")
            found = _LISTENING.search(text)
            if found and self.proc.poll() is None:
                self.port = int(found.group(2))
                http = _HTTP_LISTENING.search(text)
                self.http_port = int(http.group(2)) if http else 0
                if wait_port(self.port, 5.0):
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not start:\n{self.log_text()[-3000:]}")

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait: a clean shutdown."""
        rc = 0
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait()
        elif self.proc is not None:
            rc = self.proc.returncode
        self._close_log()
        return rc

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class InProcessBroker:
    """``BrokerProcess``'s interface with the broker in this process (``shoal.testing.EmbeddedBroker``
    on its own thread), for tests where a separate process is not the point: no interpreter to
    start, no imports to repeat. Kafka's defaults, as the process has them. ``kill()`` stops it
    as ``kill -9`` would: no flush, no clean-shutdown marker, the page cache keeps what was
    written. ``log_text()`` is what the ``shoal`` loggers said while it ran (the process's
    loggers are shared: with two brokers running, both speak in it)."""

    def __init__(self, data_dir: Path, overrides: Iterable[str] = (), port: int = 0) -> None:
        self.data_dir = Path(data_dir)
        self.overrides = list(overrides)
        self.port = port
        self.http_port = 0
        self.embedded: Any = None
        self._lines: list[str] = []
        self._handler: Any = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> InProcessBroker:
        from shoal.broker.config.broker_keys import BROKER_CONFIGS
        from shoal.testing import EmbeddedBroker

        settings: dict[str, str] = {
            name: str(BROKER_CONFIGS[name].default)
            for name in ("offsets.topic.num.partitions", "share.coordinator.state.topic.num.partitions")
        }
        settings["listeners"] = f"PLAINTEXT://127.0.0.1:{self.port}"
        settings["shoal.http.listeners"] = HTTP_ANY_PORT.split("=", 1)[1]
        for o in self.overrides:
            k, _, v = o.partition("=")
            settings[k] = v
        self._capture()
        self.embedded = EmbeddedBroker(settings, data_dir=self.data_dir).start(timeout)
        self.port = self.embedded.port
        self.http_port = self.embedded.http_port
        return self

    def _capture(self) -> None:
        import logging

        if self._handler is not None:
            return
        lines = self._lines

        class Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                lines.append(self.format(record))

        self._handler = Collect(logging.INFO)
        self._handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        shoal_log = logging.getLogger("shoal")
        self._saved_level = shoal_log.level
        shoal_log.setLevel(logging.INFO)
        shoal_log.addHandler(self._handler)

    def _release(self) -> None:
        import logging

        if self._handler is not None:
            shoal_log = logging.getLogger("shoal")
            shoal_log.removeHandler(self._handler)
            shoal_log.setLevel(self._saved_level)
            self._handler = None

    def stop(self, timeout: float = 15.0) -> int:
        """A clean shutdown."""
        if self.embedded is not None:
            self.embedded.stop(timeout=timeout)
            self.embedded = None
        self._release()
        return 0

    def kill(self) -> None:
        """As ``kill -9``: no flush, no marker; what was written stays (the page cache)."""
        if self.embedded is not None:
            self.embedded.stop(clean=False, lose_unflushed=False)
            self.embedded = None
        self._release()

    def log_text(self) -> str:
        return "\n".join(self._lines)

    def alive(self) -> bool:
        e = self.embedded
        return e is not None and e.running and e._thread is not None and e._thread.is_alive()

    def __enter__(self) -> InProcessBroker:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def wait_port(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class RawClient:
    """A blocking Kafka client speaking our codec: one request at a time."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.correlation = 0

    def send(self, api_name: str, version: int, body: Any) -> int:
        a = api_by_name(api_name)
        self.correlation += 1
        self.sock.sendall(b"".join(encode_request(a.key, version, self.correlation, "raw-test", body)))
        return self.correlation

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._exact(4))[0]
        return self._exact(size)

    def receive(self, api_name: str, version: int) -> Any:
        a = api_by_name(api_name)
        _, body = decode_response(self.recv_frame(), a.key, version)
        return body

    def call(self, api_name: str, version: int, body: Any = None, **fields: Any) -> Any:
        a = api_by_name(api_name)
        if body is None:
            body = a.request_class()(**fields)
        self.send(api_name, version, body)
        return self.receive(api_name, version)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def fetch_request(topic: str, partition: int = 0, offset: int = 0, *, max_wait_ms: int = 0, max_bytes: int = 64 << 20):
    """A Fetch (v4+) body reading one partition from `offset`, outside any fetch session."""
    F = api_by_name("Fetch").request_class()
    return F(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=IsolationLevel.READ_UNCOMMITTED,
        session_id=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic=topic,
                partitions=[F.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)],
            )
        ],
    )
