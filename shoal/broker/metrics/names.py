"""Every metric name Shoal exposes on /metrics, in one table.

Why Kafka's names: operators already have dashboards and alerts written
against what the Prometheus JMX exporter makes of Kafka's MBeans with its
usual Kafka rules (lower-cased ``domain_type_name``, a ``_total`` counter for
a ``...PerSec`` meter's Count, MBean keys as labels). Shoal has no JMX, so it
writes those names itself. Where Kafka has no broker metric (consumer lag is
an exporter's, kafka_exporter's ``kafka_consumergroup_lag``) Shoal uses the
name dashboards know; the few names of its own are marked "Shoal".

=========================================================================  =====================================================================
Kafka MBean (or source)                                                    Prometheus name and labels
=========================================================================  =====================================================================
kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec[,topic=T]       kafka_server_brokertopicmetrics_messagesin_total{[topic]}
kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec[,topic=T]          kafka_server_brokertopicmetrics_bytesin_total{[topic]}
kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec[,topic=T]         kafka_server_brokertopicmetrics_bytesout_total{[topic]}
kafka.server:type=BrokerTopicMetrics,name=TotalProduceRequestsPerSec       kafka_server_brokertopicmetrics_totalproducerequests_total{[topic]}
kafka.server:type=BrokerTopicMetrics,name=TotalFetchRequestsPerSec         kafka_server_brokertopicmetrics_totalfetchrequests_total{[topic]}
kafka.server:type=BrokerTopicMetrics,name=FailedProduceRequestsPerSec      kafka_server_brokertopicmetrics_failedproducerequests_total{[topic]}
kafka.server:type=BrokerTopicMetrics,name=FailedFetchRequestsPerSec        kafka_server_brokertopicmetrics_failedfetchrequests_total{[topic]}
kafka.network:type=RequestMetrics,name=TotalTimeMs,request=R               kafka_network_requestmetrics_totaltimems{request} (histogram, ms)
kafka.network:type=RequestChannel,name=RequestQueueSize                    kafka_network_requestchannel_requestqueuesize (requests in flight)
kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent        kafka_network_socketserver_networkprocessoravgidle_percent (0..1)
kafka.server:type=KafkaRequestHandlerPool,RequestHandlerAvgIdlePercent     kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent
kafka.server:type=socket-server-metrics,listener=L,name=connection-count   kafka_server_socket_server_metrics_connection_count{listener}
kafka.server:type=socket-server-metrics,...,connection-creation-total      kafka_server_socket_server_metrics_connection_creation_total{listener}
kafka.log:type=Log,name=Size,topic=T,partition=P                           kafka_log_log_size{topic,partition}
kafka.log:type=Log,name=LogEndOffset,topic=T,partition=P                   kafka_log_log_logendoffset{topic,partition}
kafka.log:type=Log,name=LogStartOffset,topic=T,partition=P                 kafka_log_log_logstartoffset{topic,partition}
kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs                    kafka_log_logflushstats_logflushrateandtimems (histogram, ms)
kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize,delayedOp=O  kafka_server_delayedoperationpurgatory_purgatorysize{delayedoperation}
kafka.server:type=group-coordinator-metrics,name=group-count,protocol=X     kafka_server_group_coordinator_metrics_group_count{protocol,state}
kafka.server:type=group-coordinator-metrics,partition-load-time-max         kafka_server_group_coordinator_metrics_partition_load_time_max (ms)
kafka.server:type=group-coordinator-metrics,partition-load-time-avg         kafka_server_group_coordinator_metrics_partition_load_time_avg (ms)
kafka.server:type=share-coordinator-metrics,partition-load-time-max         kafka_server_share_coordinator_metrics_partition_load_time_max (ms)
kafka.server:type=share-coordinator-metrics,partition-load-time-avg         kafka_server_share_coordinator_metrics_partition_load_time_avg (ms)
kafka.server:type=group-coordinator-metrics,group-rebalance-count,protocol  kafka_server_group_coordinator_metrics_group_rebalance_count{protocol}
kafka_exporter's consumer-group lag                                        kafka_consumergroup_lag{consumergroup,topic,partition}
kafka.server:type=ShareGroupMetrics,name=RecordAcknowledgementsPerSec      kafka_server_sharegroupmetrics_recordacknowledgements_total{group,topic,acktype}
Shoal: records acquired by share consumers (each delivery)                 kafka_server_sharegroupmetrics_recordacquisitions_total{group,topic}
kafka.server:type=SharePartitionMetrics,name=AcquisitionLockTimeoutPerSec  kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total{group,topic}
kafka.server:type=SharePartitionMetrics,name=InFlightMessageCount          kafka_server_sharepartitionmetrics_inflightmessagecount{group,topic,partition}
kafka.server:type=ShareSessionCache,name=ShareSessionsCount                kafka_server_sharesessioncache_sharesessionscount
kafka.server:type=ShareSessionCache,name=SharePartitionsCount              kafka_server_sharesessioncache_sharepartitionscount
Shoal: records archived at the delivery-count limit                        kafka_server_sharepartitionmetrics_archiveddeliverylimit_total{group,topic}
kafka.server:type=ShareGroupMetrics,name=DeadLetterQueueRecordCount        kafka_server_sharegroupmetrics_deadletterqueuerecordcount_total{group,topic}
Shoal: share-partition lag (DescribeShareGroupOffsets' lag)                kafka_sharegroup_lag{group,topic,partition}
Shoal: ready (1) or not (0), as /health/ready answers                      shoal_broker_ready
Shoal: slow log writes (small appends then leave the event loop)           shoal_log_slow_writes_total
=========================================================================  =====================================================================

The share-session cache has no eviction meter (Kafka's ``ShareSessionEvictionsPerSec``):
Shoal never evicts a session for a new one, it answers SHARE_SESSION_LIMIT_REACHED.

Labels in ``[brackets]`` are present on the per-topic series and absent on the
broker-wide total, as the JMX exporter writes the two MBeans. Acknowledge types
are lower-case: accept, release, reject, renew. Kafka 4.4's ``DeadLetterQueueRecordCount`` is
a meter although its name lacks ``PerSec``, so its Count is a ``_total`` counter here too; its
MBean has only the ``group`` key, Shoal's series add ``topic`` (sum by group for Kafka's).

The two idle metrics are named as the JMX exporter's Kafka rules name a
``...Percent`` MBean (``kafka_<domain>_<type>_<name without Percent>_percent``)
and hold a fraction between 0 and 1, as Kafka's do. Shoal has one event loop
where Kafka has network and handler thread pools, so both carry the same
number: the share of wall time over the last ``metrics.num.samples`` windows
of ``metrics.sample.window.ms`` in which the loop thread was neither running
nor waiting for a CPU (``idle.py`` says how it is measured and what it costs).
They are absent when the operations listener is off (nothing samples them).

Kafka's coordinator load times are windowed (avg and max of the recent loads);
Shoal's are over the latest load of each partition of the internal topic. Its
rebalance count (a Kafka metric's cumulative ``-count``, so a gauge as the
exporter writes it; ``rate()`` gives the rebalance rate) counts for classic
groups each rebalance begun (a move to PreparingRebalance) and for share
groups each group-epoch bump. Request rates of every API, ShareFetch and
ShareAcknowledge included, are the request histogram's ``_count`` per
``request`` label.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ACK_TYPES", "METRICS", "MetricName"]


class MetricName:
    """One row: the exposed name (without a counter's ``_total``), its kind and help text."""

    __slots__ = ("help", "kind", "name")

    def __init__(self, name: str, kind: str, help: str) -> None:
        self.name = name
        self.kind = kind  # counter, gauge or histogram
        self.help = help


def _m(name: str, kind: str, help: str) -> MetricName:
    return MetricName(name, kind, help)


_TOPIC = "kafka_server_brokertopicmetrics_"

METRICS: Final = {
    "messages_in": _m(_TOPIC + "messagesin", "counter", "Records appended by produce requests."),
    "bytes_in": _m(_TOPIC + "bytesin", "counter", "Record-batch bytes received by produce requests."),
    "bytes_out": _m(_TOPIC + "bytesout", "counter", "Record-batch bytes sent by fetch and share-fetch answers."),
    "produce_requests": _m(_TOPIC + "totalproducerequests", "counter", "Produce requests, counted per partition."),
    "fetch_requests": _m(_TOPIC + "totalfetchrequests", "counter", "Fetch requests, counted per partition."),
    "failed_produce": _m(_TOPIC + "failedproducerequests", "counter", "Produce partitions answered with an error."),
    "failed_fetch": _m(_TOPIC + "failedfetchrequests", "counter", "Fetch partitions answered with an error."),
    "request_time": _m(
        "kafka_network_requestmetrics_totaltimems", "histogram", "Time from request received to answer written, ms."
    ),
    "requests_in_flight": _m(
        "kafka_network_requestchannel_requestqueuesize", "gauge", "Requests received and not yet answered."
    ),
    "network_idle": _m(
        "kafka_network_socketserver_networkprocessoravgidle_percent",
        "gauge",
        "Fraction of recent wall time the event loop waited for work (one loop does network and requests).",
    ),
    "handler_idle": _m(
        "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
        "gauge",
        "Fraction of recent wall time the event loop waited for work (the same loop as the network's).",
    ),
    "connections": _m("kafka_server_socket_server_metrics_connection_count", "gauge", "Open client connections."),
    "connections_created": _m(
        "kafka_server_socket_server_metrics_connection_creation", "counter", "Client connections accepted."
    ),
    "log_size": _m("kafka_log_log_size", "gauge", "Bytes of a partition's log segments."),
    "log_end_offset": _m("kafka_log_log_logendoffset", "gauge", "A partition's log end offset."),
    "log_start_offset": _m("kafka_log_log_logstartoffset", "gauge", "A partition's log start offset."),
    "log_flush_time": _m(
        "kafka_log_logflushstats_logflushrateandtimems", "histogram", "Time of one log's group-commit fsyncs, ms."
    ),
    "purgatory_size": _m(
        "kafka_server_delayedoperationpurgatory_purgatorysize", "gauge", "Delayed operations waiting per purgatory."
    ),
    "groups": _m("kafka_server_group_coordinator_metrics_group_count", "gauge", "Groups by protocol and state."),
    "group_load_max": _m(
        "kafka_server_group_coordinator_metrics_partition_load_time_max",
        "gauge",
        "Longest load (replay) of a __consumer_offsets partition, ms.",
    ),
    "group_load_avg": _m(
        "kafka_server_group_coordinator_metrics_partition_load_time_avg",
        "gauge",
        "Mean load (replay) time of the __consumer_offsets partitions, ms.",
    ),
    "share_load_max": _m(
        "kafka_server_share_coordinator_metrics_partition_load_time_max",
        "gauge",
        "Longest load (replay) of a __share_group_state partition, ms.",
    ),
    "share_load_avg": _m(
        "kafka_server_share_coordinator_metrics_partition_load_time_avg",
        "gauge",
        "Mean load (replay) time of the __share_group_state partitions, ms.",
    ),
    "rebalances": _m(
        "kafka_server_group_coordinator_metrics_group_rebalance_count",
        "gauge",
        "Rebalances since start, by group protocol (cumulative; rate() gives the rebalance rate).",
    ),
    "consumer_lag": _m(
        "kafka_consumergroup_lag", "gauge", "High watermark minus the group's committed offset, per partition."
    ),
    "share_acks": _m(
        "kafka_server_sharegroupmetrics_recordacknowledgements", "counter", "Share records acknowledged, by type."
    ),
    "share_acquired": _m(
        "kafka_server_sharegroupmetrics_recordacquisitions", "counter", "Share records acquired (each delivery)."
    ),
    "share_lock_timeouts": _m(
        "kafka_server_sharepartitionmetrics_acquisitionlocktimeout", "counter", "Share records whose lock expired."
    ),
    "share_in_flight": _m(
        "kafka_server_sharepartitionmetrics_inflightmessagecount",
        "gauge",
        "Records between a share partition's start and end.",
    ),
    "share_archived_limit": _m(
        "kafka_server_sharepartitionmetrics_archiveddeliverylimit",
        "counter",
        "Share records archived at the delivery-count limit.",
    ),
    "share_dead_lettered": _m(
        "kafka_server_sharegroupmetrics_deadletterqueuerecordcount",
        "counter",
        "Share records copied to the group's dead-letter topic.",
    ),
    "share_sessions": _m(
        "kafka_server_sharesessioncache_sharesessionscount",
        "gauge",
        "Share sessions in the broker's cache (at most group.share.max.share.sessions).",
    ),
    "share_session_partitions": _m(
        "kafka_server_sharesessioncache_sharepartitionscount",
        "gauge",
        "Share partitions named by the cached share sessions, summed over the sessions.",
    ),
    "share_lag": _m("kafka_sharegroup_lag", "gauge", "Records of a share partition not yet delivered to completion."),
    "ready": _m("shoal_broker_ready", "gauge", "1 when /health/ready answers 200."),
    "slow_log_writes": _m(
        "shoal_log_slow_writes",
        "counter",
        "Log writes slow enough (a throttled page cache) to keep small appends off the event loop for a while"
        " (broker.log.inline_writes says how slow and how long).",
    ),
}

# KIP-932's acknowledge types by their wire value (0, a gap, is not an acknowledgement of a record).
ACK_TYPES: Final = {1: "accept", 2: "release", 3: "reject", 4: "renew"}
