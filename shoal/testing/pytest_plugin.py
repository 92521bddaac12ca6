"""pytest fixtures for an in-process Shoal broker (registered by the ``pytest11`` entry point).

- ``shoal_broker``: a fresh ``EmbeddedBroker`` per test, removed afterwards;
- ``shoal_broker_module`` / ``shoal_broker_session``: one per module / session;
- ``shoal_bootstrap_servers``: the per-test broker's ``127.0.0.1:<port>``.

Settings come from ``@pytest.mark.shoal_config({...}, fast_timers=True, num_partitions=3)``
(Kafka's names; on a test for ``shoal_broker``, in a module's ``pytestmark`` for
``shoal_broker_module``). Each broker has its own ephemeral port and temporary
directory, so pytest-xdist workers never share one. The broker runs on its own
loop in a thread: synchronous clients and async tests (any loop) both reach it.
A shared broker keeps armed faults until ``faults.clear()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "shoal_config(settings=None, *, fast_timers=False, **kafka_settings): settings of the shoal_broker fixture",
    )


def _options(node: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    marker = node.get_closest_marker("shoal_config") if node is not None else None
    if marker is None:
        return {}, {}
    settings: dict[str, Any] = {}
    if marker.args:
        settings.update(marker.args[0])
    kwargs = dict(marker.kwargs)
    fast = {"fast_timers": bool(kwargs.pop("fast_timers", False))}
    settings.update({k.replace("_", "."): v for k, v in kwargs.items()})
    return settings, fast


def _broker(node: Any) -> Iterator[Any]:
    from shoal.testing.embedded import EmbeddedBroker

    settings, options = _options(node)
    with EmbeddedBroker(settings, **options) as broker:
        yield broker


@pytest.fixture
def shoal_broker(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A Shoal broker in this process for one test (its own port and temporary data)."""
    yield from _broker(request.node)


@pytest.fixture(scope="module")
def shoal_broker_module(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One Shoal broker for the tests of a module."""
    yield from _broker(request.node)


@pytest.fixture(scope="session")
def shoal_broker_session(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One Shoal broker for the whole session (per xdist worker)."""
    yield from _broker(None)


@pytest.fixture
def shoal_bootstrap_servers(shoal_broker: Any) -> str:
    """``bootstrap.servers`` of the per-test ``shoal_broker``."""
    return shoal_broker.bootstrap_servers
