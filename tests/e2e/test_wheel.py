"""The built wheel installs one top-level package, ``shoal``, and its console scripts work.

Built from this checkout (``pip wheel``), installed into a fresh venv with
``--no-deps`` (the dependencies come from this suite's environment through a
plain path entry, which does not load the checkout's editable-install hook),
and run from a directory outside the checkout, so nothing can be imported from
the source tree by accident.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.brokers import ROOT

pytestmark = pytest.mark.slow


def run(*args: str, cwd: Path) -> str:
    # no PYTHONPATH: other tests of this session point it at the checkout (Spark workers need it)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(ROOT), cwd=work)
    (wheel,) = (work / "dist").glob("shoal-*.whl")
    env = work / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    py = env / "bin" / "python"
    site = Path(run(str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=work).strip())
    (site / "suite_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run(str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel), cwd=work)
    return wheel, env


def test_the_wheel_holds_only_the_shoal_package(installed) -> None:
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as z:
        tops = {name.split("/", 1)[0] for name in z.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"shoal"}
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert "shoal/schemas/ProduceRequest.json" in names
    assert "shoal/testing/pytest_plugin.py" in names and "shoal/broker/handlers/produce.py" in names
    assert {"shoal/broker/console/static/console.js", "shoal/broker/console/static/console.css"} <= names


def test_imports_and_console_scripts_from_the_installed_wheel(installed, tmp_path) -> None:
    _, env = installed
    py, bin_ = str(env / "bin" / "python"), env / "bin"
    probe = (
        "import importlib.util, shoal.client, shoal.broker.broker, shoal.testing;"
        "from shoal import AsyncProducer, EmbeddedBroker;"
        "assert 'site-packages' in shoal.client.__file__, shoal.client.__file__;"
        "print([m for m in ('client', 'protocol', 'broker', 'schemas') if importlib.util.find_spec(m)])"
    )
    assert run(py, "-c", probe, cwd=tmp_path).strip() == "[]"
    assert "shoal-broker" in run(str(bin_ / "shoal-broker"), "--help", cwd=tmp_path)
    assert "usage: shoal" in run(str(bin_ / "shoal"), "--help", cwd=tmp_path)
    assert "shoal-broker" in run(py, "-m", "shoal.broker", "--help", cwd=tmp_path)
    out = run(
        py,
        "-c",
        "from shoal import EmbeddedBroker\nwith EmbeddedBroker() as b: print(b.produce('t', b'x'))",
        cwd=tmp_path,
    )
    assert out.strip().endswith("0")
