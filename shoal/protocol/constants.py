"""Kafka's enumerated wire values: the one place each is written down.

Kafka's JSON specs give these fields a type (int8, int16, int64) but no
members; the members live in Kafka's Java classes and, in our specs, only in
the fields' "about" text. A broker and a client that each spelled them out
would drift apart silently, so every code here is declared once, named after
the Kafka class it mirrors, and imported by the broker, the client, the tests
and the benchmarks (``tests/checks/test_wire_constants.py`` fails when one of
them is assigned a literal anywhere else, and checks the values against the
specs' text and against other Kafka implementations).

The record-batch header layout and its attribute bits belong to
``protocol.records``; ``ErrorCode`` to ``protocol.errors``.

The share-group codes are also exported as plain ``int`` names (``ACCEPT``,
``ARCHIVED``, ...) for the hot paths that compare and index with them
millions of times: the same values, read from the enums below.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "ACCEPT",
    "ACKNOWLEDGED",
    "ACQUIRED",
    "ARCHIVED",
    "ARCHIVING",
    "AVAILABLE",
    "GAP",
    "REJECT",
    "RELEASE",
    "RENEW",
    "AcknowledgeType",
    "AclOperation",
    "AclPatternType",
    "AclPermissionType",
    "AclResourceType",
    "AlterConfigOpType",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigType",
    "CoordinatorType",
    "IsolationLevel",
    "ListOffsetsTimestamp",
    "RecordState",
    "ShareAcquireMode",
]


# --- share groups (KIP-932) --------------------------------------------------------


class AcknowledgeType(IntEnum):
    """ShareFetch / ShareAcknowledge ``AcknowledgeTypes``: Kafka's
    ``org.apache.kafka.clients.consumer.AcknowledgeType`` (4.2, with RENEW), plus
    the wire-only GAP, a hole in the offsets that the broker archives."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class RecordState(IntEnum):
    """Delivery state of a record of a share-partition: Kafka's share-partition
    ``RecordState``. ``DeliveryState`` in ``__share_group_state`` and the share-state
    RPCs holds every member but ACQUIRED, which lives on the leader only."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3  # KIP-1191: on its way to the dead-letter topic, then ARCHIVED
    ARCHIVED = 4


class ShareAcquireMode(IntEnum):
    """ShareFetch ``ShareAcquireMode`` (v2+, KIP-1206): whole batches, or exactly
    ``MaxRecords`` records."""

    BATCH_OPTIMIZED = 0
    RECORD_LIMIT = 1


GAP = int(AcknowledgeType.GAP)
ACCEPT = int(AcknowledgeType.ACCEPT)
RELEASE = int(AcknowledgeType.RELEASE)
REJECT = int(AcknowledgeType.REJECT)
RENEW = int(AcknowledgeType.RENEW)

AVAILABLE = int(RecordState.AVAILABLE)
ACQUIRED = int(RecordState.ACQUIRED)
ACKNOWLEDGED = int(RecordState.ACKNOWLEDGED)
ARCHIVING = int(RecordState.ARCHIVING)
ARCHIVED = int(RecordState.ARCHIVED)


# --- fetching and offsets --------------------------------------------------------------


class IsolationLevel(IntEnum):
    """Fetch / ListOffsets ``IsolationLevel``: Kafka's ``org.apache.kafka.common.IsolationLevel``."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1

    @classmethod
    def of_setting(cls, value: str) -> IsolationLevel:
        """The level an ``isolation.level`` setting names: "read_committed", or else "read_uncommitted"."""
        return cls.READ_COMMITTED if value == "read_committed" else cls.READ_UNCOMMITTED


class ListOffsetsTimestamp(IntEnum):
    """ListOffsets ``Timestamp`` values that name an offset instead of a time: the
    ``*_TIMESTAMP`` constants of Kafka's ``ListOffsetsRequest``. Any value >= 0 is
    a timestamp in milliseconds."""

    LATEST = -1
    EARLIEST = -2
    MAX_TIMESTAMP = -3
    EARLIEST_LOCAL = -4
    LATEST_TIERED = -5
    EARLIEST_PENDING_UPLOAD = -6


class CoordinatorType(IntEnum):
    """FindCoordinator ``KeyType``: Kafka's ``FindCoordinatorRequest.CoordinatorType``."""

    GROUP = 0
    TRANSACTION = 1
    SHARE = 2


# --- configs ---------------------------------------------------------------------------


class ConfigResourceType(IntEnum):
    """DescribeConfigs / IncrementalAlterConfigs ``ResourceType``: Kafka's
    ``org.apache.kafka.common.config.ConfigResource.Type`` (not the ACL resource types)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class AlterConfigOpType(IntEnum):
    """IncrementalAlterConfigs ``ConfigOperation``: Kafka's ``AlterConfigOp.OpType``."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigSource(IntEnum):
    """DescribeConfigs ``ConfigSource``: Kafka's ``DescribeConfigsResponse.ConfigSource``."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8

    @classmethod
    def of(cls, value: int) -> ConfigSource:
        """The member for ``value``, UNKNOWN for a code this table does not know yet."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class ConfigType(IntEnum):
    """DescribeConfigs ``ConfigType`` (v3+): Kafka's ``DescribeConfigsResponse.ConfigType``."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9

    @classmethod
    def of(cls, value: int) -> ConfigType:
        """The member for ``value``, UNKNOWN for a code this table does not know yet."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


# --- ACLs (CreateAcls, DescribeAcls, DeleteAcls; Metadata's authorized-operations bit fields) ----


class AclResourceType(IntEnum):
    """Kafka's ``org.apache.kafka.common.resource.ResourceType`` codes (ANY only in filters)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclPatternType(IntEnum):
    """Kafka's ``org.apache.kafka.common.resource.PatternType``: how an ACL's resource name is
    matched. ANY and MATCH appear only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    """Kafka's ``org.apache.kafka.common.acl.AclOperation``; an authorized-operations field is a
    bit field with bit ``code`` set for each operation allowed."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(IntEnum):
    """Kafka's ``org.apache.kafka.common.acl.AclPermissionType`` (ANY only in filters)."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3
