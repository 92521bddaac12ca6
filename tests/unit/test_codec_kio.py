"""Our codec against kio, which is generated from Apache Kafka's own specs.

For every (message, version) in shoal/schemas/: a random message encoded by us must
be byte-identical to kio's encoding of the same values, kio must decode our
bytes to those values, and we must decode kio's bytes back to our object.
The version ranges must be exactly kio's, apart from the versions Kafka 4 removed that
Shoal serves again (below ``KAFKA4_MIN_VERSIONS``), which kio 0.6.5 does not have.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.protocol import construct_codec
from shoal.protocol import spec as S
from shoal.protocol.api import codec
from shoal.protocol.kafka4_versions import KAFKA4_MIN_VERSIONS
from tests.support import kio_bridge as kb
from tests.support.strategies import message

# every message and version against kio (minutes in all): the full suite runs it, the fast loop
# leaves it to test_golden's byte vectors
pytestmark = pytest.mark.slow

_KINDS = ("request", "response", "header")
NAMES = sorted(n for n, m in S.all_specs().items() if m.type in _KINDS)


def _kafka4_versions(name: str) -> list[int]:
    """Our versions less those Kafka 4 removed (KIP-896) and Shoal serves again: kio 0.6.5 is
    generated from Kafka 4's specs and lacks them (tests/wire/test_legacy_wire_golden.py has those)."""
    spec = S.load(name)
    floor = KAFKA4_MIN_VERSIONS.get(spec.api_key, 0) if spec.api_key is not None else 0
    return [v for v in spec.versions if v >= floor]


CASES = [(n, v) for n in NAMES for v in _kafka4_versions(n)]


@pytest.mark.parametrize("name", NAMES)
def test_versions_are_kios(name: str) -> None:
    assert _kafka4_versions(name) == kb.kio_versions(name)


def _override(time_fields: set[tuple[str, str]]):
    def pick(sp: S.StructSpec, f: S.FieldSpec, version: int):
        if (sp.name, f.attr) in time_fields and not f.is_array:
            # kio turns these into datetime/timedelta: stay in their exact range.
            return st.integers(-1, 2**40)
        return None

    return pick


def _project(obj, name: str, version: int):
    """Our object with fields absent from `version` reset: decode(encode(obj))."""
    c = codec(name, version)
    return c.decode_all(memoryview(c.encode(obj)))


@pytest.mark.parametrize(("name", "version"), CASES)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_with_kio(name: str, version: int, data: st.DataObject) -> None:
    spec = S.load(name)
    kcls = kb.kio_class(name, version)
    obj = data.draw(message(spec, version, _override(kb.time_fields(kcls))))
    c = codec(name, version)

    ours = c.encode(obj)
    kobj = kb.to_kio(obj, kcls)
    theirs = kb.kio_encode(kobj)
    assert ours == theirs

    by_kio, size = kb.kio_decode(kcls, ours)
    assert size == len(ours)
    assert by_kio == kobj

    back = c.decode_all(memoryview(theirs))
    assert back == obj
    # The construct structures agree with the compiled code both ways.
    assert construct_codec.build(spec, version, obj) == ours
