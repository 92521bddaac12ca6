"""tests/unit holds socket-free tests: cores driven by method calls and fake
clocks, the codec against golden bytes and outside oracles. That is what makes
this folder the fast loop, so it is enforced: a test here that opens a network
socket or starts a process fails, and belongs in tests/wire or tests/e2e."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator

import pytest

_NETWORK = (socket.AF_INET, socket.AF_INET6)


@pytest.fixture(autouse=True)
def _no_network_or_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    real_init = socket.socket.__init__

    def guarded_init(
        self: socket.socket, family: int = -1, type: int = -1, proto: int = -1, fileno: int | None = None
    ) -> None:
        if fileno is None and (family in _NETWORK or family == -1):  # -1: the default, AF_INET
            raise AssertionError("tests/unit is socket-free: this test belongs in tests/wire or tests/e2e")
        real_init(self, family, type, proto, fileno)

    def no_process(*args: object, **kwargs: object) -> None:
        raise AssertionError("tests/unit starts no processes: this test belongs in tests/e2e or tests/checks")

    monkeypatch.setattr(socket.socket, "__init__", guarded_init)
    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
    yield
