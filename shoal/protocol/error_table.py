"""Kafka's protocol error codes, kept as one table of plain data.

Why a table: every response in the Kafka protocol carries int16 error codes,
and three parts of Shoal care about them for different reasons. The broker
picks a code to send, the client decides from a code whether to retry, and
logs and tests want a readable name. Writing the codes down once, as rows of
(name, code, retriable, message), keeps those three users from drifting apart
and makes the whole list easy to diff against upstream when Kafka adds codes.

Everything else is derived from the rows. Import it all from ``errors``, which
re-exports this module and builds ``ErrorCode``; type checkers read that module's
generated stub, ``errors.pyi``, which lists the members (this module stays apart
so that a checker still reads its body: a stub hides the module it describes).

* ``KafkaError``: an immutable record for one row.
* ``ErrorCode``: an ``IntEnum`` built from the rows, so code reads
  ``ErrorCode.NOT_COORDINATOR`` instead of a bare ``16`` and the member still
  compares equal to the integer on the wire.
* ``error_for(code)`` and ``by_name(name)``: lookups. ``error_for`` never
  raises, because a peer running a newer Kafka may send a code we have not
  heard of; it hands back a synthetic, non-retriable ``UNKNOWN`` entry that
  keeps the original number.

No exception lives here: a code means "the broker answered X" to the client
(``client.core.errors.BrokerResponseError``) and "answer X" to the broker
(``broker.errors.ErrorAnswer``), so each side names its own.

The codes, names and retriable flags are Kafka's (as of Apache Kafka 4.2,
whose newest code is 133). The messages are Shoal's own short descriptions;
a broker may override them per response through a response's error_message
field, where the API has one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ERRORS",
    "UNKNOWN_NAME",
    "KafkaError",
    "by_name",
    "error_for",
]

# (name, code, retriable, message). Order follows the code; names and
# retriable flags match Apache Kafka's Errors enum.
_TABLE: Final[tuple[tuple[str, int, bool, str], ...]] = (
    ("UNKNOWN_SERVER_ERROR", -1, False, "The broker hit an unexpected failure while handling the request."),
    ("NONE", 0, False, "Success: no error occurred."),
    ("OFFSET_OUT_OF_RANGE", 1, False, "The requested offset lies outside the partition's available log."),
    (
        "CORRUPT_MESSAGE",
        2,
        True,
        ("A record failed validation: bad CRC, bad size, a null key on a compacted topic, or other corruption."),
    ),
    ("UNKNOWN_TOPIC_OR_PARTITION", 3, True, "This broker does not host the requested topic-partition."),
    ("INVALID_FETCH_SIZE", 4, False, "The fetch size in the request is not valid."),
    (
        "LEADER_NOT_AVAILABLE",
        5,
        True,
        ("The partition has no leader right now, usually because an election is under way."),
    ),
    (
        "NOT_LEADER_OR_FOLLOWER",
        6,
        True,
        (
            "This broker is not the partition's leader (or, for requests any replica "
            "may serve, not one of its replicas)."
        ),
    ),
    ("REQUEST_TIMED_OUT", 7, True, "The request did not complete before its timeout expired."),
    ("BROKER_NOT_AVAILABLE", 8, False, "The target broker is not available."),
    ("REPLICA_NOT_AVAILABLE", 9, True, "No replica of the requested partition is available here."),
    ("MESSAGE_TOO_LARGE", 10, False, "A record is bigger than the largest message the broker accepts."),
    ("STALE_CONTROLLER_EPOCH", 11, False, "The request came from a controller that has since been replaced."),
    (
        "OFFSET_METADATA_TOO_LARGE",
        12,
        False,
        "The metadata string attached to the offset commit is too long.",
    ),
    ("NETWORK_EXCEPTION", 13, True, "The connection closed before a response arrived."),
    (
        "COORDINATOR_LOAD_IN_PROGRESS",
        14,
        True,
        ("The coordinator is still loading its state and cannot serve requests yet."),
    ),
    ("COORDINATOR_NOT_AVAILABLE", 15, True, "No coordinator is available at the moment."),
    ("NOT_COORDINATOR", 16, True, "This broker is not the coordinator for the given key."),
    ("INVALID_TOPIC_EXCEPTION", 17, False, "The topic named in the request is not valid for this operation."),
    (
        "RECORD_LIST_TOO_LARGE",
        18,
        False,
        "A record batch is bigger than the broker's configured log segment size.",
    ),
    ("NOT_ENOUGH_REPLICAS", 19, True, "The write was refused because too few replicas are in sync."),
    (
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        20,
        True,
        ("The write reached the log, but fewer in-sync replicas than required hold it."),
    ),
    ("INVALID_REQUIRED_ACKS", 21, False, "The produce request asked for an acks value that is not allowed."),
    ("ILLEGAL_GENERATION", 22, False, "The group generation id in the request is not the current one."),
    (
        "INCONSISTENT_GROUP_PROTOCOL",
        23,
        False,
        ("The member's protocol type or protocol list does not fit the rest of the group, or is empty."),
    ),
    ("INVALID_GROUP_ID", 24, False, "The group id is not valid."),
    ("UNKNOWN_MEMBER_ID", 25, False, "The coordinator does not recognise this member id."),
    (
        "INVALID_SESSION_TIMEOUT",
        26,
        False,
        (
            "The session timeout falls outside the broker's allowed range "
            "(group.min.session.timeout.ms to group.max.session.timeout.ms)."
        ),
    ),
    ("REBALANCE_IN_PROGRESS", 27, False, "The group is rebalancing; the member has to rejoin."),
    ("INVALID_COMMIT_OFFSET_SIZE", 28, False, "The offset commit data has an invalid size."),
    ("TOPIC_AUTHORIZATION_FAILED", 29, False, "The principal may not perform this operation on the topic."),
    ("GROUP_AUTHORIZATION_FAILED", 30, False, "The principal may not perform this operation on the group."),
    (
        "CLUSTER_AUTHORIZATION_FAILED",
        31,
        False,
        "The principal may not perform this cluster-level operation.",
    ),
    ("INVALID_TIMESTAMP", 32, False, "A record timestamp is outside the range the broker accepts."),
    ("UNSUPPORTED_SASL_MECHANISM", 33, False, "The broker does not offer the requested SASL mechanism."),
    (
        "ILLEGAL_SASL_STATE",
        34,
        False,
        "This request is not allowed at the current step of the SASL exchange.",
    ),
    ("UNSUPPORTED_VERSION", 35, False, "The broker does not support this version of the API."),
    ("TOPIC_ALREADY_EXISTS", 36, False, "A topic with this name exists already."),
    ("INVALID_PARTITIONS", 37, False, "The requested partition count is not valid."),
    (
        "INVALID_REPLICATION_FACTOR",
        38,
        False,
        ("The replication factor is not valid: below 1, or more than the available brokers."),
    ),
    ("INVALID_REPLICA_ASSIGNMENT", 39, False, "The explicit replica assignment is not valid."),
    ("INVALID_CONFIG", 40, False, "The supplied configuration is not valid."),
    ("NOT_CONTROLLER", 41, True, "This node is not the active controller."),
    (
        "INVALID_REQUEST",
        42,
        False,
        ("The request is malformed or not valid for this broker; the broker log has details."),
    ),
    (
        "UNSUPPORTED_FOR_MESSAGE_FORMAT",
        43,
        False,
        "The request needs a newer message format than the broker is using.",
    ),
    ("POLICY_VIOLATION", 44, False, "The request breaks a policy configured on the broker."),
    (
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
        45,
        False,
        ("The producer sequence number skips ahead of the one the broker expected."),
    ),
    (
        "DUPLICATE_SEQUENCE_NUMBER",
        46,
        False,
        "The broker already has a batch with this producer sequence number.",
    ),
    ("INVALID_PRODUCER_EPOCH", 47, False, "The producer's epoch is older than the current one."),
    (
        "INVALID_TXN_STATE",
        48,
        False,
        ("The transactional operation is not allowed in the transaction's current state."),
    ),
    (
        "INVALID_PRODUCER_ID_MAPPING",
        49,
        False,
        ("The producer id is not the one currently assigned to this transactional id."),
    ),
    (
        "INVALID_TRANSACTION_TIMEOUT",
        50,
        False,
        ("The transaction timeout exceeds the broker's maximum (transaction.max.timeout.ms)."),
    ),
    ("CONCURRENT_TRANSACTIONS", 51, True, "Another operation on the same transaction is still in progress."),
    (
        "TRANSACTION_COORDINATOR_FENCED",
        52,
        False,
        ("The transaction coordinator that sent this is no longer the current one for the producer."),
    ),
    ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 53, False, "The principal may not use this transactional id."),
    ("SECURITY_DISABLED", 54, False, "Security features are turned off on this broker."),
    (
        "OPERATION_NOT_ATTEMPTED",
        55,
        False,
        ("The broker skipped this operation, typically because another part of a batched request failed first."),
    ),
    ("KAFKA_STORAGE_ERROR", 56, True, "The broker could not access a log file on disk."),
    (
        "LOG_DIR_NOT_FOUND",
        57,
        False,
        "The requested log directory is not part of the broker's configuration.",
    ),
    ("SASL_AUTHENTICATION_FAILED", 58, False, "SASL authentication did not succeed."),
    (
        "UNKNOWN_PRODUCER_ID",
        59,
        False,
        ("The broker holds no state for this producer id, for instance because retention removed all of its records."),
    ),
    ("REASSIGNMENT_IN_PROGRESS", 60, False, "A partition reassignment is already running."),
    ("DELEGATION_TOKEN_AUTH_DISABLED", 61, False, "Delegation tokens are not enabled."),
    ("DELEGATION_TOKEN_NOT_FOUND", 62, False, "The broker has no such delegation token."),
    (
        "DELEGATION_TOKEN_OWNER_MISMATCH",
        63,
        False,
        "The principal is neither the token's owner nor a permitted renewer.",
    ),
    (
        "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
        64,
        False,
        ("Delegation token requests are refused on plaintext, one-way TLS and token-authenticated connections."),
    ),
    (
        "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
        65,
        False,
        "The principal may not perform this delegation token operation.",
    ),
    ("DELEGATION_TOKEN_EXPIRED", 66, False, "The delegation token has expired."),
    ("INVALID_PRINCIPAL_TYPE", 67, False, "This principal type is not supported."),
    ("NON_EMPTY_GROUP", 68, False, "The group still has members."),
    ("GROUP_ID_NOT_FOUND", 69, False, "No group with this id exists."),
    ("FETCH_SESSION_ID_NOT_FOUND", 70, True, "The broker has no fetch session with this id."),
    ("INVALID_FETCH_SESSION_EPOCH", 71, True, "The fetch session epoch does not match the broker's."),
    (
        "LISTENER_NOT_FOUND",
        72,
        True,
        ("The leader has no listener matching the one this metadata request arrived on."),
    ),
    ("TOPIC_DELETION_DISABLED", 73, False, "Deleting topics is disabled on this cluster."),
    ("FENCED_LEADER_EPOCH", 74, True, "The request's leader epoch is older than the broker's."),
    ("UNKNOWN_LEADER_EPOCH", 75, True, "The request's leader epoch is newer than the broker's."),
    ("UNSUPPORTED_COMPRESSION_TYPE", 76, False, "The client cannot handle the partition's compression type."),
    ("STALE_BROKER_EPOCH", 77, False, "The broker epoch in the request is out of date."),
    (
        "OFFSET_NOT_AVAILABLE",
        78,
        True,
        ("Offsets are withheld until the new leader's high watermark catches up after an election."),
    ),
    ("MEMBER_ID_REQUIRED", 79, False, "The member must obtain a member id before it can join the group."),
    ("PREFERRED_LEADER_NOT_AVAILABLE", 80, True, "The preferred leader replica is not available."),
    ("GROUP_MAX_SIZE_REACHED", 81, False, "The group already has its maximum number of members."),
    (
        "FENCED_INSTANCE_ID",
        82,
        False,
        ("Another member registered with the same group.instance.id, so this static member was fenced."),
    ),
    ("ELIGIBLE_LEADERS_NOT_AVAILABLE", 83, True, "No eligible leader is available for the partition."),
    ("ELECTION_NOT_NEEDED", 84, True, "The partition does not need a leader election."),
    ("NO_REASSIGNMENT_IN_PROGRESS", 85, False, "There is no partition reassignment to act on."),
    (
        "GROUP_SUBSCRIBED_TO_TOPIC",
        86,
        False,
        "Offsets cannot be deleted for a topic the group is still subscribed to.",
    ),
    ("INVALID_RECORD", 87, False, "The broker rejected a record that failed validation."),
    ("UNSTABLE_OFFSET_COMMIT", 88, True, "Pending transactional offsets have to be resolved first."),
    ("THROTTLING_QUOTA_EXCEEDED", 89, True, "The request went over a throttling quota."),
    ("PRODUCER_FENCED", 90, False, "A newer producer with the same transactional id has fenced this one."),
    ("RESOURCE_NOT_FOUND", 91, False, "The request refers to a resource that does not exist."),
    ("DUPLICATE_RESOURCE", 92, False, "The request refers to the same resource more than once."),
    ("UNACCEPTABLE_CREDENTIAL", 93, False, "The requested credential does not meet the acceptance criteria."),
    (
        "INCONSISTENT_VOTER_SET",
        94,
        False,
        ("The sender or receiver of a voter-only request is not an expected voter."),
    ),
    ("INVALID_UPDATE_VERSION", 95, False, "The update version is not valid."),
    (
        "FEATURE_UPDATE_FAILED",
        96,
        False,
        ("Finalized features could not be updated because of an unexpected server error."),
    ),
    (
        "PRINCIPAL_DESERIALIZATION_FAILURE",
        97,
        False,
        ("The principal of a forwarded request could not be deserialized; check the cluster's security setup."),
    ),
    ("SNAPSHOT_NOT_FOUND", 98, False, "The requested snapshot does not exist."),
    (
        "POSITION_OUT_OF_RANGE",
        99,
        False,
        "The requested position is negative or beyond the end of the snapshot.",
    ),
    ("UNKNOWN_TOPIC_ID", 100, True, "This broker hosts no topic with this id."),
    ("DUPLICATE_BROKER_REGISTRATION", 101, False, "Another broker has already registered with this id."),
    ("BROKER_ID_NOT_REGISTERED", 102, False, "No broker with this id is registered."),
    (
        "INCONSISTENT_TOPIC_ID",
        103,
        True,
        "The topic id in the request differs from the one stored with the log.",
    ),
    ("INCONSISTENT_CLUSTER_ID", 104, False, "The cluster id in the request differs from the server's."),
    ("TRANSACTIONAL_ID_NOT_FOUND", 105, False, "No transaction state exists for this transactional id."),
    ("FETCH_SESSION_TOPIC_ID_ERROR", 106, True, "The fetch session used topic ids inconsistently."),
    ("INELIGIBLE_REPLICA", 107, False, "The proposed ISR includes a replica that is not eligible."),
    ("NEW_LEADER_ELECTED", 108, False, "The partition state was updated, but leadership has since moved."),
    ("OFFSET_MOVED_TO_TIERED_STORAGE", 109, False, "The requested offset now lives in tiered storage."),
    (
        "FENCED_MEMBER_EPOCH",
        110,
        False,
        ("The coordinator fenced this member epoch; the member must give up its partitions and rejoin."),
    ),
    (
        "UNRELEASED_INSTANCE_ID",
        111,
        False,
        "Another member still holds this instance id and has to leave first.",
    ),
    (
        "UNSUPPORTED_ASSIGNOR",
        112,
        False,
        "The group does not support this assignor or assignor version range.",
    ),
    (
        "STALE_MEMBER_EPOCH",
        113,
        False,
        ("The member epoch is outdated; retry once a heartbeat returns the current epoch."),
    ),
    ("MISMATCHED_ENDPOINT_TYPE", 114, False, "The request reached an endpoint of the wrong kind."),
    ("UNSUPPORTED_ENDPOINT_TYPE", 115, False, "This kind of endpoint is not supported yet."),
    ("UNKNOWN_CONTROLLER_ID", 116, False, "No controller with this id is known."),
    (
        "UNKNOWN_SUBSCRIPTION_ID",
        117,
        False,
        "The telemetry push used an unknown or outdated subscription id.",
    ),
    ("TELEMETRY_TOO_LARGE", 118, False, "The telemetry push is bigger than the broker accepts."),
    ("INVALID_REGISTRATION", 119, False, "The controller considers this broker registration invalid."),
    (
        "TRANSACTION_ABORTABLE",
        120,
        False,
        ("The transaction hit an error; abort it to keep using this transactional id."),
    ),
    (
        "INVALID_RECORD_STATE",
        121,
        False,
        ("The record is in the wrong state, so its delivery acknowledgement failed."),
    ),
    ("SHARE_SESSION_NOT_FOUND", 122, True, "The broker has no such share session."),
    ("INVALID_SHARE_SESSION_EPOCH", 123, True, "The share session epoch does not match the broker's."),
    (
        "FENCED_STATE_EPOCH",
        124,
        False,
        ("The share coordinator refused the request because the share-group state epoch differs."),
    ),
    ("INVALID_VOTER_KEY", 125, False, "The voter key does not match the receiving replica."),
    ("DUPLICATE_VOTER", 126, False, "This voter is already in the voter set."),
    ("VOTER_NOT_FOUND", 127, False, "This voter is not in the voter set."),
    ("INVALID_REGULAR_EXPRESSION", 128, False, "The regular expression cannot be used."),
    ("REBOOTSTRAP_REQUIRED", 129, False, "The client's metadata is too stale; it has to rebootstrap."),
    ("STREAMS_INVALID_TOPOLOGY", 130, False, "The Streams topology supplied is not valid."),
    ("STREAMS_INVALID_TOPOLOGY_EPOCH", 131, False, "The Streams topology epoch supplied is not valid."),
    ("STREAMS_TOPOLOGY_FENCED", 132, False, "The Streams topology epoch supplied is out of date."),
    (
        "SHARE_SESSION_LIMIT_REACHED",
        133,
        True,
        "No more share sessions can be opened; the limit has been reached.",
    ),
)


@dataclass(frozen=True, slots=True)
class KafkaError:
    """One Kafka error code: its name, number, retry advice and description."""

    name: str
    code: int
    retriable: bool
    message: str

    @property
    def is_error(self) -> bool:
        """False only for NONE (code 0)."""
        return self.code != 0

    @property
    def is_known(self) -> bool:
        """False for the synthetic entries `error_for` makes for unknown codes."""
        return _BY_CODE.get(self.code) == self

    def __str__(self) -> str:
        return f"{self.name} ({self.code}): {self.message}"


ERRORS: Final[tuple[KafkaError, ...]] = tuple(KafkaError(*row) for row in _TABLE)
"""Every known error, in code order."""

_BY_CODE: Final[dict[int, KafkaError]] = {e.code: e for e in ERRORS}
_BY_NAME: Final[dict[str, KafkaError]] = {e.name: e for e in ERRORS}

# Fail at import, not at some later lookup, if an edit to the table ever
# reuses a code or a name.
if len(_BY_CODE) != len(ERRORS) or len(_BY_NAME) != len(ERRORS):
    raise RuntimeError("protocol.error_table: duplicate code or name in _TABLE")

UNKNOWN_NAME: Final = "UNKNOWN"
"""Name given to the synthetic entry for a code missing from the table."""


class _ErrorCodeBase(enum.IntEnum):
    """Behaviour shared by the members of `errors.ErrorCode` (which has no class
    body of its own, because its members are generated from `_TABLE`)."""

    @property
    def error(self) -> KafkaError:
        """The full table entry for this code."""
        return _BY_CODE[self.value]

    @property
    def retriable(self) -> bool:
        return _BY_CODE[self.value].retriable

    @property
    def message(self) -> str:
        return _BY_CODE[self.value].message


def error_for(code: int) -> KafkaError:
    """Return the entry for `code`; never raises.

    A code missing from the table (for instance one added by a Kafka release
    newer than this module) yields a fresh, non-retriable entry named
    ``UNKNOWN`` that keeps the original number, so callers can still log it
    and treat it as a hard failure, which is what Kafka's own client does.
    """
    known = _BY_CODE.get(code)
    if known is not None:
        return known
    return KafkaError(
        UNKNOWN_NAME,
        int(code),
        False,
        f"Error code {code} is not one Shoal knows about.",
    )


def by_name(name: str) -> KafkaError:
    """Return the entry called `name` (Kafka's UPPER_SNAKE spelling; case is
    ignored, so kio's lower-case member names work too).

    Raises KeyError for a name not in the table: names come from our own code,
    so a miss there is a bug rather than something from the wire.
    """
    try:
        return _BY_NAME[name.upper()]
    except KeyError:
        raise KeyError(f"no Kafka error named {name!r}") from None
