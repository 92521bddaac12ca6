"""Debian packages a test needs, installed by the test command itself when it runs as root.

The README's test command is the whole CI entry point (``.ci/run`` runs exactly it), so a
system package a test needs is installed here, on first use, rather than by a separate
step: as root with apt-get, only when a program is missing (a second run finds it and does
nothing). As another user nothing is installed and the caller skips, saying which packages
to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

__all__ = ["need_programs"]

_lock = threading.Lock()


def need_programs(programs: dict[str, str]) -> dict[str, str] | str:
    """``{program: package}`` → ``{program: path}`` once every program is on PATH; else the
    reason it is not (a string for ``pytest.skip``)."""
    with _lock:
        missing = sorted({pkg for prog, pkg in programs.items() if shutil.which(prog) is None})
        if missing and os.geteuid() == 0 and shutil.which("apt-get"):
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, capture_output=True, timeout=600)
            done = subprocess.run(
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                env=env,
                capture_output=True,
                timeout=1200,
            )
            if done.returncode != 0:
                return f"apt-get install {' '.join(missing)} failed: {done.stderr.decode(errors='replace')[-300:]}"
        found = {prog: shutil.which(prog) for prog in programs}
        if any(path is None for path in found.values()):
            return f"needs Debian's {' and '.join(missing)} (apt-get install {' '.join(missing)}, or run as root)"
        return {prog: str(path) for prog, path in found.items()}
