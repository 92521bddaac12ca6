"""The README's client example runs as written against a real broker.

The example is the first ```python block under "## The client"; only its
bootstrap address is changed to the test broker's. If the README drifts from
the API, this fails.
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.brokers import ROOT, BrokerProcess


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## The client", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_client_example_runs(tmp_path) -> None:
    code = readme_example()
    assert 'BOOTSTRAP = "127.0.0.1:9092"' in code
    with BrokerProcess(tmp_path / "data") as b:
        script = tmp_path / "example.py"
        script.write_text(code.replace('BOOTSTRAP = "127.0.0.1:9092"', f'BOOTSTRAP = "{b.bootstrap}"'))
        done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
