"""Kafka 4's request-version floor (KIP-896), per API key: what parity mode serves.

Shoal's specs reach back to the versions Kafka 3.9 served, so old clients keep
working. ``shoal.legacy.api.versions.enable=false`` restores Kafka 4.2's table
exactly: every API is served from ``KAFKA4_MIN_VERSIONS`` up, and ApiVersions
advertises ``KAFKA4_ADVERTISED_MIN`` where Kafka 4 advertises less than it
accepts (Produce: librdkafka refuses to compress unless Produce v0 is listed,
KAFKA-18659, so Kafka 4 lists v0 and still refuses v0-v2).

One entry per API key Shoal has a spec for (a test holds the table to the
specs); the values are the ``validVersions`` floors of Kafka 4.2's JSON specs.
"""

from __future__ import annotations

from typing import Final

__all__ = ["KAFKA4_ADVERTISED_MIN", "KAFKA4_MIN_VERSIONS"]

KAFKA4_MIN_VERSIONS: Final[dict[int, int]] = {
    0: 3,  # Produce
    1: 4,  # Fetch
    2: 1,  # ListOffsets
    3: 0,  # Metadata
    8: 2,  # OffsetCommit
    9: 1,  # OffsetFetch
    10: 0,  # FindCoordinator
    11: 0,  # JoinGroup
    12: 0,  # Heartbeat
    13: 0,  # LeaveGroup
    14: 0,  # SyncGroup
    15: 0,  # DescribeGroups
    16: 0,  # ListGroups
    17: 0,  # SaslHandshake
    18: 0,  # ApiVersions
    19: 2,  # CreateTopics
    20: 1,  # DeleteTopics
    21: 0,  # DeleteRecords
    22: 0,  # InitProducerId
    29: 1,  # DescribeAcls
    30: 1,  # CreateAcls
    31: 1,  # DeleteAcls
    32: 1,  # DescribeConfigs
    36: 0,  # SaslAuthenticate
    37: 0,  # CreatePartitions
    42: 0,  # DeleteGroups
    44: 0,  # IncrementalAlterConfigs
    47: 0,  # OffsetDelete
    50: 0,  # DescribeUserScramCredentials
    51: 0,  # AlterUserScramCredentials
    60: 0,  # DescribeCluster
    68: 0,  # ConsumerGroupHeartbeat
    69: 0,  # ConsumerGroupDescribe
    76: 1,  # ShareGroupHeartbeat
    77: 1,  # ShareGroupDescribe
    78: 1,  # ShareFetch
    79: 1,  # ShareAcknowledge
    83: 0,  # InitializeShareGroupState
    84: 0,  # ReadShareGroupState
    85: 0,  # WriteShareGroupState
    86: 0,  # DeleteShareGroupState
    87: 0,  # ReadShareGroupStateSummary
    90: 0,  # DescribeShareGroupOffsets
    91: 0,  # AlterShareGroupOffsets
    92: 0,  # DeleteShareGroupOffsets
}

# Where Kafka 4's ApiVersions answer lists a lower floor than it accepts (KAFKA-18659).
KAFKA4_ADVERTISED_MIN: Final[dict[int, int]] = {0: 0}  # Produce
