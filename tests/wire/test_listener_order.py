"""The Kafka listener's address is taken before anything else binds.

An in-process restart binds the port its previous run was given (as a free
one); the restarted broker's own operations listener, asked for port 0, once
got exactly that just-freed port, and the Kafka listener then failed with
EADDRINUSE (tests/wire/test_share_groups_protocol.py's restart, in a full
run). The broker now binds and listens on the Kafka listener first, accepting
only once its logs have recovered. Shown here with an operations listener asked for the
Kafka listener's own address: it is the operations listener that finds the
address taken, before any log is opened.
"""

from __future__ import annotations

import socket

import pytest

from shoal.testing import EmbeddedBroker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_kafka_listener_holds_its_address_before_the_operations_listener_binds(tmp_path) -> None:
    port = free_port()
    eb = EmbeddedBroker(
        {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "shoal.http.listeners": f"http://127.0.0.1:{port}"},
        data_dir=tmp_path / "d",
    )
    with pytest.raises(OSError) as e:
        eb.start()
    assert e.value.errno == 98  # EADDRINUSE
    assert not (tmp_path / "d" / "__consumer_offsets-0").exists()  # nothing recovered or created first
    frames = [f.name for f in e.traceback]
    assert "_start_ops" in frames and "_start" not in frames  # the operations listener, before the logs
    # and the address is free again: the failed start released what it bound
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
