"""The broker image's entrypoint and healthcheck, run outside Docker.

Docker cannot run on the test machines, so the two scripts the image runs are
exercised directly: the entrypoint turns SHOAL_* variables into settings and
execs the broker (so SIGTERM reaches it), and the healthcheck answers 0 only
while a broker answers ApiVersions. The static checks at the end keep the
Dockerfiles and the compose file pointing at files that exist.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shoal.protocol.records import build_batch
from shoal.testing import EmbeddedBroker
from tests.support.brokers import ROOT, RawClient, wait_port
from tests.support.clients import _produce_topic

DOCKER = ROOT / "docker"
ENTRYPOINT = DOCKER / "entrypoint.sh"
HEALTHCHECK = DOCKER / "healthcheck.py"
_LISTENING = re.compile(rb"shoal broker listening on ([\d.]+):(\d+)")
_HTTP_LISTENING = re.compile(rb"shoal http listening on ([\d.]+):(\d+)")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    # the operations listener on a port of its own choosing, never the fixed default 9644 (another
    # broker, or a developer's, may hold it); a test that sets the variable itself wins
    env["SHOAL_HTTP_LISTENERS"] = "http://127.0.0.1:0"
    env.update(extra)
    return env


def _healthcheck(address: str, timeout: float = 3.0, *extra: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK), address, "--timeout", str(timeout), *extra],
        env=_env(**env),
        capture_output=True,
        timeout=30,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_entrypoint(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.Popen, int, Path]:
    log = tmp_path / "entrypoint.log"
    out = open(log, "wb")
    proc = subprocess.Popen(
        ["sh", str(ENTRYPOINT), *args], env=_env(**env), stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path
    )
    out.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = _LISTENING.search(log.read_bytes())
        if found:
            port = int(found.group(2))
            assert wait_port(port, 5.0)
            return proc, port, log
        if proc.poll() is not None:
            raise AssertionError(f"entrypoint exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"broker did not start:\n{log.read_text()[-3000:]}")


def test_entrypoint_maps_environment_and_execs_the_broker(tmp_path: Path) -> None:
    data = tmp_path / "volume" / "data"
    proc, port, log = _start_entrypoint(
        tmp_path,
        "--override",
        "group.share.heartbeat.interval.ms=6000",  # caller arguments come last and win
        SHOAL_DATA_DIR=str(data),
        SHOAL_LISTENERS="PLAINTEXT://127.0.0.1:0",
        SHOAL_CFG_NUM_PARTITIONS="3",
        SHOAL_CFG_GROUP_SHARE_HEARTBEAT_INTERVAL_MS="7000",
        SHOAL_HTTP_LISTENERS="http://127.0.0.1:0",
    )
    try:
        assert data.is_dir(), "the entrypoint creates the data directory"
        # SHOAL_HTTP_LISTENERS reached the broker: its operations listener is on the port it chose.
        http = _HTTP_LISTENING.search(log.read_bytes())
        assert http, log.read_text()[-2000:]
        http_port = int(http.group(2))
        assert _healthcheck(f"127.0.0.1:{port}", 3.0, "--http", f"127.0.0.1:{http_port}").returncode == 0
        # exec: the process we started *is* the broker, not a shell waiting on it.
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert not any(part.endswith(b"entrypoint.sh") for part in cmdline), cmdline
        assert _healthcheck(f"127.0.0.1:{port}").returncode == 0
        with RawClient(port) as raw:
            # SHOAL_CFG_NUM_PARTITIONS=3 reached the broker: an auto-created topic has 3 partitions.
            for _ in range(50):
                meta = raw.call(
                    "Metadata", 12, topics=[_metadata_topic("auto-created")], allow_auto_topic_creation=True
                )
                parts = meta.topics[0].partitions
                if parts and all(p.leader_id >= 0 for p in parts):
                    break
                time.sleep(0.1)
            assert len(meta.topics[0].partitions) == 3
        assert any(data.iterdir()), "topic data lives in SHOAL_DATA_DIR"
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    assert rc == 0, log.read_text()[-2000:]
    assert _healthcheck(f"127.0.0.1:{port}", timeout=1.0).returncode == 1


def test_entrypoint_reports_bad_settings(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["sh", str(ENTRYPOINT)],
        env=_env(SHOAL_DATA_DIR=str(tmp_path / "d"), SHOAL_LISTENERS="PLAINTEXT://127.0.0.1:0", SHOAL_CFG_NO_SUCH="1"),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert b"no.such" in proc.stderr


def _metadata_topic(name: str):
    from shoal.protocol.api import api_by_name

    return api_by_name("Metadata").request_class().MetadataRequestTopic(name=name)


def test_healthcheck_fails_fast_when_nothing_listens() -> None:
    started = time.monotonic()
    result = _healthcheck(f"127.0.0.1:{_free_port()}", timeout=2.0)
    assert result.returncode == 1
    assert b"unhealthy" in result.stderr
    assert time.monotonic() - started < 20


def test_healthcheck_rejects_a_port_that_does_not_speak_kafka() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, str(HEALTHCHECK), f"127.0.0.1:{port}", "--timeout", "2"],
            env=_env(),
            stderr=subprocess.PIPE,
        )
        conn, _ = server.accept()
        conn.recv(4096)
        conn.sendall(b"\x00\x00\x00\x08HTTP/1.1")  # a frame, but not an ApiVersions answer
        conn.close()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1, err


def test_healthcheck_bad_address_is_a_usage_error() -> None:
    assert _healthcheck("no-port-here").returncode == 2


def test_healthcheck_against_a_running_broker(shared_broker) -> None:
    result = _healthcheck(shared_broker.bootstrap)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "spark.Dockerfile"])
def test_dockerfiles_copy_files_that_exist(dockerfile: str) -> None:
    text = (DOCKER / dockerfile).read_text()
    # Pinned to a Debian release: plain python:3.11-slim moved to Debian 13, which has no Java 17.
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["python:3.11-slim-bookworm"]
    assert re.search(r"^USER (?!root)\w+", text, re.M), "runs as a non-root user"
    assert "VOLUME" in text
    for line in text.splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), f"{dockerfile}: COPY {src} names a missing path"
    if dockerfile == "Dockerfile":
        assert "HEALTHCHECK" in text and "shoal-healthcheck" in text
        # The healthcheck names no address, so SHOAL_HEALTHCHECK_ADDRESS decides (it once did not).
        (cmd,) = re.findall(r"CMD (\[.*\])", text)
        assert not re.search(r"\d+\.\d+\.\d+\.\d+:\d+", cmd), cmd
        assert "SHOAL_HEALTHCHECK_ADDRESS=127.0.0.1:9092" in text
        # Readiness on the operations listener's default port (issue 19: the healthcheck uses readiness).
        assert "SHOAL_HEALTHCHECK_HTTP_ADDRESS=127.0.0.1:9644" in text
        assert 'ENTRYPOINT ["shoal-entrypoint"]' in text


def test_compose_runs_the_broker_and_the_streaming_example() -> None:
    text = (DOCKER / "compose.yaml").read_text()
    for name in re.findall(r"dockerfile: (\S+)", text):
        assert (ROOT / name).exists(), name
    assert "condition: service_healthy" in text
    spark_dockerfile = (DOCKER / "spark.Dockerfile").read_text()
    assert "examples/spark_share_stream.py" in spark_dockerfile
    # The job's arguments are ones the example accepts.
    example = ROOT / "examples" / "spark_share_stream.py"
    args = re.findall(r"^\s+- (--[\w-]+)=", text, re.M)
    assert args and all(a in example.read_text() for a in args), args


def test_healthcheck_asks_where_shoal_healthcheck_address_says(shared_broker) -> None:
    ok = subprocess.run(
        [sys.executable, str(HEALTHCHECK), "--timeout", "3"],
        env=_env(SHOAL_HEALTHCHECK_ADDRESS=f"127.0.0.1:{shared_broker.port}"),
        capture_output=True,
        timeout=30,
    )
    assert ok.returncode == 0, ok.stderr
    nothing = subprocess.run(
        [sys.executable, str(HEALTHCHECK), "--timeout", "1"],
        env=_env(SHOAL_HEALTHCHECK_ADDRESS=f"127.0.0.1:{_free_port()}"),
        capture_output=True,
        timeout=30,
    )
    assert nothing.returncode == 1


@pytest.mark.parametrize("advertised", [None, "PLAINTEXT://shoal.example:19092"])
def test_entrypoint_advertises_localhost_for_a_wildcard_listener(tmp_path: Path, advertised: str | None) -> None:
    """`docker run -p 9092:9092` as the README writes it: with no SHOAL_ADVERTISED_LISTENERS a
    wildcard listener is advertised as localhost (Kafka's image advertises localhost:9092), not
    as the container's hostname, which a client on the host cannot resolve."""
    port = _free_port()
    env = {"SHOAL_DATA_DIR": str(tmp_path / "d"), "SHOAL_LISTENERS": f"PLAINTEXT://0.0.0.0:{port}"}
    if advertised:
        env["SHOAL_ADVERTISED_LISTENERS"] = advertised
    proc, bound, log = _start_entrypoint(tmp_path, **env)
    try:
        assert bound == port
        with RawClient(port) as raw:
            (b,) = raw.call("Metadata", 12, topics=[]).brokers
        assert (b.host, b.port) == (("localhost", port) if advertised is None else ("shoal.example", 19092))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()[-2000:]


def test_healthcheck_asks_readiness_on_the_http_listener(shared_broker) -> None:
    """Ready broker: 0, asked by --http and by SHOAL_HEALTHCHECK_HTTP_ADDRESS; an operations
    listener that does not answer: 1, though the Kafka port still answers ApiVersions."""
    assert shared_broker.http_port
    http = f"127.0.0.1:{shared_broker.http_port}"
    ok = _healthcheck(shared_broker.bootstrap, 3.0, "--http", http)
    assert ok.returncode == 0, ok.stderr
    by_env = _healthcheck(shared_broker.bootstrap, 3.0, SHOAL_HEALTHCHECK_HTTP_ADDRESS=http)
    assert by_env.returncode == 0, by_env.stderr
    unreachable = _healthcheck(shared_broker.bootstrap, 1.0, "--http", f"127.0.0.1:{_free_port()}")
    assert unreachable.returncode == 1 and b"unhealthy" in unreachable.stderr
    by_env = _healthcheck(shared_broker.bootstrap, 1.0, SHOAL_HEALTHCHECK_HTTP_ADDRESS=f"127.0.0.1:{_free_port()}")
    assert by_env.returncode == 1
    assert _healthcheck(shared_broker.bootstrap, 1.0, "--http", "no-port").returncode == 2


def test_healthcheck_is_unhealthy_while_the_broker_is_not_ready(tmp_path: Path) -> None:
    """/health/ready answers 503 (an offline log directory): the healthcheck says 1 and why."""
    with EmbeddedBroker() as b:
        http = f"127.0.0.1:{b.http_port}"
        assert _healthcheck(f"127.0.0.1:{b.port}", 3.0, "--http", http).returncode == 0
        b.create_topic("t")
        b.call(lambda: b.broker.file_ops.fail_next("write", errno.ENOSPC, times=None))
        data = build_batch([(None, b"x" * 100, [], int(time.time() * 1000))])
        with RawClient(b.port) as c:
            c.call("Produce", 9, acks=1, timeout_ms=5000, topic_data=[_produce_topic("t", 0, data)])
        result = _healthcheck(f"127.0.0.1:{b.port}", 3.0, "--http", http)
    assert result.returncode == 1
    assert b"503" in result.stderr and b"offline" in result.stderr
