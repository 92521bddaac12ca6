"""/metrics, /health and the request histograms over real sockets (issue 19).

A broker process with its operations listener on a free port; real traffic
(librdkafka producers, raw requests whose count the test knows), then the
exposition is scraped over HTTP and parsed with prometheus-client's own parser.
"""

from __future__ import annotations

import threading
import time

import confluent_kafka
import pytest
from prometheus_client.parser import text_string_to_metric_families

from shoal.protocol.api import api_by_name
from shoal.protocol.constants import ACCEPT, REJECT, RELEASE
from shoal.protocol.records import build_batch
from tests.support.brokers import BrokerProcess, RawClient
from tests.support.clients import _produce_topic
from tests.support.http import http_get
from tests.support.share_clients import produce
from tests.support.share_wire import FAST, acknowledge, acquired, batch, fetch, ready_topic
from tests.support.wire import create

pytestmark = pytest.mark.wire


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # Short idle-meter windows (250 ms, two kept): the idle test sees the load of the last half second.
    settings = [*FAST, "group.initial.rebalance.delay.ms=0", "metrics.sample.window.ms=250", "metrics.num.samples=2"]
    b = BrokerProcess(tmp_path_factory.mktemp("metrics") / "data", settings).start()
    assert b.http_port, "the operations listener did not announce its port"
    yield b
    b.stop()


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample as {(sample name, sorted labels): value}."""
    status, text = http_get(port, "/metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total"


def test_produced_records_move_messages_in_by_exactly_n(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "m-in", 2)
    before = scrape(broker.http_port)
    produce(broker.bootstrap, "m-in", 137)
    after = scrape(broker.http_port)
    assert value(after, MESSAGES_IN, topic="m-in") - value(before, MESSAGES_IN, topic="m-in") == 137
    assert value(after, MESSAGES_IN) - value(before, MESSAGES_IN) == 137  # the broker-wide total
    ends = sum(value(after, "kafka_log_log_logendoffset", topic="m-in", partition=str(p)) for p in (0, 1))
    assert ends == 137
    assert value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic="m-in") > 137


def test_the_produce_histogram_counts_every_produce_request_sent(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "m-hist")
    count = "kafka_network_requestmetrics_totaltimems_count"
    before = scrape(broker.http_port)
    sent = 23
    with RawClient(broker.port) as c:
        for i in range(sent):
            data = build_batch([(None, b"v%d" % i, [], int(time.time() * 1000))])
            r = c.call("Produce", 9, acks=1, timeout_ms=5000, topic_data=[_produce_topic("m-hist", 0, data)])
            assert r.responses[0].partition_responses[0].error_code == 0
    after = scrape(broker.http_port)
    assert value(after, count, request="Produce") - value(before, count, request="Produce") == sent
    inf = value(after, "kafka_network_requestmetrics_totaltimems_bucket", request="Produce", le="+Inf")
    assert inf == value(after, count, request="Produce")
    assert value(after, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic="m-hist") == sent
    assert value(after, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 0


def test_consumer_lag_is_end_offset_minus_committed(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "m-lag")
    produce(broker.bootstrap, "m-lag", 40, partition=0)
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "g-lag", "log_level": 0, "enable.auto.commit": False}
    )
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition("m-lag", 0, 15)], asynchronous=False)
    finally:
        consumer.close()
    samples = scrape(broker.http_port)
    end = value(samples, "kafka_log_log_logendoffset", topic="m-lag", partition="0")
    assert end == 40
    assert value(samples, "kafka_consumergroup_lag", consumergroup="g-lag", topic="m-lag", partition="0") == 40 - 15


def test_share_acknowledgements_are_counted_by_type(broker) -> None:
    topic, group = "m-share", "g-m-share"
    tid = ready_topic(broker, topic, group, 10)
    acks = "kafka_server_sharegroupmetrics_recordacknowledgements_total"
    with RawClient(broker.port) as c:
        r = fetch(c, group, "m1", 0, [(tid, 0)], max_records=10)
        assert sum(last - first + 1 for first, last, _ in acquired(r)) == 10
        a = acknowledge(c, group, "m1", 1, tid, 0, batch(0, 5, ACCEPT), batch(6, 7, RELEASE), batch(8, 9, REJECT))
        assert a.error_code == 0 and a.responses[0].partitions[0].error_code == 0
    samples = scrape(broker.http_port)
    labels = {"group": group, "topic": topic}
    assert value(samples, acks, acktype="accept", **labels) == 6
    assert value(samples, acks, acktype="release", **labels) == 2
    assert value(samples, acks, acktype="reject", **labels) == 2
    assert value(samples, "kafka_server_sharegroupmetrics_recordacquisitions_total", **labels) == 10
    # Offsets 6 and 7 are available again; the share partition's lag counts them.
    assert value(samples, "kafka_sharegroup_lag", partition="0", **labels) == 2


def test_health_is_live_and_ready_once_started(broker) -> None:
    assert http_get(broker.http_port, "/health/live")[0] == 200
    status, text = http_get(broker.http_port, "/health/ready")
    assert (status, text.strip()) == (200, "ready")
    assert value(scrape(broker.http_port), "shoal_broker_ready") == 1


def scrape_until(port: int, name: str, want: float, timeout: float = 15.0, **labels: str) -> dict:
    """Scrape until the sample reaches ``want`` (or the time is up); the last scrape."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(port)
        if value(samples, name, **labels) >= want or time.monotonic() > deadline:
            return samples
        time.sleep(0.1)


LOCK_TIMEOUTS = "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total"


def test_lock_timeouts_are_counted_when_a_lock_expires(broker) -> None:
    """A member acquires every record and never acknowledges: once the (1 s) lock runs out, the
    counter moves by exactly the records it held, and they are delivered again."""
    topic, group = "m-lock", "g-m-lock"
    tid = ready_topic(broker, topic, group, 12, share_record_lock_duration_ms="1000")
    labels = {"group": group, "topic": topic}
    assert value(scrape(broker.http_port), LOCK_TIMEOUTS, **labels) == 0
    with RawClient(broker.port) as c:
        r = fetch(c, group, "m1", 0, [(tid, 0)], max_records=100)
        held = sum(last - first + 1 for first, last, _ in acquired(r))
        assert held == 12
        acquired_at = time.monotonic()
        assert value(scrape(broker.http_port), LOCK_TIMEOUTS, **labels) == 0  # still locked
        samples = scrape_until(broker.http_port, LOCK_TIMEOUTS, held, **labels)
        assert time.monotonic() - acquired_at >= 0.9  # not before the lock duration
        assert value(samples, LOCK_TIMEOUTS, **labels) == held
        time.sleep(1.5)  # nothing else expires: the records are available, not acquired
        assert value(scrape(broker.http_port), LOCK_TIMEOUTS, **labels) == held
        again = fetch(c, group, "m1", 1, [(tid, 0)], max_records=100)
        assert sorted(acquired(again)) == [(0, 11, 2)]  # second delivery of the same records


DSO = api_by_name("DescribeShareGroupOffsets").request_class()


def describe_lag(port: int, group: str) -> dict[int, int]:
    """DescribeShareGroupOffsets' lag of each partition of the group's one topic."""
    req = [DSO.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]
    with RawClient(port) as c:
        d = c.call("DescribeShareGroupOffsets", 1, groups=req).groups[0]
    assert d.error_code == 0
    return {p.partition_index: p.lag for t in d.topics for p in t.partitions}


def test_share_lag_gauge_equals_describe_share_group_offsets(broker) -> None:
    topic, group = "m-slag", "g-m-slag"
    tid = ready_topic(broker, topic, group, 0, partitions=2)
    produce(broker.bootstrap, topic, 20, partition=0)
    produce(broker.bootstrap, topic, 10, partition=1)
    with RawClient(broker.port) as c:
        r = fetch(c, group, "m1", 0, [(tid, 0), (tid, 1)], max_records=100)
        assert sum(last - first + 1 for first, last, _ in acquired(r)) == 30
        # Per partition: accept 0-4, reject 5, release 6 (available again); the rest stays acquired.
        for epoch, index in enumerate((0, 1), start=1):
            a = acknowledge(
                c, group, "m1", epoch, tid, index, batch(0, 4, ACCEPT), batch(5, 5, REJECT), batch(6, 6, RELEASE)
            )
            assert a.error_code == 0 and a.responses[0].partitions[0].error_code == 0
    described = describe_lag(broker.port, group)
    assert described == {0: 20 - 6, 1: 10 - 6}  # accepted and rejected records are delivered to completion
    samples = scrape(broker.http_port)
    for index, lag in described.items():
        assert value(samples, "kafka_sharegroup_lag", group=group, topic=topic, partition=str(index)) == lag, index
    # Records produced since move both by the same amount.
    produce(broker.bootstrap, topic, 5, partition=0)
    after = describe_lag(broker.port, group)
    assert after == {0: described[0] + 5, 1: described[1]}
    samples = scrape(broker.http_port)
    assert value(samples, "kafka_sharegroup_lag", group=group, topic=topic, partition="0") == after[0]


def test_log_flushes_are_timed(broker) -> None:
    """Each acks=-1 produce waits for a group-commit fsync of its log: the flush histogram counts
    at least one flush per request sent one after another."""
    with RawClient(broker.port) as c:
        create(c, "m-flush")
    count = "kafka_log_logflushstats_logflushrateandtimems_count"
    before = scrape(broker.http_port)
    sent = 6
    with RawClient(broker.port) as c:
        for i in range(sent):
            data = build_batch([(None, b"f%d" % i, [], int(time.time() * 1000))])
            r = c.call("Produce", 9, acks=-1, timeout_ms=5000, topic_data=[_produce_topic("m-flush", 0, data)])
            assert r.responses[0].partition_responses[0].error_code == 0
    after = scrape(broker.http_port)
    assert value(after, count) - value(before, count) >= sent
    assert value(after, "kafka_log_logflushstats_logflushrateandtimems_bucket", le="+Inf") == value(after, count)
    assert value(after, "kafka_log_logflushstats_logflushrateandtimems_sum") > value(
        before, "kafka_log_logflushstats_logflushrateandtimems_sum"
    )


def test_coordinator_load_times_are_exposed(broker) -> None:
    samples = scrape(broker.http_port)
    for coordinator in ("group", "share"):
        prefix = f"kafka_server_{coordinator}_coordinator_metrics_partition_load_time_"
        longest, mean = (prefix + "max", ()), (prefix + "avg", ())
        assert longest in samples and mean in samples, coordinator
        assert samples[longest] >= samples[mean] > 0


REBALANCES = "kafka_server_group_coordinator_metrics_group_rebalance_count"
JG = api_by_name("JoinGroup").request_class()


def test_rebalances_are_counted_per_protocol(broker) -> None:
    before = scrape(broker.http_port)
    # A classic group of one member: the first join needs a member id (no rebalance), the second
    # prepares one rebalance, which completes at once.
    join = {
        "group_id": "g-m-rebalance",
        "session_timeout_ms": 30000,
        "rebalance_timeout_ms": 5000,
        "protocol_type": "consumer",
        "protocols": [JG.JoinGroupRequestProtocol(name="range", metadata=b"")],
    }
    with RawClient(broker.port) as c:
        first = c.call("JoinGroup", 5, member_id="", **join)
        assert first.error_code == 79  # MEMBER_ID_REQUIRED
        joined = c.call("JoinGroup", 5, member_id=first.member_id, **join)
        assert joined.error_code == 0 and joined.generation_id == 1
    middle = scrape(broker.http_port)
    assert value(middle, REBALANCES, protocol="classic") - value(before, REBALANCES, protocol="classic") == 1
    # A share group: every group-epoch bump is a rebalance.
    topic, group = "m-srebalance", "g-m-srebalance"
    ready_topic(broker, topic, group, 0)
    with RawClient(broker.port) as c:
        d = c.call("ShareGroupDescribe", 1, group_ids=[group], include_authorized_operations=False).groups[0]
    assert d.group_epoch >= 1
    after = scrape(broker.http_port)
    assert value(after, REBALANCES, protocol="share") - value(middle, REBALANCES, protocol="share") == d.group_epoch


def test_dead_lettered_records_and_share_request_counts(broker) -> None:
    """Rejected records copied to the dead-letter topic are counted; the request histogram counts
    the ShareFetch and ShareAcknowledge requests sent (their request rates)."""
    topic, group, dlq = "m-dlq", "g-m-dlq", "dlq.m-dlq"
    with RawClient(broker.port) as c:
        create(c, dlq, errors_deadletterqueue_group_enable="true")
    tid = ready_topic(broker, topic, group, 8, errors_deadletterqueue_topic_name=dlq)
    count = "kafka_network_requestmetrics_totaltimems_count"
    before = scrape(broker.http_port)
    with RawClient(broker.port) as c:
        r = fetch(c, group, "m1", 0, [(tid, 0)], max_records=100)
        assert sum(last - first + 1 for first, last, _ in acquired(r)) == 8
        a = acknowledge(c, group, "m1", 1, tid, 0, batch(0, 2, REJECT), batch(3, 7, ACCEPT))
        assert a.error_code == 0 and a.responses[0].partitions[0].error_code == 0
    labels = {"group": group, "topic": topic}
    dead = "kafka_server_sharegroupmetrics_deadletterqueuerecordcount_total"
    samples = scrape_until(broker.http_port, dead, 3, **labels)
    assert value(samples, dead, **labels) == 3
    assert value(samples, "kafka_log_log_logendoffset", topic=dlq, partition="0") == 3  # the copies
    assert value(samples, "kafka_server_sharepartitionmetrics_archiveddeliverylimit_total", **labels) == 0
    assert value(samples, count, request="ShareFetch") - value(before, count, request="ShareFetch") == 1
    assert value(samples, count, request="ShareAcknowledge") - value(before, count, request="ShareAcknowledge") == 1


BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"


def test_share_fetch_answers_move_bytes_out_by_the_record_bytes_sent(broker) -> None:
    """Kafka counts a ShareFetch's records in BytesOut as it counts a Fetch's: a share consumer
    that received N bytes of record batches (several fetches, each acknowledging the previous
    one's records, over two partitions) moves the topic's BytesOut and the total by exactly N."""
    topic, group = "m-sbytes", "g-m-sbytes"
    tid = ready_topic(broker, topic, group, 0, partitions=2)
    for n, partition in ((10, 0), (10, 0), (10, 0), (9, 1), (8, 1)):  # several batches per partition
        produce(broker.bootstrap, topic, n, partition=partition)
    before = scrape(broker.http_port)
    received = records = fetches = 0
    acks: dict = {}
    with RawClient(broker.port) as c:
        for epoch in range(20):
            r = fetch(c, group, "m1", epoch, [(tid, 0), (tid, 1)], acks=acks, max_records=8)
            assert r.error_code == 0
            acks = {}
            for t in r.responses:
                for p in t.partitions:
                    assert p.error_code == 0 and p.acknowledge_error_code == 0
                    received += len(p.records)
                    for a in p.acquired_records:
                        records += a.last_offset - a.first_offset + 1
                        acks.setdefault((tid, p.partition_index), []).append(
                            batch(a.first_offset, a.last_offset, ACCEPT)
                        )
            fetches += 1
            if records >= 47:
                break
    assert records == 47 and fetches >= 2 and received > 0
    after = scrape(broker.http_port)
    assert value(after, BYTES_OUT, topic=topic) - value(before, BYTES_OUT, topic=topic) == received
    assert value(after, BYTES_OUT) - value(before, BYTES_OUT) == received


NETWORK_IDLE = "kafka_network_socketserver_networkprocessoravgidle_percent"
HANDLER_IDLE = "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent"


def _flood(bootstrap: str, topic: str, stop: threading.Event) -> None:
    """librdkafka producing 1 KiB records as fast as the broker takes them, until stopped."""
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": 1, "log_level": 0})
    value = b"x" * 1024
    while not stop.is_set():
        for _ in range(500):
            try:
                p.produce(topic, value)
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(10)


def test_the_event_loop_idle_fraction_is_high_when_idle_and_drops_under_load(broker) -> None:
    """Kafka's NetworkProcessorAvgIdlePercent and RequestHandlerAvgIdlePercent (one loop: one
    number): near 1 on an idle broker, far lower while producers keep it busy, near 1 again after.
    Wide margins: idle readings here are 0.92 to 1.0, loaded ones 0 to 0.3."""
    with RawClient(broker.port) as c:
        create(c, "m-busy", 2)
    quiet = scrape_until(broker.http_port, NETWORK_IDLE, 0.9)
    assert value(quiet, NETWORK_IDLE) >= 0.9
    assert value(quiet, HANDLER_IDLE) == value(quiet, NETWORK_IDLE)
    stop = threading.Event()
    producer = threading.Thread(target=_flood, args=(broker.bootstrap, "m-busy", stop))
    producer.start()
    try:
        time.sleep(1.0)  # the windows (0.25 to 0.5 s) now hold only loaded time
        loaded = []
        for _ in range(4):
            loaded.append(scrape(broker.http_port))
            time.sleep(0.3)
    finally:
        stop.set()
        producer.join(30)
    readings = [value(s, NETWORK_IDLE) for s in loaded]
    assert min(readings) < 0.5, readings
    assert all(value(s, HANDLER_IDLE) == value(s, NETWORK_IDLE) for s in loaded)
    produced = value(loaded[-1], MESSAGES_IN, topic="m-busy")
    assert produced > 1000, "the producers did not load the broker"
    assert value(scrape_until(broker.http_port, NETWORK_IDLE, 0.9), NETWORK_IDLE) >= 0.9  # idle again
