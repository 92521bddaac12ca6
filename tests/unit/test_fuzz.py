"""Fuzz: 100,000 random and mutated frames raise only ProtocolError.

The corpus is one valid request and one valid response for every (API,
version) we serve, with arrays and strings filled in so that mutations land
in lengths, counts, tags and nulls. Mutations flip bits, overwrite bytes with
boundary values, truncate, extend, splice and duplicate; a share of frames is
pure noise. Every frame is decoded; anything but success or ProtocolError
fails the test, which prints the seed, the input and the exception.
"""

from __future__ import annotations

import random
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.protocol import spec as S
from shoal.protocol.api import apis
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.frames import FrameReader, decode_request, decode_response, encode_request, encode_response
from shoal.protocol.messages import classes_for

TOTAL = 100_000
_BOUNDARY = [0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]


def _corpus(rng: random.Random) -> tuple[list[bytes], list[tuple[int, int, bytes]]]:
    requests: list[bytes] = []
    responses: list[tuple[int, int, bytes]] = []
    for a in apis().values():
        for v in a.request.versions:
            for spec_, sink in ((a.request, "req"), (a.response, "resp")):
                obj = _random_message(rng, spec_, v)
                if sink == "req":
                    frame = b"".join(encode_request(a.key, v, rng.randrange(1 << 31), "fuzz", obj))
                    requests.append(frame[4:])
                else:
                    frame = b"".join(encode_response(a.key, v, 1, obj))
                    responses.append((a.key, v, frame[4:]))
    return requests, responses


def _random_message(rng: random.Random, m: S.MessageSpec, version: int):
    """A message with every field of `version` filled (deterministic per rng)."""
    classes = classes_for(m.name)

    def scalar(t: str):
        if t == "bool":
            return rng.random() < 0.5
        if t == "float64":
            return rng.random()
        if t == "string":
            return rng.choice(["", "a", "topic-é", "x" * 40])
        if t in ("bytes", "records"):
            return rng.randbytes(rng.randint(0, 30))
        if t == "uuid":
            return uuid.UUID(int=rng.getrandbits(128))
        if t in ("int8", "int16", "uint16"):
            return rng.randint(0, 127)
        return rng.choice([0, 1, -1, 1000, 2**31 - 1]) if t != "uint32" else rng.randint(0, 2**31)

    def value(f: S.FieldSpec):
        if f.nullable(version) and rng.random() < 0.2:
            return None
        if f.is_array:
            n = rng.randint(0, 2)
            if f.struct is not None:
                return [struct_(f.struct) for _ in range(n)]
            return [scalar(f.element_type) for _ in range(n)]
        if f.struct is not None:
            return struct_(f.struct)
        return scalar(f.type)

    def struct_(sp: S.StructSpec):
        regular, tagged = sp.fields_in(version)
        return classes[sp.name](**{f.attr: value(f) for f in regular + tagged})

    return struct_(m.struct)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        if not b:
            b = bytearray(rng.randbytes(rng.randint(1, 16)))
            continue
        i = rng.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.choice(_BOUNDARY)
        elif op == 2:
            del b[i:]
        elif op == 3:
            b[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 4:
            j = rng.randrange(len(b))
            b[i : i + 4] = b[j : j + 4]
        elif op == 5 and len(b) >= i + 4:
            b[i : i + 4] = struct.pack(">i", rng.choice([-2, -1, 0x7FFFFFFF, 0x10000, 255]))
        else:
            del b[i : i + rng.randint(1, 8)]
    return bytes(b)


def _check(fn, data: bytes, seed: int) -> None:
    try:
        fn(data)
    except ProtocolError:
        pass
    except BaseException as e:
        raise AssertionError(f"seed {seed}: {type(e).__name__}: {e} on input {data.hex()}") from e


@pytest.mark.slow
def test_random_and_mutated_frames_raise_only_protocol_error() -> None:
    seed = 20261122
    rng = random.Random(seed)
    requests, responses = _corpus(rng)
    count = 0
    while count < TOTAL:
        kind = rng.random()
        if kind < 0.1:
            data = rng.randbytes(rng.randint(0, 64))
            _check(decode_request, data, seed)
        elif kind < 0.6:
            data = _mutate(rng, rng.choice(requests))
            _check(decode_request, memoryview(data), seed)
        else:
            key, version, payload = rng.choice(responses)
            data = _mutate(rng, payload)
            _check(lambda d, k=key, v=version: decode_response(d, k, v), data, seed)
        count += 1
    assert count == TOTAL


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.binary(max_size=40), max_size=20), limit=st.integers(0, 200))
def test_frame_reader_never_fails_otherwise(chunks: list[bytes], limit: int) -> None:
    reader = FrameReader(max_size=limit)
    try:
        for c in chunks:
            for f in reader.feed(c):
                assert len(f) <= limit
    except ProtocolError:
        pass


def test_corpus_covers_every_api_version() -> None:
    requests, responses = _corpus(random.Random(1))
    n = sum(len(a.request.versions) for a in apis().values())
    assert len(requests) == len(responses) == n
    for payload in requests:
        decode_request(payload)
    for key, version, payload in responses:
        decode_response(payload, key, version)
    assert all(S.load(a.request.name) for a in apis().values())
