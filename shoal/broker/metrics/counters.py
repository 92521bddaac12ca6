"""The broker's own counters: plain ints and dicts, bumped at the call sites.

Why not prometheus-client objects on the hot path: a labelled Counter takes a
lock and looks its child up on every ``inc``; a produce of one batch would pay
that several times. The broker instead adds to attributes of small slotted
objects here (one dict lookup per topic per request), and the collector
(``collector.py``) turns them into metric families only when /metrics is
scraped. Nothing here imports asyncio or prometheus-client, and one
``BrokerStats`` belongs to one Broker (no module state: tests run several).
"""

from __future__ import annotations

from bisect import bisect_left

__all__ = ["REQUEST_BUCKETS_MS", "BrokerStats", "RequestTimes", "ShareCounts", "TopicCounts"]

# Upper bounds (ms) of the request-time histogram's buckets; +Inf is implied.
REQUEST_BUCKETS_MS: tuple[float, ...] = (
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    5000.0,
    10000.0,
    30000.0,
)
_BOUNDS_NS = tuple(int(b * 1_000_000) for b in REQUEST_BUCKETS_MS)


class TopicCounts:
    """BrokerTopicMetrics of one topic (the totals are their sums)."""

    __slots__ = (
        "bytes_in",
        "bytes_out",
        "failed_fetch",
        "failed_produce",
        "fetch_requests",
        "messages_in",
        "produce_requests",
    )

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.produce_requests = 0  # partitions of produce requests for this topic (Kafka counts per partition)
        self.fetch_requests = 0
        self.failed_produce = 0
        self.failed_fetch = 0


class RequestTimes:
    """A histogram of durations in ns over ``REQUEST_BUCKETS_MS``: one request type's time from frame
    received to answer written, or the log flusher's fsync time per log."""

    __slots__ = ("buckets", "count", "sum_ns")

    def __init__(self) -> None:
        self.buckets = [0] * (len(_BOUNDS_NS) + 1)  # per bucket (not cumulative); the last is +Inf
        self.count = 0
        self.sum_ns = 0

    def observe(self, elapsed_ns: int) -> None:
        self.buckets[bisect_left(_BOUNDS_NS, elapsed_ns)] += 1
        self.count += 1
        self.sum_ns += elapsed_ns

    def cumulative(self) -> list[int]:
        out, total = [], 0
        for n in self.buckets:
            total += n
            out.append(total)
        return out


class ShareCounts:
    """KIP-932's share-group counts for one (group, topic)."""

    __slots__ = ("acks", "acquired", "archived_at_limit", "dead_lettered", "lock_timeouts")

    def __init__(self) -> None:
        self.acquired = 0  # records acquired (each delivery counts)
        self.acks: dict[int, int] = {}  # acknowledge type (1 accept, 2 release, 3 reject, 4 renew) -> records
        self.lock_timeouts = 0  # records whose acquisition lock expired
        self.archived_at_limit = 0  # records archived because they reached the delivery-count limit
        self.dead_lettered = 0  # records copied to the group's dead-letter topic (KIP-1191)


class BrokerStats:
    """Every counter of one broker."""

    __slots__ = ("connections_created", "rebalances", "requests", "share", "topics")

    def __init__(self) -> None:
        self.topics: dict[str, TopicCounts] = {}
        self.requests: dict[int, RequestTimes] = {}  # api key -> times
        self.connections_created: dict[str, int] = {}  # listener name -> connections accepted, ever
        self.share: dict[tuple[str, str], ShareCounts] = {}  # (group, topic name) -> counts
        self.rebalances: dict[str, int] = {}  # protocol ("classic", "share") -> rebalances begun, ever

    def rebalance(self, protocol: str, n: int = 1) -> None:
        self.rebalances[protocol] = self.rebalances.get(protocol, 0) + n

    def topic(self, name: str) -> TopicCounts:
        counts = self.topics.get(name)
        if counts is None:
            counts = self.topics[name] = TopicCounts()
        return counts

    def request_done(self, api_key: int, elapsed_ns: int) -> None:
        times = self.requests.get(api_key)
        if times is None:
            times = self.requests[api_key] = RequestTimes()
        times.observe(elapsed_ns)

    def share_counts(self, group: str, topic: str) -> ShareCounts:
        key = (group, topic)
        counts = self.share.get(key)
        if counts is None:
            counts = self.share[key] = ShareCounts()
        return counts

    def forget_topic(self, name: str) -> None:
        """A deleted topic's series go away (a topic created again under the name starts from 0)."""
        self.topics.pop(name, None)
        for key in [k for k in self.share if k[1] == name]:
            del self.share[key]
