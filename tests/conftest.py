"""Shared fixtures, and each test's kind marked by its folder.

The folders are the kinds (see README, "Developing Shoal"):
``tests/unit`` socket-free cores and codec (its conftest refuses network
sockets and subprocesses), ``tests/wire`` a real broker on 127.0.0.1 driven by
raw requests, ``tests/e2e`` real clients, broker processes, Spark, Docker and
packaging, ``tests/checks`` import contracts, types and module sizes. Each
test gets the marker of its folder, so ``-m unit`` and ``tests/unit`` select
the same tests; helpers shared between files live in ``tests/support``.

One broker for the interoperability tests for the interoperability tests (each test uses
its own topics), and a factory for tests that need brokers of their own
(crashes, restarts, special settings).

The factory runs each broker in this process (``InProcessBroker``:
shoal.testing's EmbeddedBroker on a thread) unless the process is the point:
signals, exit codes, ``kill -9`` at an arbitrary instant, memory of the broker
process (``broker_factory(..., process=True)``). The shared broker is a
process (see below)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess, InProcessBroker

_names = itertools.count()
KINDS = ("unit", "wire", "e2e", "checks")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        kind = Path(item.path).relative_to(root).parts[0]
        if kind not in KINDS:
            raise pytest.UsageError(f"{item.nodeid}: a test file belongs in one of tests/{{{','.join(KINDS)}}}/")
        item.add_marker(getattr(pytest.mark, kind))


@pytest.fixture(scope="session")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # A process, not in-process: it collects every interop test's topics and keeps each
    # partition's files open, and in this process those descriptors went past 1024, where
    # py4j's select() fails (the Spark tests' callback server died; a query never stopped).
    b = BrokerProcess(tmp_path_factory.mktemp("shared") / "data")
    b.start()
    yield b
    b.stop()


@pytest.fixture
def broker_factory(tmp_path) -> Iterator:
    started: list[BrokerProcess | InProcessBroker] = []

    def make(*overrides: str, name: str = "data", process: bool = False) -> BrokerProcess | InProcessBroker:
        b = (BrokerProcess if process else InProcessBroker)(tmp_path / name, overrides)
        started.append(b)
        return b

    yield make
    for b in started:
        b.kill()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return f"{base}-{next(_names)}"
