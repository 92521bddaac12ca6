"""Turn one broker's counters and state into Prometheus metric families at scrape time.

The counters (``counters.BrokerStats``) are plain ints the broker bumps; the
gauges (log offsets and sizes, purgatory sizes, groups, lag, in-flight share
records) are read from the broker's live objects here, so they cost nothing
between scrapes. The collector runs on the broker's event loop (the HTTP
handler calls it there), so it reads the state without locks. It sees the
broker by duck typing: this package sits below the broker in the layers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from shoal.broker.metrics.counters import REQUEST_BUCKETS_MS, BrokerStats
from shoal.broker.metrics.names import ACK_TYPES, METRICS
from shoal.protocol.api import api

__all__ = ["BrokerCollector", "ready"]

_TERMINAL = (2, 4)  # in_flight's ACKNOWLEDGED and ARCHIVED states
_BOUNDS = [*(repr(b) for b in REQUEST_BUCKETS_MS), "+Inf"]  # histogram bucket labels (le)


def _family(key: str) -> Metric:
    row = METRICS[key]
    return Metric(row.name, row.help, row.kind)


def _sample_name(key: str) -> str:
    row = METRICS[key]
    return row.name + "_total" if row.kind == "counter" else row.name


def ready(broker: Any) -> tuple[bool, str]:
    """Whether the broker serves: started (logs recovered), coordinators loaded, log dir online."""
    if not getattr(broker, "started", False):
        return False, "starting: recovering logs"
    log_dir = getattr(broker, "log_dir", None)
    if log_dir is not None and log_dir.offline:
        return False, f"log directory offline: {log_dir.error}"
    for what, coordinator in (("group", broker.groups), ("share", broker.share_coordinator)):
        if coordinator is not None and not coordinator.runtime.loaded.is_set():
            return False, f"loading the {what} coordinator"
    return True, "ready"


class BrokerCollector(Collector):
    """The collector of one broker (registered in that broker's own CollectorRegistry)."""

    def __init__(self, broker: Any, stats: BrokerStats, idle: Callable[[], float | None] | None = None) -> None:
        self.broker = broker
        self.stats = stats
        self.idle = idle  # the event loop's idle fraction (idle.py), None when nothing samples it

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_counters()
        yield self._request_times()
        yield from self._network()
        yield from self._logs()
        yield self._log_flushes()
        yield self._slow_log_writes()
        yield self._purgatories()
        yield from self._coordinators()
        yield from self._groups()
        yield from self._share()
        up = _family("ready")
        up.add_sample(METRICS["ready"].name, {}, 1.0 if ready(self.broker)[0] else 0.0)
        yield up

    # -- counters ------------------------------------------------------------------
    def _topic_counters(self) -> Iterator[Metric]:
        topics = sorted(self.stats.topics.items())
        for attr in (
            "messages_in",
            "bytes_in",
            "bytes_out",
            "produce_requests",
            "fetch_requests",
            "failed_produce",
            "failed_fetch",
        ):
            fam, name = _family(attr), _sample_name(attr)
            total = 0
            for topic, counts in topics:
                value = getattr(counts, attr)
                total += value
                fam.add_sample(name, {"topic": topic}, value)
            fam.add_sample(name, {}, total)
            yield fam

    def _request_times(self) -> Metric:
        row = METRICS["request_time"]
        fam = HistogramMetricFamily(row.name, row.help, labels=["request"])
        for key, times in sorted(self.stats.requests.items()):
            known = api(key)
            request = known.name if known is not None else str(key)
            fam.add_metric([request], list(zip(_BOUNDS, times.cumulative())), times.sum_ns / 1e6)
        return fam

    def _log_flushes(self) -> Metric:
        row = METRICS["log_flush_time"]
        fam = HistogramMetricFamily(row.name, row.help)
        flusher = getattr(self.broker, "flusher", None)
        if flusher is not None:
            times = flusher.flush_times
            fam.add_metric([], list(zip(_BOUNDS, times.cumulative())), times.sum_ns / 1e6)
        return fam

    def _slow_log_writes(self) -> Metric:
        fam = _family("slow_log_writes")
        guard = getattr(self.broker, "inline_writes", None)  # broker.log.inline_writes.InlineWrites
        if guard is not None:
            fam.add_sample(_sample_name("slow_log_writes"), {}, guard.pauses)
        return fam

    def _coordinators(self) -> Iterator[Metric]:
        for prefix, coordinator in (("group", self.broker.groups), ("share", self.broker.share_coordinator)):
            longest, mean = _family(prefix + "_load_max"), _family(prefix + "_load_avg")
            loads = list(coordinator.runtime.load_ms.values()) if coordinator is not None else []
            if loads:
                longest.add_sample(longest.name, {}, max(loads))
                mean.add_sample(mean.name, {}, sum(loads) / len(loads))
            yield from (longest, mean)
        rebalances = _family("rebalances")
        for protocol in ("classic", "share"):
            rebalances.add_sample(rebalances.name, {"protocol": protocol}, self.stats.rebalances.get(protocol, 0))
        yield rebalances

    def _network(self) -> Iterator[Metric]:
        server = self.broker.server
        connections = list(server.connections) if server is not None else []
        in_flight = _family("requests_in_flight")
        in_flight.add_sample(_sample_name("requests_in_flight"), {}, sum(c.in_flight for c in connections))
        yield in_flight
        listener = self.broker.config.listener.name
        open_ = _family("connections")
        open_.add_sample(_sample_name("connections"), {"listener": listener}, len(connections))
        yield open_
        created = _family("connections_created")
        for name, n in sorted(self.stats.connections_created.items()):
            created.add_sample(_sample_name("connections_created"), {"listener": name}, n)
        yield created
        idle = self.idle() if self.idle is not None else None
        for key in ("network_idle", "handler_idle"):  # one loop does both jobs: the same number
            fam = _family(key)
            if idle is not None:
                fam.add_sample(fam.name, {}, idle)
            yield fam

    # -- state read at scrape time -------------------------------------------------------
    def _logs(self) -> Iterator[Metric]:
        size, end, start = _family("log_size"), _family("log_end_offset"), _family("log_start_offset")
        for topic in self.broker.topics or ():
            for p in topic.partitions:
                labels = {"topic": topic.name, "partition": str(p.index)}
                size.add_sample(size.name, labels, p.log.size_bytes)
                end.add_sample(end.name, labels, p.log_end_offset)
                start.add_sample(start.name, labels, p.log_start_offset)
        yield from (size, end, start)

    def _purgatories(self) -> Metric:
        fam = _family("purgatory_size")
        for purgatory in (self.broker.fetch_purgatory, getattr(self.broker.groups, "purgatory", None)):
            if purgatory is not None:
                fam.add_sample(fam.name, {"delayedoperation": purgatory.name}, purgatory.delayed())
        return fam

    def _groups(self) -> Iterator[Metric]:
        groups, lag = _family("groups"), _family("consumer_lag")
        coordinator = self.broker.groups
        counts: dict[tuple[str, str], int] = {}
        topics = self.broker.topics
        for shard in coordinator.loaded_shards() if coordinator is not None else ():
            for g in shard.groups.values():
                key = ("classic", g.state.value)
                counts[key] = counts.get(key, 0) + 1
            for g in shard.share_groups.values():
                key = ("share", str(g.state))
                counts[key] = counts.get(key, 0) + 1
            for gid, committed in sorted(shard.offsets.items()):
                for (topic_name, index), c in sorted(committed.items()):
                    topic = topics.get(topic_name) if topics is not None else None
                    if topic is None or not 0 <= index < len(topic.partitions) or c.offset < 0:
                        continue
                    value = max(0, topic.partitions[index].high_watermark - c.offset)
                    lag.add_sample(
                        lag.name, {"consumergroup": gid, "topic": topic_name, "partition": str(index)}, value
                    )
        for (protocol, state), n in sorted(counts.items()):
            groups.add_sample(groups.name, {"protocol": protocol, "state": state}, n)
        yield from (groups, lag)

    def _share(self) -> Iterator[Metric]:
        acks, acquired = _family("share_acks"), _family("share_acquired")
        timeouts, archived = _family("share_lock_timeouts"), _family("share_archived_limit")
        dead = _family("share_dead_lettered")
        for (group, topic), c in sorted(self.stats.share.items()):
            labels = {"group": group, "topic": topic}
            acquired.add_sample(_sample_name("share_acquired"), labels, c.acquired)
            timeouts.add_sample(_sample_name("share_lock_timeouts"), labels, c.lock_timeouts)
            archived.add_sample(_sample_name("share_archived_limit"), labels, c.archived_at_limit)
            dead.add_sample(_sample_name("share_dead_lettered"), labels, c.dead_lettered)
            for t, name in ACK_TYPES.items():
                acks.add_sample(_sample_name("share_acks"), {**labels, "acktype": name}, c.acks.get(t, 0))
        in_flight, lag = _family("share_in_flight"), _family("share_lag")
        manager = self.broker.share_partitions
        for (group, _topic_id, index), entry in sorted(
            (manager.entries.items() if manager is not None else ()), key=lambda kv: (kv[0][0], str(kv[0][1]), kv[0][2])
        ):
            sp = entry.sp
            if sp is None:
                continue
            labels = {"group": group, "topic": entry.topic.name, "partition": str(index)}
            in_flight.add_sample(in_flight.name, labels, sp.in_flight_count)
            hwm = entry.partition.high_watermark
            lag.add_sample(lag.name, labels, max(0, hwm - sp.start_offset - sp.delivery_complete_count()))
        yield from (acks, acquired, timeouts, archived, dead, in_flight, lag)
        if manager is not None:
            sessions, partitions = _family("share_sessions"), _family("share_session_partitions")
            sessions.add_sample(sessions.name, {}, len(manager.sessions))
            partitions.add_sample(partitions.name, {}, manager.sessions.total_partitions)
            yield from (sessions, partitions)
