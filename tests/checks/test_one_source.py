"""One source of truth, checked: framing only in the shared framer, API keys only by name.

Kafka's frames (an int32 size, then the payload) are cut by one sans-IO
framer, ``shoal/protocol/frames.py``; the broker's and the client's
connections only move bytes and hand them to it. API keys are numbers only
inside ``shoal/protocol``: everywhere else a request type is named
(``API["Produce"]``, ``api_by_name("Fetch")``). Both rules are checked on the
source with ``ast``, and each check is also run on a deliberate violation so a
check that stopped seeing anything fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.brokers import ROOT

SHOAL = ROOT / "shoal"
# The connection shells: socket bytes in and out, framing by the shared framer only.
CONNECTION_SHELLS = [SHOAL / "broker/net/connection.py", SHOAL / "client/core/conn.py"]


def framing_code(source: str) -> list[str]:
    """What in a connection shell decodes integers from bytes itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            if "struct" in names:
                found.append(f"line {node.lineno}: imports struct")
        elif isinstance(node, ast.Attribute) and node.attr in ("from_bytes", "unpack_from", "unpack"):
            found.append(f"line {node.lineno}: .{node.attr}")
    return found


def literal_api_keys(source: str) -> list[str]:
    """Integer constants compared with, or passed as, an API key."""
    found = []

    def names_key(node: ast.AST) -> bool:
        text = ast.unparse(node)
        return "api_key" in text or text.endswith("API_KEY")

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            ints = [s for s in sides if isinstance(s, ast.Constant) and type(s.value) is int]
            if ints and any(names_key(s) for s in sides if s not in ints):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.keyword) and node.arg == "api_key":
            if isinstance(node.value, ast.Constant) and type(node.value.value) is int:
                found.append(f"line {node.value.lineno}: api_key={node.value.value}")
    return found


def outside_protocol() -> list[Path]:
    return [p for p in SHOAL.rglob("*.py") if "protocol" not in p.relative_to(SHOAL).parts[:1]]


def test_the_connections_frame_through_the_shared_framer() -> None:
    for path in CONNECTION_SHELLS:
        source = path.read_text()
        assert "Framer" in source, f"{path.name} no longer uses the shared framer"
        assert framing_code(source) == [], path


def test_no_literal_api_keys_outside_protocol() -> None:
    modules = outside_protocol()
    assert len(modules) > 100
    offenders = {p.relative_to(ROOT).as_posix(): f for p in modules if (f := literal_api_keys(p.read_text()))}
    assert offenders == {}


@pytest.mark.parametrize(
    ("check", "snippet"),
    [
        (framing_code, "import struct\nsize = struct.unpack('>i', data[:4])[0]\n"),
        (framing_code, "size = int.from_bytes(data[:4], 'big')\n"),
        (literal_api_keys, "if header.api_key == 18:\n    pass\n"),
        (literal_api_keys, "send(api_key=0, version=9)\n"),
        (literal_api_keys, "if 1 == request.API_KEY:\n    pass\n"),
    ],
)
def test_a_violation_is_seen(check, snippet: str) -> None:
    assert check(snippet) != []


def test_names_are_not_violations() -> None:
    assert literal_api_keys("if header.api_key == API['ApiVersions'].key:\n    pass\n") == []
    assert framing_code("frames = framer.feed(data)\n") == []
