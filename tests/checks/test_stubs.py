"""The generated type stubs (``messages.pyi``, ``errors.pyi``) match the specs, the error table and the run time.

The stubs are what mypy and IDEs read for the classes built at run time, so
each way they could go wrong has a test: committed files that fall behind a
spec edit (regenerated into a temporary directory and compared), a spec edit
that would not change them (a copied spec with one more field), a stub that
names a class, field or member the run time does not have (or the reverse),
a field whose stub type is not what the decoder produces, and a stub that
mypy would not use to catch a mistake.
"""

from __future__ import annotations

import ast
import dataclasses
import filecmp
import functools
import json
import subprocess
import sys
import types
import uuid
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.protocol import spec as S
from shoal.protocol import stubgen
from shoal.protocol.api import codec
from shoal.protocol.errors import ErrorCode
from shoal.protocol.messages import classes_for, message_class
from tests.support.brokers import ROOT
from tests.support.strategies import message

PROTOCOL = ROOT / "shoal" / "protocol"


@functools.cache
def classes_in(stub: str) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in ast.parse(stub).body if isinstance(n, ast.ClassDef)}


def fields_of(cls: ast.ClassDef) -> dict[str, str]:
    """Instance fields declared in a stub class, in order, with their annotation text (ClassVars left out)."""
    out = {}
    for n in cls.body:
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            text = ast.unparse(n.annotation)
            if not text.startswith("ClassVar"):
                out[n.target.id] = text
    return out


# -- staleness ----------------------------------------------------------------


def test_the_committed_stubs_are_what_the_generator_writes_now(tmp_path: Path) -> None:
    assert stubgen.main(["--out", str(tmp_path)]) == 0
    names = [stubgen.MESSAGES_STUB, stubgen.ERRORS_STUB]
    match, mismatch, errors = filecmp.cmpfiles(tmp_path, PROTOCOL, names, shallow=False)
    assert (mismatch, errors) == ([], []), "stale stubs: run python -m shoal.protocol.stubgen"
    assert match == names
    assert stubgen.main(["--check"]) == 0


def test_check_fails_on_a_stale_or_missing_stub(tmp_path: Path) -> None:
    stubgen.main(["--out", str(tmp_path)])
    assert stubgen.main(["--check", "--out", str(tmp_path)]) == 0
    errors = tmp_path / stubgen.ERRORS_STUB
    errors.write_text(errors.read_text().replace("    NOT_COORDINATOR = 16\n", ""))
    assert stubgen.stale(tmp_path) == [stubgen.ERRORS_STUB]
    assert stubgen.main(["--check", "--out", str(tmp_path)]) == 1
    (tmp_path / stubgen.MESSAGES_STUB).unlink()
    assert stubgen.stale(tmp_path) == [stubgen.MESSAGES_STUB, stubgen.ERRORS_STUB]


def test_a_field_added_to_a_copied_spec_changes_the_stub(tmp_path: Path) -> None:
    text = (S.schema_dir() / "ProduceRequest.json").read_text()
    body = json.loads("\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//")))
    body["fields"].append(
        {"name": "ShoalProbeMillis", "type": "int64", "versions": "3+", "nullableVersions": "none", "about": "probe"}
    )
    topic = next(f for f in body["fields"] if f["name"] == "TopicData")
    topic["fields"].append({"name": "ShoalLabel", "type": "string", "versions": "9+", "nullableVersions": "9+"})
    copy = tmp_path / "ProduceRequest.json"
    copy.write_text(json.dumps(body))
    edited = S._load_text(copy.read_text(), str(copy))

    specs = dict(S.all_specs())
    assert stubgen.render_messages(specs) == (PROTOCOL / stubgen.MESSAGES_STUB).read_text()
    specs["ProduceRequest"] = edited
    stub = stubgen.render_messages(specs)
    assert stub != (PROTOCOL / stubgen.MESSAGES_STUB).read_text()
    cls = classes_in(stub)["ProduceRequest"]
    assert list(fields_of(cls))[-1] == "shoal_probe_millis" and fields_of(cls)["shoal_probe_millis"] == "int"
    nested = {n.name: n for n in cls.body if isinstance(n, ast.ClassDef)}
    assert fields_of(nested["TopicProduceData"])["shoal_label"] == "str | None"


# -- the stubs agree with the run time ----------------------------------------


def test_every_message_class_and_field_the_runtime_builds_is_in_the_stub() -> None:
    stub = classes_in((PROTOCOL / stubgen.MESSAGES_STUB).read_text())
    assert set(stub) == set(S.all_specs())
    for name, node in stub.items():
        top = message_class(name)
        assert list(fields_of(node)) == [f.name for f in dataclasses.fields(top)], name
        nested = {n.name: n for n in node.body if isinstance(n, ast.ClassDef)}
        runtime = {k: c for k, c in classes_for(name).items() if c is not top}
        assert set(nested) == set(runtime), name
        for struct_name, cls in runtime.items():
            assert getattr(top, struct_name) is cls  # reachable as the stub says: Top.Nested
            assert list(fields_of(nested[struct_name])) == [f.name for f in dataclasses.fields(cls)]


def test_every_error_code_member_is_in_the_stub_with_its_value() -> None:
    node = classes_in((PROTOCOL / stubgen.ERRORS_STUB).read_text())["ErrorCode"]
    members = {
        n.targets[0].id: ast.literal_eval(n.value)
        for n in node.body
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
    }
    assert members == {m.name: m.value for m in ErrorCode}
    assert len(members) > 130 and members["NOT_COORDINATOR"] == 16


def _conforms(value: Any, tp: Any) -> bool:
    if isinstance(tp, types.UnionType):
        return any(_conforms(value, arg) for arg in tp.__args__)
    if isinstance(tp, types.GenericAlias):
        assert tp.__origin__ is list
        return isinstance(value, list) and all(_conforms(v, tp.__args__[0]) for v in value)
    if tp is type(None):
        return value is None
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _check_object(obj: Any, stub_fields: dict[str, dict[str, str]], ns: dict[str, Any], path: str) -> None:
    for name, text in stub_fields[type(obj).__name__].items():
        value = getattr(obj, name)
        assert _conforms(value, eval(text, ns)), f"{path}.{name} = {value!r} is not {text}"
        items = value if isinstance(value, list) else [value]
        for item in items:
            if dataclasses.is_dataclass(item):
                _check_object(item, stub_fields, ns, f"{path}.{name}")


_SPECS = sorted(S.all_specs())
_COMMITTED_MESSAGES = (PROTOCOL / stubgen.MESSAGES_STUB).read_text()


@pytest.mark.parametrize("name", _SPECS)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_decoded_values_have_the_types_the_stub_declares(name: str, data: st.DataObject) -> None:
    spec = S.load(name)
    node = classes_in(_COMMITTED_MESSAGES)[name]
    stub_fields = {name: fields_of(node)}
    stub_fields.update({n.name: fields_of(n) for n in node.body if isinstance(n, ast.ClassDef)})
    ns = {"uuid": uuid, name: message_class(name)}
    version = data.draw(st.sampled_from(list(spec.versions)))
    obj = data.draw(message(spec, version))
    c = codec(name, version)
    decoded = c.decode_all(c.encode(obj))
    _check_object(decoded, stub_fields, ns, name)


# -- mypy uses them -------------------------------------------------------------


def test_mypy_catches_a_misspelt_member_or_field_through_the_stubs(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from shoal.protocol import messages\n"
        "from shoal.protocol.errors import ErrorCode\n"
        "ok: int = ErrorCode.NOT_COORDINATOR\n"
        "bad = ErrorCode.NOT_A_COORDINATOR\n"
        "r = messages.ProduceRequest(acks=1)\n"
        "t: str = r.transactional_id\n"
        "messages.ProduceRequest.TopicProduceData(nam='t')\n"
        "size: int = len(r.topic_data[0].partition_data[0].records or b'')\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", str(probe)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert [line.split(":")[1] for line in lines if ": error:" in line] == ["4", "6", "7"], done.stdout
    assert 'has no attribute "NOT_A_COORDINATOR"' in done.stdout
    assert '"str | None"' in done.stdout and 'Unexpected keyword argument "nam"' in done.stdout


@pytest.mark.slow
def test_the_wheel_ships_the_stubs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = tmp_path.glob("shoal-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for stub in (stubgen.MESSAGES_STUB, stubgen.ERRORS_STUB):
            assert f"shoal/protocol/{stub}" in names
            assert z.read(f"shoal/protocol/{stub}").decode() == (PROTOCOL / stub).read_text()
