"""Kafka's wire constants live in ``shoal/protocol`` only, and hold Kafka's values.

Two kinds of check:

* a scan of every module outside ``shoal/protocol`` (broker, client, test kit,
  tests, benchmarks) for a literal assigned to the name of one of the codes
  ``protocol.constants`` and ``protocol.records`` declare (``ACCEPT = 1``,
  ``GAP, ACCEPT = 0, 1``, an enum member ``ARCHIVED = 4``, ``LOG_OVERHEAD = 12``),
  and for struct formats that spell out the record-batch header by hand. Such
  a copy compiles, passes its own tests and drifts the day one side changes;
  importing the declaration is the only way the scan lets through. The scan
  is shown to catch each kind on a planted violation;
* the declared values against independent statements of Kafka's: the "about"
  text of our JSON specs, kafka-python and confluent-kafka (which both mirror
  the Java classes), and kio's record-batch reader for the header layout.

This module holds its own tables of Kafka's values on purpose (they are the
oracle), so the scan skips it.
"""

from __future__ import annotations

import ast
import io
import re
import struct
from collections.abc import Iterator
from enum import IntEnum
from pathlib import Path

import pytest

from shoal.protocol import constants as C
from shoal.protocol import records as R
from shoal.protocol import spec

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("shoal", "tests", "benchmarks")
EXEMPT = {Path("shoal/protocol"), Path("shoal/schemas"), Path(__file__).resolve().relative_to(ROOT)}

ENUMS: tuple[type[IntEnum], ...] = tuple(
    v for v in vars(C).values() if isinstance(v, type) and issubclass(v, IntEnum) and v.__module__ == C.__name__
)
# Names a copy would be assigned to: every enum member and flat name of protocol.constants, the
# batch layout's names in protocol.records, and the names the old copies went by.
WATCHED = (
    {m.name for e in ENUMS for m in e}
    | {n for n in C.__all__ if n.isupper()}
    | {n for n in R.__all__ if n.isupper() and n.endswith(("_POS", "_SIZE", "OVERHEAD", "MAGIC"))}
    | {"BATCH_OVERHEAD", "ARCHIVED_STATE", "RESOURCE_TOPIC", "RESOURCE_BROKER", "RESOURCE_GROUP"}
    | {"OP_SET", "OP_DELETE", "OP_APPEND", "OP_SUBTRACT", "KEY_GROUP", "KEY_TRANSACTION", "KEY_SHARE"}
)


# -- the scan -----------------------------------------------------------------------------


def _int_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _assigned_literals(target: ast.AST, value: ast.AST | None) -> Iterator[str]:
    """Names in ``target`` bound to an int literal of ``value`` (tuple unpacking included)."""
    if value is None:
        return
    if isinstance(target, ast.Name) and _int_literal(value):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List):
        for t, v in zip(target.elts, value.elts, strict=False):
            yield from _assigned_literals(t, v)


def _format_fields(fmt: str) -> list[tuple[int, str]]:
    """(offset, code) of every value a struct format reads, padding skipped."""
    out, pos = [], 0
    for count, code in re.findall(r"(\d*)([xcbB?hHiIlLqQnNefdspP])", fmt.lstrip("@=<>!")):
        n = int(count) if count else 1
        size = struct.calcsize(">" + code)
        if code == "x":
            pos += n
        elif code in "sp":
            out.append((pos, code))
            pos += n * size
        else:
            for _ in range(n):
                out.append((pos, code))
                pos += size
    return out


def _spells_batch_header(fmt: str) -> bool:
    """Whether a big-endian format reads the batch header's baseOffset, batchLength and magic."""
    if not fmt.startswith((">", "!")):
        return False
    try:
        fields = dict(_format_fields(fmt))
    except struct.error:
        return False
    pos = R.HEADER_POSITIONS
    return (
        fields.get(pos["base_offset"]) == "q"
        and fields.get(pos["magic"]) == "b"
        and fields.get(pos["batch_length"]) == "i"
    )


def violations(source: str, where: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, ast.AnnAssign):
            pairs = [(node.target, node.value)]
        else:
            pairs = []
        for target, value in pairs:
            for name in _assigned_literals(target, value):
                if name in WATCHED:
                    out.append(f"{where}:{node.lineno}: {name} is assigned a literal; import it from shoal.protocol")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "struct"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and _spells_batch_header(node.args[0].value)
        ):
            out.append(
                f"{where}:{node.lineno}: struct format {node.args[0].value!r} spells the batch header out; use protocol.records"
            )
    return out


def _scanned_files() -> Iterator[Path]:
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if not any(rel == e or e in rel.parents for e in EXEMPT):
                yield rel


def test_wire_constants_are_declared_only_in_protocol():
    files = list(_scanned_files())
    assert len(files) > 100 and Path("shoal/broker/share/share_partition.py") in files
    found = [v for rel in files for v in violations((ROOT / rel).read_text(), str(rel))]
    assert found == [], "\n".join(found)


PLANTED = """
import enum, struct
ACCEPT = 1
GAP, RELEASE = 0, 2
LOG_OVERHEAD: int = 12
EARLIEST_PENDING_UPLOAD = -6
class Resource(enum.IntEnum):
    GROUP = 32
def f():
    READ_COMMITTED = 1
_PEEK = struct.Struct(">qi4xb6xi8xq")
head = struct.unpack_from(">qiibIhiqqqhii", b"", 0)
"""

ALLOWED = """
import struct
from shoal.protocol.constants import AcknowledgeType, ConfigResourceType
ACCEPT = AcknowledgeType.ACCEPT
GROUP_ID = 32
PARTITIONS = 3
EARLIEST = {"t": 0}
_TIME_ENTRY = struct.Struct(">qi")
_CHECKPOINT = struct.Struct(">4sqqI")
"""


def test_the_scan_catches_planted_copies():
    found = violations(PLANTED, "planted.py")
    names = [re.search(r": (\S+) is assigned", v).group(1) for v in found if "is assigned" in v]
    assert names == ["ACCEPT", "GAP", "RELEASE", "LOG_OVERHEAD", "EARLIEST_PENDING_UPLOAD", "GROUP", "READ_COMMITTED"]
    assert sum("spells the batch header" in v for v in found) == 2
    assert violations(ALLOWED, "allowed.py") == []


# -- the values against Kafka's ------------------------------------------------------------------


def _fields(message: str) -> Iterator[spec.FieldSpec]:
    """Every field of a spec, nested ones included."""
    stack = list(spec.load(message).struct.fields)
    while stack:
        f = stack.pop()
        yield f
        if f.struct is not None:
            stack.extend(f.struct.fields)


def _about(message: str, name: str) -> str:
    (about,) = {f.about for f in _fields(message) if f.name == name}
    return about


def _numbered(text: str) -> dict[str, int]:
    """``"0 gap, 1 accept, 2 release"`` -> {"GAP": 0, "ACCEPT": 1, "RELEASE": 2}."""
    return {word.upper(): int(n) for n, word in re.findall(r"(-?\d+) (\w+)", text)}


@pytest.mark.parametrize("message", ["ShareFetchRequest", "ShareAcknowledgeRequest"])
def test_acknowledge_types_match_the_specs(message):
    assert _numbered(_about(message, "AcknowledgeTypes")) == {m.name: m.value for m in C.AcknowledgeType}
    assert (C.GAP, C.ACCEPT, C.RELEASE, C.REJECT, C.RENEW) == tuple(C.AcknowledgeType)


def test_acknowledge_types_match_confluent_kafka():
    ck = pytest.importorskip("confluent_kafka")
    for m in ck.AcknowledgeType:  # ACCEPT, RELEASE, REJECT (GAP is wire-only; RENEW newer than it)
        assert C.AcknowledgeType[m.name] == m.value


def _state_fields() -> Iterator[str]:
    """Every DeliveryState field of the specs (share-state RPCs and __share_group_state records)."""
    for path in sorted((ROOT / "shoal/schemas").glob("*.json")):
        for f in _fields(path.stem):
            if f.name == "DeliveryState":
                yield f"{path.stem}: {f.about}"


def test_delivery_states_match_the_specs():
    abouts = list(_state_fields())
    assert len(abouts) >= 3, abouts  # WriteShareGroupState, ShareSnapshotValue, ShareUpdateValue, ...
    persisted = {m.name: m.value for m in C.RecordState if m is not C.RecordState.ACQUIRED}
    for about in abouts:
        assert _numbered(about.split(": ", 1)[1]) == persisted, about
    # ACQUIRED, never persisted, sits between AVAILABLE and ACKNOWLEDGED in Kafka's RecordState
    # (ARCHIVING, 3, is KIP-1191's: on the way to the dead-letter topic)
    assert C.RecordState.ACQUIRED == 1
    assert (C.AVAILABLE, C.ACQUIRED, C.ACKNOWLEDGED, C.ARCHIVING, C.ARCHIVED) == tuple(C.RecordState)


def test_share_acquire_mode_matches_the_spec():
    about = _about("ShareFetchRequest", "ShareAcquireMode")
    assert re.findall(r"(\d+) (\w+)", about) == [("0", "optimises"), ("1", "strictly")]
    assert [m.name for m in C.ShareAcquireMode] == ["BATCH_OPTIMIZED", "RECORD_LIMIT"]
    assert [m.value for m in C.ShareAcquireMode] == [0, 1]


def test_coordinator_types_match_the_spec_and_kafka_python():
    assert _numbered(_about("FindCoordinatorRequest", "KeyType")) == {m.name: m.value for m in C.CoordinatorType}
    from kafka.protocol.metadata.find_coordinator import CoordinatorType

    assert {m.name: m.value for m in CoordinatorType} == {m.name: m.value for m in C.CoordinatorType}


def test_config_types_match_the_spec_and_kafka_python():
    about = _about("DescribeConfigsResponse", "ConfigType")
    named = re.search(r"\((.*)\)", about).group(1).replace(" or ", ", ").split(", ")
    assert [n.upper() for n in named] == [m.name for m in C.ConfigType if m.value > 0]
    assert [m.value for m in C.ConfigType] == list(range(10))
    from kafka.admin._configs import ConfigType

    assert {m.name: m.value for m in ConfigType} == {m.name: m.value for m in C.ConfigType}


def test_alter_config_ops_match_the_spec_and_the_clients():
    about = _about("IncrementalAlterConfigsRequest", "ConfigOperation")
    named = re.search(r": (.*)\.", about).group(1).replace(" or ", ", ").split(", ")
    assert [n.upper() for n in named] == [m.name for m in C.AlterConfigOpType]
    from confluent_kafka.admin import AlterConfigOpType
    from kafka.admin._configs import AlterConfigOp

    for theirs in (AlterConfigOp, AlterConfigOpType):
        assert {m.name: m.value for m in theirs} == {m.name: m.value for m in C.AlterConfigOpType}


def test_config_resource_types_match_kafka_python():
    from kafka.admin._configs import ConfigResourceType

    assert {m.name: m.value for m in ConfigResourceType} == {m.name: m.value for m in C.ConfigResourceType}


def test_config_sources_match_the_clients():
    from confluent_kafka.admin import ConfigSource
    from kafka.admin._configs import ConfigSourceType

    ours = {m.value: m.name for m in C.ConfigSource}
    assert [m.value for m in ConfigSourceType] == sorted(ours)
    for m in ConfigSourceType:  # kafka-python says DYNAMIC_ for the last two, Java does not
        assert m.name.removeprefix("DYNAMIC_") == ours[m.value].removeprefix("DYNAMIC_")
    for m in ConfigSource:
        assert ours[m.value] == m.name.replace("UNKNOWN_CONFIG", "UNKNOWN")
    assert C.ConfigSource.of(99) is C.ConfigSource.UNKNOWN and C.ConfigType.of(99) is C.ConfigType.UNKNOWN


def test_isolation_levels_match_the_clients():
    from confluent_kafka import IsolationLevel as Confluent
    from kafka.protocol.consumer.offsets import IsolationLevel as KafkaPython

    for theirs in (Confluent, KafkaPython):
        assert {m.name: m.value for m in theirs} == {m.name: m.value for m in C.IsolationLevel}
    assert C.IsolationLevel.of_setting("read_committed") is C.IsolationLevel.READ_COMMITTED
    assert C.IsolationLevel.of_setting("read_uncommitted") is C.IsolationLevel.READ_UNCOMMITTED


def test_list_offsets_timestamps_match_the_clients():
    from confluent_kafka.admin import OffsetSpec as Confluent
    from kafka.protocol.consumer.offsets import OffsetSpec as KafkaPython

    ours = {m.name: m.value for m in C.ListOffsetsTimestamp}
    for m in KafkaPython:  # -1 .. -5; EARLIEST_PENDING_UPLOAD (-6) is newer than kafka-python
        assert ours[m.name] == m.value
    for name in ("earliest", "latest", "max_timestamp"):
        assert getattr(Confluent, name)()._value == ours[name.upper()]
    assert ours["EARLIEST_PENDING_UPLOAD"] == -6


# -- the record-batch header against kio's reader ------------------------------------------------


def test_batch_header_layout_matches_kio():
    import datetime

    from kio.records.readers import read_batch
    from kio.records.schema import NewRecordBatch, Record
    from kio.records.writers import write_new_batch
    from kio.static.primitive import i8, i16, i32, i64

    when = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    first = Record(attributes=i8(0), timestamp=when, offset=i64(0), key=b"k", value=b"v", headers=())
    later = Record(
        attributes=i8(0),
        timestamp=when + datetime.timedelta(seconds=5),
        offset=i64(1),
        key=None,
        value=b"w",
        headers=(),
    )
    buf = io.BytesIO()
    new = NewRecordBatch(
        producer_id=i64(0x0102030405060708),
        producer_epoch=i16(0x0A0B),
        partition_leader_epoch=i32(0x0C0D0E0F),
        base_sequence=i32(0x11121314),
        records=(first, later),
        attributes=i16(0x10),
    )
    write_new_batch(buf, new)
    data = bytearray(buf.getvalue())
    struct.pack_into(">q", data, 0, 0x2122232425262728)  # a base offset with distinct bytes
    theirs, size = read_batch(bytes(data), 0)
    assert size == len(data)

    def ours(name: str) -> int:
        code = dict(R.HEADER_FIELDS)[name]
        return struct.unpack_from(">" + code, data, R.HEADER_POSITIONS[name])[0]

    for name, _ in R.HEADER_FIELDS:
        if name == "magic":
            assert ours(name) == R.CURRENT_MAGIC == theirs.magic
        elif name == "records_count":
            assert ours(name) == len(theirs.records)
        else:
            assert ours(name) == getattr(theirs, name), name
    assert ours("base_offset") == 0x2122232425262728
    assert ours("max_timestamp") - ours("base_timestamp") == 5000 and ours("last_offset_delta") == 1
    assert R.BATCH_HEADER_SIZE == struct.calcsize(R._HEADER.format)
    assert len(data) == R.LOG_OVERHEAD + theirs.batch_length
    header = R.BatchHeader.read(data)
    assert header.is_transactional and not header.is_control
    assert R.header_struct("base_offset", "magic", "records_count").unpack_from(data) == (
        0x2122232425262728,
        R.CURRENT_MAGIC,
        2,
    )
    with pytest.raises(ValueError):
        R.header_struct("magic", "base_offset")  # out of wire order
