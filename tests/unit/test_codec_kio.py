"""Our codec against kio, which is generated from Apache Kafka's own specs.

For every (message, version) in shoal/schemas/: a random message encoded by us must
be byte-identical to kio's encoding of the same values, kio must decode our
bytes to those values, and we must decode kio's bytes back to our object.
The version ranges must be exactly kio's.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.protocol import construct_codec
from shoal.protocol import spec as S
from shoal.protocol.api import codec
from tests.support import kio_bridge as kb
from tests.support.strategies import message

# every message and version against kio (minutes in all): the full suite runs it, the fast loop
# leaves it to test_golden's byte vectors
pytestmark = pytest.mark.slow

_KINDS = ("request", "response", "header")
NAMES = sorted(n for n, m in S.all_specs().items() if m.type in _KINDS)
CASES = [(n, v) for n in NAMES for v in S.load(n).versions]


@pytest.mark.parametrize("name", NAMES)
def test_versions_are_kios(name: str) -> None:
    """kio 0.6.5 is generated from Kafka 4's specs. Shoal also serves older versions that Kafka 4
    removed (KIP-896), from Kafka 3.9's specs: ours may start lower, and are kio's from there on."""
    ours, kios = list(S.load(name).versions), kb.kio_versions(name)
    older = ours[: len(ours) - len(kios)]
    assert ours[len(older) :] == kios
    assert all(v < kios[0] for v in older)


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
    if version not in kb.kio_versions(name):
        pytest.skip("a version Kafka 4 removed: kio 0.6.5 lacks it (the legacy golden tests in tests/wire check it)")
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
