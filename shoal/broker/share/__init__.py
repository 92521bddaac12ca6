"""Share partitions on the partition leader (KIP-932): the in-flight state of each
(group, topic, partition) (``share_partition`` with its ordered map ``in_flight`` and the
rule ``fetched``, sans-IO), its asyncio shell that reads the log and persists every change
(``partition_manager``), share sessions (``session``) and dead-lettering (``dead_letter``).
Membership is in ``groups.share``; durable state in ``share_coordinator``.
"""
