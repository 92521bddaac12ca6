"""How fast the test kit's broker is ready, next to a broker process, measured in one run.

Run: python benchmarks/embedded.py [--runs 30] [--tests 40]

Ready means: a client's ApiVersions request on a fresh connection has been
answered. Rows:

* **subprocess broker** (the reference): ``python -m shoal.broker`` on port 0
  with a temporary data directory, from spawn to the first answered ApiVersions;
* **EmbeddedBroker, thread**: ``EmbeddedBroker().start()`` (its own loop in a
  thread, temporary directory), from the call to the first answer; the first
  start in the process (imports, codec compilation) is printed on its own;
* **EmbeddedBroker, thread, in memory**: the same with ``log.dirs=":memory:"`` (the
  data directory on the RAM filesystem /dev/shm);
* **EmbeddedBroker, caller's loop**: ``async with EmbeddedBroker()``;
* **stop**: ``stop()`` of the thread broker (the directory removed too);
* **per-test fixture overhead**: a pytest run of ``--tests`` empty tests that
  take ``shoal_broker``, minus the same run without the fixture, per test.

The issue's goal is ready in <= 50 ms in process. Medians and p90 over ``--runs``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.brokers import RawClient  # noqa: E402


def api_versions(port: int, timeout: float = 10.0) -> None:
    """One ApiVersions round trip on a new connection (raises if the broker does not answer)."""
    with RawClient(port, timeout=timeout) as c:
        body = c.call("ApiVersions", 3, client_software_name="b", client_software_version="1")
    assert body.error_code == 0


def subprocess_ready() -> float:
    with tempfile.TemporaryDirectory(prefix="shoal-bench-") as d:
        log = Path(d) / "broker.log"
        t0 = time.perf_counter()
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "shoal.broker",
                    "--override",
                    f"log.dirs={d}/data",
                    "--override",
                    "listeners=PLAINTEXT://127.0.0.1:0",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
            try:
                while True:
                    found = re.search(rb"listening on [\d.]+:(\d+)", log.read_bytes())
                    if found:
                        api_versions(int(found.group(1)))
                        return time.perf_counter() - t0
                    if proc.poll() is not None:
                        raise RuntimeError(log.read_text())
                    time.sleep(0.002)
            finally:
                proc.terminate()
                proc.wait(15)


def embedded_thread(**settings: str) -> tuple[float, float]:
    from shoal.testing import EmbeddedBroker

    t0 = time.perf_counter()
    b = EmbeddedBroker(**settings).start()
    api_versions(b.port)
    ready = time.perf_counter() - t0
    t1 = time.perf_counter()
    b.stop()
    return ready, time.perf_counter() - t1


async def embedded_loop(runs: int) -> list[float]:
    from shoal.testing import EmbeddedBroker

    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        async with EmbeddedBroker() as b:
            await asyncio.to_thread(api_versions, b.port)
            out.append(time.perf_counter() - t0)
    return out


def pytest_seconds(tests: int, with_fixture: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="shoal-bench-") as d:
        arg = "shoal_broker" if with_fixture else ""
        body = "".join(f"def test_{i}({arg}):\n    pass\n\n" for i in range(tests))
        Path(d, "test_many.py").write_text(body)
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", d], capture_output=True, cwd=d
        )
        assert done.returncode == 0, done.stdout.decode()[-2000:]
        return time.perf_counter() - t0


def ms(values: list[float]) -> str:
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(len(values) * 0.9))]
    return f"{statistics.median(values) * 1000:8.1f} ms  p90 {p90 * 1000:7.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--tests", type=int, default=40)
    args = ap.parse_args()

    first_ready, _ = embedded_thread()
    sub = [subprocess_ready() for _ in range(max(3, args.runs // 3))]
    thread_runs = [embedded_thread() for _ in range(args.runs)]
    ready = [r for r, _ in thread_runs]
    stops = [s for _, s in thread_runs]
    memory = [embedded_thread(log_dirs=":memory:")[0] for _ in range(args.runs)]
    loop_runs = asyncio.run(embedded_loop(args.runs))
    plain = pytest_seconds(args.tests, False)
    fixture = pytest_seconds(args.tests, True)
    overhead = (fixture - plain) / args.tests

    ref = statistics.median(sub)
    print(f"{'start to ready (ApiVersions answered)':44} {'median':>11}")
    print(f"{'subprocess broker (reference)':44} {ms(sub)}")
    print(f"{'EmbeddedBroker, thread, first in process':44} {first_ready * 1000:8.1f} ms")
    print(f"{'EmbeddedBroker, thread':44} {ms(ready)}   {ref / statistics.median(ready):5.1f}x faster")
    print(f"{'EmbeddedBroker, thread, in memory':44} {ms(memory)}   {ref / statistics.median(memory):5.1f}x faster")
    print(f"{'EmbeddedBroker, caller loop':44} {ms(loop_runs)}   {ref / statistics.median(loop_runs):5.1f}x faster")
    print(f"{'EmbeddedBroker, thread: stop':44} {ms(stops)}")
    print(f"{'per-test overhead of the shoal_broker fixture':44} {overhead * 1000:8.1f} ms  ({args.tests} tests)")
    print(f"(cpu count {os.cpu_count()}; goal: in-process ready <= 50 ms)")


if __name__ == "__main__":
    main()
