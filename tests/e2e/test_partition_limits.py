"""Creating partitions is bounded, cleans up after itself, and never holds the event loop.

One unauthenticated CreateTopics once asked for 20,000 partitions: the broker ran
out of file descriptors after 19,878, kept every file it had opened, stalled its
loop for seconds and reset later connections. Now a request is capped
(``max.partitions.per.request``), the broker's total is capped (``max.partitions``)
and so is what the open-file limit leaves room for, each answered POLICY_VIOLATION
as a creation policy would be; a creation that fails midway removes what it
opened; and partitions open a few at a time between other requests.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from shoal.broker.errors import ErrorAnswer
from shoal.protocol.errors import ErrorCode
from shoal.testing import EmbeddedBroker
from tests.support.brokers import BrokerProcess, RawClient


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fds_under(directory: Path) -> list[str]:
    """This process's descriptors that point into ``directory``: the test process also holds
    sockets and files of other tests, which the garbage collector may close at any moment."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between listing and reading
            continue
        if target.startswith(f"{directory}/"):
            found.append(target)
    return sorted(found)


def create_error(admin: AdminClient, topic: NewTopic) -> int:
    with pytest.raises(Exception) as e:
        admin.create_topics([topic])[topic.topic].result(60)
    return e.value.args[0].code()


def api_versions_answered(port: int) -> bool:
    with RawClient(port, timeout=10) as c:
        return c.call("ApiVersions", 3, client_software_name="t", client_software_version="1").error_code == 0


@pytest.fixture
def low_fd_broker(tmp_path):
    """A broker process whose open-file limit is then lowered to 600 (its own, with prlimit)."""
    b = BrokerProcess(tmp_path / "data", ("max.partitions.per.request=100000",)).start()
    resource.prlimit(b.proc.pid, resource.RLIMIT_NOFILE, (600, 600))
    yield b
    b.stop()


def test_a_partition_bomb_is_refused_and_leaves_nothing_open(low_fd_broker) -> None:
    b = low_fd_broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic("small", 3)])["small"].result(30)
    before = open_fds(b.proc.pid)
    # 20,000 partitions would need 20,000 files under a limit of 600: refused before opening any
    assert create_error(admin, NewTopic("bomb", 20000)) == KafkaError.POLICY_VIOLATION
    assert create_error(admin, NewTopic("bomb", 560)) == KafkaError.POLICY_VIOLATION  # the reserve counts too
    with pytest.raises(Exception) as e:
        admin.create_partitions([NewPartitions("small", 5000)])["small"].result(30)
    assert e.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert open_fds(b.proc.pid) == before
    assert not any(d.name.startswith("bomb-") for d in b.data_dir.iterdir())
    # still serving: new connections, new (reasonable) topics
    for _ in range(20):
        assert api_versions_answered(b.port)
    admin.create_topics([NewTopic("after", 50)])["after"].result(30)
    assert len(admin.list_topics("after", timeout=10).topics["after"].partitions) == 50
    assert "bomb" not in admin.list_topics(timeout=10).topics


def test_requests_and_the_broker_are_capped(broker_factory) -> None:
    b = broker_factory(
        "max.partitions.per.request=100",
        "max.partitions=150",
        "offsets.topic.num.partitions=5",
        "share.coordinator.state.topic.num.partitions=5",
    ).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
    assert create_error(admin, NewTopic("too-many", 101)) == KafkaError.POLICY_VIOLATION
    # the cap is per request: two topics of 60 in one request are 120
    fs = admin.create_topics([NewTopic("a", 60), NewTopic("b", 60)])
    fs["a"].result(30)
    with pytest.raises(Exception) as e:
        fs["b"].result(30)
    assert e.value.args[0].code() == KafkaError.POLICY_VIOLATION
    # the broker's total counts every topic, internal ones included
    have = sum(len(t.partitions) for t in admin.list_topics(timeout=10).topics.values())
    assert have == 70  # a's 60 and the internal topics' 10
    assert create_error(admin, NewTopic("over", 150 - have + 1)) == KafkaError.POLICY_VIOLATION
    admin.create_topics([NewTopic("fits", 150 - have)])["fits"].result(30)


def test_a_creation_that_fails_midway_removes_what_it_opened() -> None:
    """A real EMFILE at the 41st partition (the open-file limit lowered under the broker, its
    own check switched off): the topic is not created, and every file and directory it had
    opened is gone."""
    with EmbeddedBroker() as b:
        topics = b.broker.topics
        topics._headroom = lambda: None  # let the kernel's limit be what stops it
        held = fds_under(b.data_dir)
        before = open_fds(os.getpid())
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

        def create() -> object:
            resource.setrlimit(resource.RLIMIT_NOFILE, (before + 40, hard))
            try:
                return topics.create("midway", 200, {})
            except ErrorAnswer as e:
                return e
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

        error = b.call(create)
        assert isinstance(error, ErrorAnswer) and error.code == ErrorCode.UNKNOWN_SERVER_ERROR
        assert "could not open partition midway-" in str(error.message), error.message
        assert "Too many open files" in str(error.message), error.message
        assert not [f for f in fds_under(b.data_dir) if "/midway-" in f]
        assert fds_under(b.data_dir) == held
        assert b.call(lambda: topics.get("midway")) is None
        assert not any(d.name.startswith("midway-") for d in b.data_dir.iterdir())
        b.create_topic("midway", partitions=2)  # the name is free again
        assert b.produce("midway", b"x") == 0


def test_a_big_creation_does_not_hold_the_event_loop(broker_factory) -> None:
    """Opening 3,000 partitions takes about a second; ApiVersions on another connection is
    answered throughout (without steps, the loop was held for the whole creation)."""
    b = broker_factory().start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
    gaps: list[float] = []
    done = threading.Event()

    def ping() -> None:
        with RawClient(b.port, timeout=30) as c:
            while not done.is_set():
                t0 = time.monotonic()
                c.call("ApiVersions", 3, client_software_name="t", client_software_version="1")
                gaps.append(time.monotonic() - t0)
                time.sleep(0.005)

    t = threading.Thread(target=ping)
    t.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    try:
        admin.create_topics([NewTopic("wide", 3000)])["wide"].result(120)
    finally:
        took = time.monotonic() - t0
        done.set()
        t.join(30)
    assert len(admin.list_topics("wide", timeout=10).topics["wide"].partitions) == 3000
    assert took > 0.3 and len(gaps) > 10
    # wide margin: a held loop answers after the whole creation (about `took`)
    assert max(gaps) < max(0.25, took / 3), (max(gaps), took)
