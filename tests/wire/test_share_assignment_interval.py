"""share.assignment.interval.ms (KIP-1263) on a real broker, by raw ShareGroupHeartbeats.

The broker recomputes on every change (group.share.assignment.interval.ms=0); one group overrides
that with 2 s, so a member joining just after a computation holds nothing until a heartbeat at
least 2 s after it. Margins are wide: the test asserts "not before 1.9 s" and "within 6 s".
"""

from __future__ import annotations

import time

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.constants import AlterConfigOpType, ConfigResourceType
from shoal.protocol.errors import ErrorCode
from tests.support.brokers import RawClient
from tests.support.wire import create, group_config, hb

FAST = (
    "offsets.topic.num.partitions=1",
    "share.coordinator.state.topic.num.partitions=1",
    "group.share.min.heartbeat.interval.ms=100",
    "group.share.heartbeat.interval.ms=100",
    "group.share.assignment.interval.ms=0",
)
TOPIC = "iv"


@pytest.fixture
def broker(broker_factory):
    return broker_factory(*FAST).start()


def held(resp, before: set[int]) -> set[int]:
    if resp.assignment is None:
        return before
    return {p for tp in resp.assignment.topic_partitions for p in tp.partitions}


def until_holding(c: RawClient, gid: str, member: str, resp, want: set[int]) -> tuple[float, object]:
    """Heartbeat until `member` holds `want`; the monotonic time the answering request was sent."""
    have = held(resp, set())
    deadline = time.monotonic() + 10
    while have != want:
        assert time.monotonic() < deadline, f"{member} holds {have}, never {want}"
        time.sleep(0.1)
        sent = time.monotonic()
        resp = hb(c, gid, member, resp.member_epoch)
        assert resp.error_code == 0, resp
        have = held(resp, have)
    return sent, resp


def test_a_joiner_waits_for_the_groups_interval_and_the_broker_value_assigns_at_once(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, TOPIC, 2)
        group_config(broker.port, "paced", share_assignment_interval_ms="2000")

        # The broker's 0: the second member gets its share in its join answer.
        r1 = hb(c, "prompt", "m1", 0, [TOPIC])
        until_holding(c, "prompt", "m1", r1, {0, 1})
        r2 = hb(c, "prompt", "m2", 0, [TOPIC])
        assert r2.error_code == 0 and len(held(r2, set())) == 1, r2

        # The group's 2000: m1's partitions come with a computation; m2 joins right after it.
        r1 = hb(c, "paced", "m1", 0, [TOPIC])
        computed_after, r1 = until_holding(c, "paced", "m1", r1, {0, 1})
        r2 = hb(c, "paced", "m2", 0, [TOPIC])
        assert r2.error_code == 0 and held(r2, set()) == set(), r2
        assert r2.member_epoch == r1.member_epoch  # joined at the current assignment epoch
        m1, m2 = {0, 1}, set()
        deadline = computed_after + 6
        while not m2:
            assert time.monotonic() < deadline, "the deferred target was never computed"
            time.sleep(0.1)
            r1 = hb(c, "paced", "m1", r1.member_epoch)
            r2 = hb(c, "paced", "m2", r2.member_epoch)
            assert r1.error_code == r2.error_code == 0
            m1, m2 = held(r1, m1), held(r2, m2)
            if not m2:
                assert m1 == {0, 1}  # the old target stands until the interval ends
        got_after = time.monotonic() - computed_after
        assert got_after >= 1.9, got_after
        assert len(m1) == len(m2) == 1 and m1 | m2 == {0, 1}
        assert r1.member_epoch == r2.member_epoch > 0


def test_out_of_bounds_group_value_is_invalid_config(broker) -> None:
    IAC = api_by_name("IncrementalAlterConfigs").request_class()
    with RawClient(broker.port) as c:
        for value in ("15001", "-1"):
            resp = c.call(
                "IncrementalAlterConfigs",
                1,
                resources=[
                    IAC.AlterConfigsResource(
                        resource_type=ConfigResourceType.GROUP,
                        resource_name="g",
                        configs=[
                            IAC.AlterableConfig(
                                name="share.assignment.interval.ms", config_operation=AlterConfigOpType.SET, value=value
                            )
                        ],
                    )
                ],
                validate_only=False,
            )
            r = resp.responses[0]
            assert r.error_code == ErrorCode.INVALID_CONFIG, r
            assert "share.assignment.interval.ms" in r.error_message
