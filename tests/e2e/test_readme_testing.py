"""The README's "Testing Kafka code with Shoal" examples run as written, under pytest, as a user's
test file: the plugin comes from the installed entry point, not from this suite's conftest."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.brokers import ROOT


def readme_examples() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Testing Kafka code with Shoal", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_readme_testing_examples_pass_under_pytest(tmp_path) -> None:
    examples = readme_examples()
    assert len(examples) == 3
    for i, code in enumerate(examples):
        (tmp_path / f"test_readme_example_{i}.py").write_text(code)
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout
