"""Tests for protocol.errors (the table itself, the lookups) and the two exceptions built on it:
the client's BrokerResponseError ("the broker answered X") and the broker's ErrorAnswer ("answer X")."""

from __future__ import annotations

import pickle

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode

from shoal.broker.errors import ErrorAnswer
from shoal.client.core.errors import BrokerResponseError, KafkaClientError, KafkaErrorResponse
from shoal.protocol import errors as protocol_errors
from shoal.protocol.errors import (
    ERRORS,
    UNKNOWN_NAME,
    ErrorCode,
    KafkaError,
    by_name,
    error_for,
)

KIO_CODES = list(KioErrorCode)


# --- the table against an independent source -------------------------------


@pytest.mark.parametrize("kio", KIO_CODES, ids=lambda k: k.name)
def test_matches_kio(kio: KioErrorCode) -> None:
    """kio generates its enum from Kafka's published error list, so every code
    it knows must be in our table with the same name and retry flag."""
    ours = error_for(int(kio))
    assert ours.is_known, f"code {int(kio)} ({kio.name}) missing from our table"
    assert ours.name == kio.name.upper()
    assert ours.retriable is kio.retriable


def test_kio_is_covered_and_nothing_extra_is_invented() -> None:
    kio = {int(k): (k.name.upper(), k.retriable) for k in KIO_CODES}
    ours = {e.code: (e.name, e.retriable) for e in ERRORS}
    assert set(kio) <= set(ours)
    # Anything beyond kio must be newer than kio, i.e. above its highest code.
    extra = set(ours) - set(kio)
    assert all(code > max(kio) for code in extra), sorted(extra)


# --- shape of the table ------------------------------------------------------


def test_names_unique() -> None:
    names = [e.name for e in ERRORS]
    assert len(names) == len(set(names))


def test_codes_unique() -> None:
    codes = [e.code for e in ERRORS]
    assert len(codes) == len(set(codes))


def test_codes_in_order_and_contiguous() -> None:
    codes = [e.code for e in ERRORS]
    assert codes == list(range(-1, codes[-1] + 1))


def test_names_are_upper_snake_and_fields_typed() -> None:
    for e in ERRORS:
        assert e.name == e.name.upper() and " " not in e.name
        assert type(e.code) is int and -(2**15) <= e.code < 2**15
        assert type(e.retriable) is bool
        assert e.message.strip(), e.name


def test_newest_share_and_streams_codes() -> None:
    expected = {
        "INVALID_RECORD_STATE": (121, False),
        "SHARE_SESSION_NOT_FOUND": (122, True),
        "INVALID_SHARE_SESSION_EPOCH": (123, True),
        "FENCED_STATE_EPOCH": (124, False),
        "INVALID_VOTER_KEY": (125, False),
        "DUPLICATE_VOTER": (126, False),
        "VOTER_NOT_FOUND": (127, False),
        "INVALID_REGULAR_EXPRESSION": (128, False),
        "REBOOTSTRAP_REQUIRED": (129, False),
        "STREAMS_INVALID_TOPOLOGY": (130, False),
        "STREAMS_INVALID_TOPOLOGY_EPOCH": (131, False),
        "STREAMS_TOPOLOGY_FENCED": (132, False),
        "SHARE_SESSION_LIMIT_REACHED": (133, True),
    }
    for name, (code, retriable) in expected.items():
        e = by_name(name)
        assert (e.code, e.retriable) == (code, retriable), name


# --- KafkaError --------------------------------------------------------------


def test_kafka_error_is_frozen_and_slotted() -> None:
    e = error_for(16)
    with pytest.raises(AttributeError):
        e.code = 17  # type: ignore[misc]
    assert not hasattr(e, "__dict__")


def test_is_error_only_false_for_none() -> None:
    assert not error_for(0).is_error
    assert all(e.is_error for e in ERRORS if e.code != 0)


# --- ErrorCode enum ----------------------------------------------------------


def test_enum_derived_from_table() -> None:
    assert [(m.name, int(m)) for m in ErrorCode] == [(e.name, e.code) for e in ERRORS]


def test_enum_members_compare_as_ints() -> None:
    assert ErrorCode.NOT_COORDINATOR == 16
    assert ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode.NONE == 0
    assert ErrorCode(133) is ErrorCode.SHARE_SESSION_LIMIT_REACHED
    assert isinstance(ErrorCode.NOT_COORDINATOR, int)


def test_enum_member_exposes_table_entry() -> None:
    m = ErrorCode.NOT_COORDINATOR
    assert m.error is by_name("NOT_COORDINATOR")
    assert m.retriable is True
    assert m.message == m.error.message
    assert ErrorCode.OFFSET_OUT_OF_RANGE.retriable is False


def test_enum_pickles() -> None:
    m = ErrorCode.REBALANCE_IN_PROGRESS
    assert pickle.loads(pickle.dumps(m)) is m


# --- lookups -----------------------------------------------------------------


def test_error_for_known_codes() -> None:
    for e in ERRORS:
        assert error_for(e.code) is e
    assert error_for(ErrorCode.NOT_CONTROLLER).name == "NOT_CONTROLLER"


@pytest.mark.parametrize("code", [134, 999, -2, 32767, -32768])
def test_error_for_unknown_code_is_synthetic(code: int) -> None:
    e = error_for(code)
    assert e.name == UNKNOWN_NAME
    assert e.code == code
    assert e.retriable is False
    assert e.is_error
    assert not e.is_known
    assert str(code) in e.message


def test_by_name() -> None:
    assert by_name("NOT_COORDINATOR").code == 16
    assert by_name("not_coordinator") is by_name("NOT_COORDINATOR")
    with pytest.raises(KeyError):
        by_name("NOT_A_REAL_ERROR")


# --- BrokerResponseError (client) --------------------------------------------------------


def test_exception_from_entry_and_from_code() -> None:
    a = BrokerResponseError(by_name("NOT_COORDINATOR"))
    b = BrokerResponseError(16)
    assert a.error is b.error
    assert a.retriable is True
    assert (a.code, a.name) == (16, "NOT_COORDINATOR")
    assert "NOT_COORDINATOR (16)" in str(a)
    assert isinstance(a, Exception)


def test_exception_not_retriable_and_detail() -> None:
    exc = BrokerResponseError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "denied for user x")
    assert exc.retriable is False
    assert exc.detail == "denied for user x"
    assert str(exc).endswith("denied for user x")


def test_exception_unknown_code() -> None:
    exc = BrokerResponseError(5000)
    assert exc.name == UNKNOWN_NAME
    assert exc.code == 5000
    assert not exc.retriable


def test_exception_pickles() -> None:
    exc = BrokerResponseError(22, "generation 3 is stale")
    back = pickle.loads(pickle.dumps(exc))
    assert isinstance(back, BrokerResponseError)
    assert back.error == exc.error
    assert back.detail == exc.detail
    assert str(back) == str(exc)


def test_client_keeps_the_old_name_as_an_alias() -> None:
    assert KafkaErrorResponse is BrokerResponseError
    assert issubclass(BrokerResponseError, KafkaClientError)
    assert not hasattr(protocol_errors, "KafkaErrorResponse")  # one meaning per name: not in the shared layer


# --- ErrorAnswer (broker) ---------------------------------------------------------


def test_error_answer_carries_code_and_message() -> None:
    exc = ErrorAnswer(ErrorCode.INVALID_CONFIG, "segment.ms: must be at least 1")
    assert (exc.code, exc.name, exc.message) == (40, "INVALID_CONFIG", "segment.ms: must be at least 1")
    assert str(exc) == "INVALID_CONFIG (40): segment.ms: must be at least 1"
    assert not isinstance(exc, BrokerResponseError)


def test_error_answer_without_message_reads_the_table() -> None:
    exc = ErrorAnswer(ErrorCode.NOT_COORDINATOR)
    assert exc.message is None  # the response's error_message stays null
    assert str(exc) == f"NOT_COORDINATOR (16): {by_name('NOT_COORDINATOR').message}"
    assert ErrorAnswer(5000).name == UNKNOWN_NAME


def test_error_answer_pickles() -> None:
    back = pickle.loads(pickle.dumps(ErrorAnswer(ErrorCode.NON_EMPTY_GROUP, "Share group g is not empty.")))
    assert isinstance(back, ErrorAnswer)
    assert (back.code, back.message) == (ErrorCode.NON_EMPTY_GROUP, "Share group g is not empty.")


def test_table_entries_are_kafka_errors() -> None:
    assert all(isinstance(e, KafkaError) for e in ERRORS)
