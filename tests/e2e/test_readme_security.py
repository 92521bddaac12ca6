"""README "Securing Shoal" runs as written, against a real broker.

Every ```sh block of the section runs in order, in bash, in one scratch directory (with the
repository's examples/ linked into it): the certificates, the broker's settings and the first
SCRAM user; the broker itself, started from its block; the admin's user, topic, ACLs and group
config; the app producing, reading as a share group, and being refused another topic. Then the
```python block (librdkafka with the same client file). Two things change, and only these: the
port 9093 becomes a free one, and the broker's operations listener takes a free port (its
default 9644 may be held by another broker on the machine).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.brokers import ROOT

pytest.importorskip("trustme")
pytest.importorskip("confluent_kafka")

PASSWORDS = ("admin-secret", "app-secret")


def section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("\n## Securing Shoal\n", 1)[1].split("\n## ", 1)[0]


def blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(sh|python)\n(.*?)```", section(), re.S)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # `pip install trustme` is satisfied already: no index, no self-check over the network
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _sh(script: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-e", "-c", script], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=180
    )


def test_the_section_names_what_it_must() -> None:
    text = section()
    for must in (
        "connections.max.reauth.ms",
        "GSSAPI",
        "OAUTHBEARER",
        "JKS",
        "PKCS12",
        "PEM",
        "examples/make_certs.py",
        "--command-config",
        "shoal users add",
        "shoal acls add",
    ):
        if must.startswith("shoal "):
            assert re.search(must.replace(" ", r"\s.*?"), text, re.S), must
        else:
            assert must in text, must
    kinds = [kind for kind, _ in blocks()]
    assert kinds == ["sh", "sh", "sh", "sh", "python"], kinds
    # the two commands at the top of the README are untouched
    top = (ROOT / "README.md").read_text().split("## ", 1)[0]
    assert ".venv/bin/shoal-broker\n" in top and ".venv/bin/python -m pytest -q\n" in top


def test_readme_security_commands_run(tmp_path: Path) -> None:
    port = str(_free_port())
    (setup, start, admin, app), (_, librdkafka) = (
        [code.replace("9093", port) for kind, code in blocks() if kind == "sh"],
        next(b for b in blocks() if b[0] == "python"),
    )
    (tmp_path / "examples").symlink_to(ROOT / "examples")

    done = _sh(setup, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "certs" / "broker.pem").exists() and (tmp_path / "certs" / "client.key").exists()
    assert "admin: created SCRAM-SHA-256, SCRAM-SHA-512" in done.stderr
    assert oct((tmp_path / "admin.properties").stat().st_mode & 0o777) == "0o600"

    assert start.strip().startswith("shoal-broker "), start
    log_path = tmp_path / "broker.log"
    with open(log_path, "wb") as log:
        broker = subprocess.Popen(
            ["bash", "-c", f"exec {start.strip()} --override shoal.http.listeners=http://127.0.0.1:0"],
            cwd=tmp_path,
            env=_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while b"shoal broker listening on" not in log_path.read_bytes():
            assert broker.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.1)

        done = _sh(admin, tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "credentials of user app" in done.stdout
        assert "Added ACL ALLOW User:app WRITE from * on TOPIC:LITERAL:events" in done.stdout
        assert "Added ACL ALLOW User:app READ from * on GROUP:LITERAL:workers" in done.stdout

        done = _sh(app, tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        lines = done.stdout.split()
        assert sorted(lines[:5], key=int) == ["1", "2", "3", "4", "5"], done.stdout
        assert lines[5:] == ["refused"], done.stdout
        assert "TOPIC_AUTHORIZATION_FAILED" in done.stderr, done.stderr[-2000:]

        script = tmp_path / "librdkafka_example.py"
        script.write_text(librdkafka.replace("9093", port))
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-3000:]
        seen = _sh(app.split("\nseq ", 1)[0] + "\n" + _share_consume_line(app), tmp_path)
        assert "from librdkafka" in seen.stdout, seen.stderr[-2000:]

        # the users' passwords are stored salted only
        stored = json.loads((tmp_path / "secure-data" / "__scram_credentials.json").read_text())
        assert sorted(stored["users"]) == ["admin", "app"]
        raw = (tmp_path / "secure-data" / "__scram_credentials.json").read_text()
        assert not any(pw in raw for pw in PASSWORDS)
    finally:
        broker.send_signal(signal.SIGTERM)
        rc = broker.wait(30)
    assert rc == 0, log_path.read_text()[-3000:]
    assert not any(pw in log_path.read_text() for pw in PASSWORDS)


def _share_consume_line(app_block: str) -> str:
    (line,) = [ln for ln in app_block.splitlines() if " share-consume " in ln]
    return line
