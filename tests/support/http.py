"""The operations listener (/metrics, /health) over HTTP, for the tests that read it."""

from __future__ import annotations

import urllib.error
import urllib.request


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
