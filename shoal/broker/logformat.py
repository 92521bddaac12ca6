"""``log.format=json``: one JSON object per log line, for log shippers.

Each line holds ``time`` (ISO 8601, UTC, ms), ``level``, ``logger`` and
``message`` (the formatted text), then every structured field the call passed
through ``extra=`` (whatever is not a standard ``LogRecord`` attribute), and
``exception`` with the traceback text when one was logged. Values JSON cannot
carry are written as their ``str``.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonFormatter"]

# What every LogRecord has: not structured fields of the call.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)
