"""Kafka 4.3/4.4 share-group rules over real sockets (issue 26): renew-only ShareFetch
validation and RENEW gating by ``share.renew.acknowledge.enable``, acknowledgement batches
refused per partition, per-group delivery limits (KIP-1240) on one topic, hostile frames that
claim huge arrays or tagged sections, and the share-session cache gauges on /metrics."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shoal.protocol.api import api_by_name
from shoal.protocol.constants import ACCEPT, RELEASE, RENEW, ShareAcquireMode
from shoal.protocol.errors import ErrorCode
from shoal.protocol.frames import encode_request
from shoal.protocol.limits import MAX_TAGGED_FIELDS
from tests.support.brokers import InProcessBroker, RawClient
from tests.support.http import http_get
from tests.support.share_clients import produce
from tests.support.share_wire import FAST, acknowledge, acquired, batch, fetch, part, ready_topic
from tests.support.wire import group_config

pytestmark = pytest.mark.wire


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = InProcessBroker(tmp_path_factory.mktemp("share-limits") / "data", FAST).start()
    yield b
    b.stop()


def _acquire_all(c, group: str, member: str, tid, want: int):
    r = fetch(c, group, member, 0, [(tid, 0)], version=2, share_acquire_mode=ShareAcquireMode.RECORD_LIMIT)
    assert r.error_code == 0 and sum(b - a + 1 for a, b, _ in acquired(r)) == want, acquired(r)
    return r


# -- renew-only ShareFetch and RENEW gating ----------------------------------------------------
@pytest.mark.parametrize("field", ["max_wait", "min_bytes", "max_bytes", "max_records"])
def test_a_renew_only_fetch_asking_for_anything_is_an_invalid_request(broker, field) -> None:
    group = f"g-renew-ask-{field.replace('_', '-')}"
    tid = ready_topic(broker, f"sl-renew-ask-{field.replace('_', '-')}", group, 2)
    zeros = {"max_wait": 0, "min_bytes": 0, "max_bytes": 0, "max_records": 0}
    with RawClient(broker.port) as c:
        _acquire_all(c, group, "m", tid, 2)
        r = fetch(c, group, "m", 1, acks={(tid, 0): [batch(0, 1, RENEW)]}, version=2, is_renew_ack=True,
                  **{**zeros, field: 1})  # fmt: skip
        assert r.error_code == ErrorCode.INVALID_REQUEST and r.responses == []
        # nothing was renewed or changed: the member still holds both records and can accept them
        ok = acknowledge(c, group, "m", 1, tid, 0, batch(0, 1, ACCEPT), version=2)
        assert (ok.error_code, part(ok).error_code) == (0, 0)


def test_a_renew_only_fetch_renews_and_acquires_nothing(broker) -> None:
    group = "g-renew-fetch"
    tid = ready_topic(broker, "sl-renew-fetch", group, 4, share_record_lock_duration_ms="1500")
    with RawClient(broker.port) as c:
        r = fetch(c, group, "m", 0, [(tid, 0)], max_records=2, version=2,
                  share_acquire_mode=ShareAcquireMode.RECORD_LIMIT)  # fmt: skip
        assert acquired(r) == [(0, 1, 1)]
        for epoch in (1, 2, 3):  # 3 x 0.7 s: past the 1.5 s lock unless renewed
            time.sleep(0.7)
            r = fetch(c, group, "m", epoch, acks={(tid, 0): [batch(0, 1, RENEW)]}, version=2, is_renew_ack=True,
                      max_wait=0, min_bytes=0, max_bytes=0, max_records=0)  # fmt: skip
            assert r.error_code == 0
            assert part(r).acknowledge_error_code == 0 and acquired(r) == []  # offsets 2-3 stay available
        with RawClient(broker.port) as other:
            assert acquired(fetch(other, group, "m2", 0, [(tid, 0)])) == [(2, 3, 1)]


def test_renew_is_refused_per_partition_when_the_group_disables_it(broker) -> None:
    group = "g-renew-off"
    tid = ready_topic(broker, "sl-renew-off", group, 0, partitions=2, share_renew_acknowledge_enable="false")
    for p in (0, 1):
        produce(broker.bootstrap, "sl-renew-off", 2, partition=p)
    with RawClient(broker.port) as c:
        r = fetch(c, group, "m", 0, [(tid, 0), (tid, 1)], version=2)
        held = {(p.partition_index, a.first_offset, a.last_offset) for t in r.responses for p in t.partitions
                for a in p.acquired_records}  # fmt: skip
        assert held == {(0, 0, 1), (1, 0, 1)}
        p_renew, first, last = 0, 0, 1
        others = [(1, 0, 1)]
        acks = {(tid, p_renew): [batch(first, last, RENEW)]}
        acks.update({(tid, p): [batch(a, b, ACCEPT)] for p, a, b in others})
        r = fetch(c, group, "m", 1, acks=acks, version=2, is_renew_ack=True,
                  max_wait=0, min_bytes=0, max_bytes=0, max_records=0)  # fmt: skip
        assert r.error_code == 0
        codes = {p.partition_index: p.acknowledge_error_code for t in r.responses for p in t.partitions}
        assert codes[p_renew] == ErrorCode.INVALID_RECORD_STATE
        assert all(codes[p] == 0 for p, _, _ in others)  # the other partition's acks were applied
        a = acknowledge(c, group, "m", 2, tid, p_renew, batch(first, last, RENEW), version=2, is_renew_ack=True)
        assert (a.error_code, part(a).error_code) == (0, ErrorCode.INVALID_RECORD_STATE)
        # still held by the member: RENEW refused changed nothing
        ok = acknowledge(c, group, "m", 3, tid, p_renew, batch(first, last, ACCEPT), version=2)
        assert part(ok).error_code == 0


# -- acknowledgement batches ------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad",
    [
        [batch(1, 0, ACCEPT)],  # first above last
        [batch(0, 1, ACCEPT), batch(1, 1, ACCEPT)],  # overlapping
        [batch(0, 1)],  # no types
        [batch(0, 2, ACCEPT, ACCEPT)],  # neither 1 nor last - first + 1 types
    ],
    ids=["first>last", "overlap", "empty types", "types length"],
)
@pytest.mark.parametrize("api", ["ShareFetch", "ShareAcknowledge"])
def test_a_malformed_batch_fails_its_partition_only(broker, bad, api) -> None:
    group = f"g-bad-{api}-{len(bad)}-{len(bad[0].acknowledge_types)}-{bad[0].first_offset}"
    tid = ready_topic(broker, "sl-" + group[2:], group, 0, partitions=2)
    produce(broker.bootstrap, "sl-" + group[2:], 3, partition=0)
    produce(broker.bootstrap, "sl-" + group[2:], 3, partition=1)
    with RawClient(broker.port) as c:
        r = fetch(c, group, "m", 0, [(tid, 0), (tid, 1)])
        got = {(p.partition_index): [(a.first_offset, a.last_offset) for a in p.acquired_records]
               for t in r.responses for p in t.partitions}  # fmt: skip
        assert got == {0: [(0, 2)], 1: [(0, 2)]}
        acks = {(tid, 0): bad, (tid, 1): [batch(0, 2, ACCEPT)]}
        if api == "ShareFetch":
            r = fetch(c, group, "m", 1, acks=acks)
            codes = {p.partition_index: p.acknowledge_error_code for t in r.responses for p in t.partitions}
        else:
            SA = api_by_name("ShareAcknowledge").request_class()
            r = c.call("ShareAcknowledge", 1, group_id=group, member_id="m", share_session_epoch=1, topics=[
                SA.AcknowledgeTopic(topic_id=tid, partitions=[
                    SA.AcknowledgePartition(partition_index=p, acknowledgement_batches=b) for (_, p), b in acks.items()
                ])])  # fmt: skip
            codes = {p.partition_index: p.error_code for t in r.responses for p in t.partitions}
        assert r.error_code == 0
        assert codes == {0: ErrorCode.INVALID_REQUEST, 1: 0}
        ok = acknowledge(c, group, "m", 2, tid, 0, batch(0, 2, ACCEPT))  # partition 0 is untouched
        assert part(ok).error_code == 0


# -- per-group delivery limits on one topic (KIP-1240) -------------------------------------------
def _deliveries_until_archived(c, group: str, tid, member: str, most: int = 8) -> list[int]:
    """Fetch the one record and RELEASE it, over and over; the delivery counts seen."""
    seen: list[int] = []
    epoch = 0
    for _ in range(most):
        r = fetch(c, group, member, epoch, [(tid, 0)] if epoch == 0 else ())
        epoch += 1
        got = acquired(r)
        if not got:
            break
        seen.append(got[0][2])
        a = acknowledge(c, group, member, epoch, tid, 0, batch(0, 0, RELEASE))
        epoch += 1
        assert part(a).error_code == 0
    fetch(c, group, member, -1)
    return seen


def test_each_group_archives_at_its_own_delivery_limit(broker) -> None:
    topic = "sl-limits"
    tid = ready_topic(broker, topic, "g-limit-two", 1, share_delivery_count_limit="2")
    ready_topic(broker, topic, "g-limit-default", 0)
    with RawClient(broker.port) as c:
        assert _deliveries_until_archived(c, "g-limit-two", tid, "a") == [1, 2]
        assert _deliveries_until_archived(c, "g-limit-default", tid, "b") == [1, 2, 3, 4, 5]  # the broker's 5


def test_a_lowered_limit_applies_to_a_loaded_share_partition(broker) -> None:
    topic = "sl-limit-live"
    tid = ready_topic(broker, topic, "g-limit-live", 1)
    with RawClient(broker.port) as c:
        assert _deliveries_until_archived(c, "g-limit-live", tid, "a", most=2) == [1, 2]
        group_config(broker.port, "g-limit-live", share_delivery_count_limit="2")
        assert _deliveries_until_archived(c, "g-limit-live", tid, "b") == []  # at 2 already: archived


# -- hostile frames ----------------------------------------------------------------------------
def _uv(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _share_fetch_frame(correlation: int) -> bytes:
    SF = api_by_name("ShareFetch").request_class()
    body = SF(group_id="g", member_id="m", share_session_epoch=0, max_wait_ms=0, min_bytes=1, max_bytes=1,
              max_records=1, batch_size=1, topics=[], forgotten_topics_data=[])  # fmt: skip
    return b"".join(bytes(p) for p in encode_request(api_by_name("ShareFetch").key, 1, correlation, "t", body))


def _hostile_frames() -> dict[str, bytes]:
    valid = _share_fetch_frame(5)
    # ... forgotten_topics_data (empty: 0x01), then the empty tagged section (0x00)
    assert valid.endswith(b"\x01\x01\x00")
    head = valid[4:-3]
    out = {
        # Topics claims 2^31 - 1 elements in a frame of a few dozen bytes
        "array of 2^31-1": head + _uv(2**31) + b"\x00" * 16,
        # a tagged section of one field more than the cap, each field really present
        "tags over the cap": head + b"\x01\x01" + _uv(MAX_TAGGED_FIELDS + 1) + b"\x05\x00" * (MAX_TAGGED_FIELDS + 1),
    }
    return {k: struct.pack(">i", len(v)) + v for k, v in out.items()}


@pytest.mark.parametrize("name", ["array of 2^31-1", "tags over the cap"])
def test_a_hostile_frame_closes_its_connection_and_others_carry_on(broker, name) -> None:
    frame = _hostile_frames()[name]
    with RawClient(broker.port) as good:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
            started = time.monotonic()
            s.sendall(frame)
            assert s.recv(100) == b""  # closed, nothing answered
            assert time.monotonic() - started < 3
        assert good.call("Metadata", 12, topics=None).brokers  # the broker still serves others


# -- share-session cache gauges -------------------------------------------------------------------
def _gauge(port: int, name: str) -> float:
    status, text = http_get(port, "/metrics")
    assert status == 200
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                return s.value
    raise AssertionError(f"{name} not exposed")


def test_share_session_cache_gauges(broker) -> None:
    assert broker.http_port
    sessions = "kafka_server_sharesessioncache_sharesessionscount"
    partitions = "kafka_server_sharesessioncache_sharepartitionscount"
    tid = ready_topic(broker, "sl-gauges", "g-gauges", 0, partitions=3)
    before = (_gauge(broker.http_port, sessions), _gauge(broker.http_port, partitions))
    with RawClient(broker.port) as c:
        assert fetch(c, "g-gauges", "m", 0, [(tid, 0), (tid, 1), (tid, 2)]).error_code == 0
        assert _gauge(broker.http_port, sessions) == before[0] + 1
        assert _gauge(broker.http_port, partitions) == before[1] + 3
        assert fetch(c, "g-gauges", "m", -1).error_code == 0
    assert (_gauge(broker.http_port, sessions), _gauge(broker.http_port, partitions)) == before
