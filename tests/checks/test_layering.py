"""The layout's rules, executable: import contracts, type checking, module size.

The contracts are in pyproject.toml (``[tool.importlinter]``: no import cycles
at any level, protocol at the bottom, the client never importing the broker,
the broker's and the client's layers, sans-IO cores free of asyncio) and so
is the type checker's scope (``[tool.mypy]``: the codec and the sans-IO
cores). Each check also runs against a copy of the package with a deliberate
violation, so a check that stopped seeing anything would fail here too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.brokers import ROOT

BIN = Path(sys.executable).parent
MAX_LINES = 850  # "no module much over 800 lines"


def run(tool: str, cwd: Path, pythonpath: Path | None = None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:  # a path entry is searched before the editable install's finder
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [str(BIN / tool), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the package and of the configuration, to break on purpose."""
    shutil.copytree(ROOT / "shoal", tmp_path / "shoal", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def test_import_contracts_hold() -> None:
    done = run("lint-imports", ROOT, None, "--no-cache")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("shoal/client/core/errors.py", "import shoal.broker.broker\n", "the client never imports the broker"),
        ("shoal/protocol/frames.py", "import shoal.client.core.errors\n", "protocol is the bottom layer"),
        ("shoal/broker/share/in_flight.py", "import asyncio\n", "sans-IO cores import no asyncio"),
        ("shoal/broker/log/segment.py", "import shoal.broker.partition.topics\n", "broker layers"),
        ("shoal/client/core/cluster.py", "import shoal.client.share.consumer\n", "client layers"),
        # partition_log imports cleaner_files: the reverse import closes a cycle between siblings
        ("shoal/broker/log/cleaner_files.py", "import shoal.broker.log.partition_log\n", "no import cycles"),
    ],
)
def test_a_violation_breaks_its_contract(copy: Path, module: str, line: str, contract: str) -> None:
    append(copy / module, line)
    done = run("lint-imports", copy, copy, "--no-cache")
    assert done.returncode != 0, done.stdout[-3000:]
    broken = done.stdout.split("Broken contracts", 1)[1]
    assert contract in broken, broken[:3000]


def test_type_check_is_clean(tmp_path: Path) -> None:
    done = run("mypy", ROOT, None, "--cache-dir", str(tmp_path / "cache"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_a_type_error_fails_the_type_check(copy: Path) -> None:
    append(copy / "shoal/broker/share/in_flight.py", "\n\ndef _broken() -> int:\n    return 'not an int'\n")
    done = run("mypy", copy, copy, "--cache-dir", str(copy / "cache"))
    assert done.returncode != 0, done.stdout[-3000:]
    assert "in_flight.py" in done.stdout and "Incompatible return value type" in done.stdout


def modules() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=False)
    if tracked.returncode == 0 and tracked.stdout:
        return [ROOT / p for p in tracked.stdout.split()]
    return [p for d in ("shoal", "tests", "benchmarks", "examples") for p in (ROOT / d).rglob("*.py")]


def test_no_module_is_much_over_800_lines() -> None:
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in modules() if p.exists()}
    assert len(sizes) > 100
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}
