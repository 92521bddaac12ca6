"""Hand-written golden vectors for request versions Kafka 4 removed (KIP-896), and their checks.

A ``Case`` holds one (api, version)'s request and response, as values and as hex written field
by field from Kafka 3.9's JSON specs, with the oracle that judged the bytes: ``kio-0.6.5`` (the
installed kio, generated from Kafka 4's specs) or ``kio-0.5.0`` (generated from Kafka 3.x specs,
for the versions 0.6.5 lacks). kio 0.5.0 cannot be installed next to 0.6.5 (one package name),
so ``run_old_kio`` runs the check in a child interpreter with a ``pip install --no-deps --target
DIR kio==0.5.0`` first on its path: ``SHOAL_KIO_OLD`` when set, else one the test installs once
beside the interpreter (``<sys.prefix>/kio-0.5.0``; a second run finds it).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal.protocol.api import api_by_name
from shoal.protocol.frames import FrameReader, decode_request, decode_response, encode_request, encode_response
from tests.support import kio_bridge as kb

REPO = Path(__file__).resolve().parents[2]
MEMBER = "m-1"  # the member id in the codec vectors; a broker run puts its own in this slot


def old_kio_dir() -> str:
    """A directory holding kio 0.5.0 (generated from Kafka 3.x specs), installed once if needed."""
    given = os.environ.get("SHOAL_KIO_OLD", "")
    if given:
        return given
    target = Path(sys.prefix) / "kio-0.5.0"
    if not (target / "kio" / "__init__.py").exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), "kio==0.5.0"],
            check=True,
            capture_output=True,
            timeout=600,
        )
    return str(target)


def hx(*pieces: str) -> bytes:
    """Join hex pieces (spaces allowed) into bytes."""
    return bytes.fromhex("".join(p.replace(" ", "") for p in pieces))


def s16(text: str) -> str:
    """A classic (int16-length) string as hex."""
    raw = text.encode()
    return f"{len(raw):04x}" + raw.hex()


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def header(api_key: int, version: int) -> str:
    """Request header v1: key, version, correlation id 1, client id "shoal"."""
    return f"{api_key:04x} {version:04x} 00000001 0005 73686f616c"


@dataclass(frozen=True)
class Case:
    api: str
    version: int
    oracle: str  # which kio judged the hand-written bytes
    request: dict
    request_hex: tuple[str, ...]
    response: dict
    response_hex: tuple[str, ...]  # after the correlation id

    @property
    def id(self) -> str:
        return f"{self.api}-v{self.version}"

    def request_bytes(self, member: str = MEMBER) -> bytes:
        return hx(*(p.replace("{member}", s16(member)) for p in self.request_hex))

    def response_bytes(self, member: str = MEMBER) -> bytes:
        return hx("00000001", *(p.replace("{member}", s16(member)) for p in self.response_hex))

    def request_body(self) -> Any:
        return build(api_by_name(self.api).request_class(), self.request)

    def response_body(self) -> Any:
        return build(api_by_name(self.api).response_class(), self.response)


def build(cls: Any, values: dict, top: Any = None) -> Any:
    """Instantiate a generated dataclass from (struct name, dict) trees."""
    top = top or cls
    kwargs = {}
    for k, v in values.items():
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], dict):
            kwargs[k] = build(getattr(top, v[0]), v[1], top)
        elif isinstance(v, list) and v and isinstance(v[0], tuple):
            kwargs[k] = [build(getattr(top, name), d, top) for name, d in v]
        else:
            kwargs[k] = v
    return cls(**kwargs)


def _byte_by_byte(payload: bytes) -> memoryview:
    reader, got = FrameReader(), []
    for b in frame(payload):
        got += reader.feed(bytes([b]))
    assert [bytes(g) for g in got] == [payload]
    return got[0]


def check_request(case: Case) -> None:
    """Our encoder writes the vector; it decodes whole, fed byte by byte, and with trailing bytes."""
    a = api_by_name(case.api)
    body = case.request_body()
    payload = case.request_bytes()
    assert b"".join(encode_request(a.key, case.version, 1, "shoal", body)) == frame(payload)
    req = decode_request(memoryview(payload))
    assert (req.api.key, req.version, req.correlation_id, req.client_id) == (a.key, case.version, 1, "shoal")
    assert req.body == body
    assert decode_request(_byte_by_byte(payload)).body == body
    assert decode_request(memoryview(payload + b"\x00\x01\x02")).body == body  # Kafka reads what it defines


def check_response(case: Case) -> None:
    a = api_by_name(case.api)
    body = case.response_body()
    payload = case.response_bytes()
    assert b"".join(encode_response(a.key, case.version, 1, body)) == frame(payload)
    assert decode_response(memoryview(payload), a.key, case.version) == (1, body)
    assert decode_response(_byte_by_byte(payload), a.key, case.version) == (1, body)
    assert decode_response(memoryview(payload + b"\xff\xfe"), a.key, case.version) == (1, body)


def kio_agrees(case: Case) -> None:
    """The importable kio decodes the vector's bodies to the values we built."""
    a = api_by_name(case.api)
    for body, whole, spec, codec in (
        (case.request_body(), case.request_bytes(), a.request.name, a.request_codec(case.version)),
        (case.response_body(), case.response_bytes(), a.response.name, a.response_codec(case.version)),
    ):
        body_bytes = codec.encode(body)
        assert whole.endswith(body_bytes)
        kcls = kb.kio_class(spec, case.version)
        kobj, size = kb.kio_decode(kcls, body_bytes)
        assert size == len(body_bytes) and kobj == kb.to_kio(body, kcls)


def check_module_with_installed_kio(module: str, oracle: str) -> int:
    """``kio_agrees`` on every case of ``module.CASES`` judged by ``oracle``; how many."""
    cases = [c for c in importlib.import_module(module).CASES if c.oracle == oracle]
    for case in cases:
        kio_agrees(case)
    return len(cases)


def run_old_kio(module: str) -> int:
    """Check ``module``'s kio-0.5.0 cases with kio 0.5.0 (``old_kio_dir``), in a child."""
    old = old_kio_dir()
    code = (
        "import kio\n"
        f"assert kio.__file__.startswith({old!r}), kio.__file__\n"
        "from tests.support.legacy_golden import check_module_with_installed_kio as check\n"
        f"print(check({module!r}, 'kio-0.5.0'))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([old, str(REPO)]))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return int(out.stdout.strip())
