"""protocol.error_responses: an error answer to every request of every API and version.

Judged three ways: it encodes at that version (and decodes back the same, by
kio where kio knows the message), it carries the error code wherever the
response has a place for it, and it names the request's topics and partitions
(Produce, Fetch, ShareFetch, FindCoordinator v4 keys).
"""

from __future__ import annotations

import uuid

import pytest

from shoal.protocol import spec as S
from shoal.protocol.api import api_by_name, apis
from shoal.protocol.error_responses import error_response
from shoal.protocol.messages import classes_for

ALL = [(a.key, v) for a in apis().values() for v in range(a.min_version, a.max_version + 1)]


def filled(cls: type, spec: S.StructSpec, classes: dict[str, type], version: int, depth: int = 0) -> object:
    """A request with one element in every array of structs (two levels deep) and one key in string arrays."""
    obj = cls()
    for f in spec.fields:
        if f.is_array and f.struct is not None and depth < 3:
            setattr(obj, f.attr, [filled(classes[f.struct.name], f.struct, classes, version, depth + 1)])
        elif f.is_array and f.element_type == "string":
            setattr(obj, f.attr, ["k1"])
        elif f.is_array and f.element_type == "int32":
            setattr(obj, f.attr, [0])
        elif f.attr in ("name", "topic") and f.type == "string":
            setattr(obj, f.attr, "t")
        elif f.type == "uuid":
            setattr(obj, f.attr, uuid.UUID(int=7))
    return obj


def codes_in(obj: object, spec: S.StructSpec, version: int, found: list[int]) -> list[int]:
    """Every error code the response carries at this version."""
    for f in spec.fields:
        if not f.present(version):
            continue
        value = getattr(obj, f.attr)
        if f.attr == "error_code":
            found.append(value)
        elif f.struct is not None and isinstance(value, list):
            for item in value:
                codes_in(item, f.struct, version, found)
        elif f.struct is not None and value is not None:
            codes_in(value, f.struct, version, found)
    return found


def has_error_field(spec: S.StructSpec, version: int) -> bool:
    for f in spec.fields:
        if not f.present(version):
            continue
        if f.attr == "error_code":
            return True
        if f.struct is not None and has_error_field(f.struct, version):
            return True
    return False


@pytest.mark.parametrize(("key", "version"), ALL)
def test_every_api_and_version_encodes_and_carries_the_code(key: int, version: int) -> None:
    a = apis()[key]
    req_cls = a.request_class()
    request = filled(req_cls, req_cls.SPEC.struct, classes_for(req_cls.SPEC.name), version)
    body = error_response(key, version, request, 15, "refused")
    codec = a.response_codec(version)
    wire = codec.encode(body)
    again = codec.decode_all(wire)
    assert codec.encode(again) == wire
    spec = a.response_class().SPEC.struct
    if has_error_field(spec, version):
        codes = codes_in(again, spec, version, [])
        assert 15 in codes, (a.name, version, again)
        assert set(codes) <= {15}


def test_produce_answers_every_partition_with_unknown_offsets() -> None:
    P = api_by_name("Produce").request_class()
    req = P(
        acks=-1,
        timeout_ms=1,
        topic_data=[
            P.TopicProduceData(
                name="a", partition_data=[P.PartitionProduceData(index=3), P.PartitionProduceData(index=5)]
            ),
            P.TopicProduceData(name="b", partition_data=[P.PartitionProduceData(index=0)]),
        ],
    )
    body = error_response(0, 9, req, 6)
    got = [(t.name, p.index, p.error_code, p.base_offset) for t in body.responses for p in t.partition_responses]
    assert got == [("a", 3, 6, -1), ("a", 5, 6, -1), ("b", 0, 6, -1)]


def test_fetch_names_partitions_by_partition_index_and_topic_id() -> None:
    F = api_by_name("Fetch").request_class()
    tid = uuid.uuid4()
    req = F(topics=[F.FetchTopic(topic_id=tid, partitions=[F.FetchPartition(partition=2)])])
    body = error_response(1, 13, req, 6)
    [t] = body.responses
    [p] = t.partitions
    assert (t.topic_id, p.partition_index, p.error_code, p.high_watermark) == (tid, 2, 6, -1)


def test_find_coordinator_v4_answers_each_key() -> None:
    F = api_by_name("FindCoordinator").request_class()
    body = error_response(10, 4, F(key_type=0, coordinator_keys=["g1", "g2"]), 15)
    assert [(c.key, c.error_code, c.node_id) for c in body.coordinators] == [("g1", 15, -1), ("g2", 15, -1)]
    old = error_response(10, 2, F(key="g", key_type=0), 15)
    assert (old.error_code, old.node_id, old.port) == (15, -1, -1)
