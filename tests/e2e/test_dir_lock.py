"""One broker per data directory: the `.lock` file and its OS lock."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from shoal.broker.log.dir_lock import DataDirLocked, DirLock
from tests.support.brokers import HTTP_ANY_PORT, ROOT, BrokerProcess, _env


def test_a_second_lock_on_the_same_directory_is_refused_and_names_the_holder(tmp_path) -> None:
    first, second = DirLock(tmp_path), DirLock(tmp_path)
    first.acquire()
    with pytest.raises(DataDirLocked, match=r"pid=\d+") as e:
        second.acquire()
    assert str(tmp_path / ".lock") in str(e.value)
    first.release()
    second.acquire()  # released: free for the next one
    second.release()


def start_second(data_dir, timeout: float = 20.0) -> tuple[int, str, float]:
    args = [
        sys.executable,
        "-m",
        "shoal.broker",
        "--override",
        f"log.dirs={data_dir}",
        "--override",
        "listeners=PLAINTEXT://127.0.0.1:0",
        "--override",
        HTTP_ANY_PORT,
    ]
    started = time.monotonic()
    done = subprocess.run(args, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stderr, time.monotonic() - started


def test_a_second_broker_on_a_locked_directory_exits_2_at_once(tmp_path) -> None:
    data = tmp_path / "data"
    with BrokerProcess(data) as first:
        rc, err, took = start_second(data)
        assert rc == 2, err
        assert f"pid={first.proc.pid}" in err and ".lock" in err, err
        assert took < 10  # at once: no port bound, no logs opened (the interpreter start is most of it)
        assert "listening" not in err
        # The first broker is unharmed.
        assert first.proc.poll() is None


def test_the_lock_goes_with_a_clean_stop_and_with_kill_9(tmp_path) -> None:
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    assert b.stop() == 0
    b.start()  # released by the clean stop
    b.kill()  # kill -9: the kernel drops the flock with the process, nothing stale remains
    b.start()
    assert b.stop() == 0
