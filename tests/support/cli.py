"""The ``shoal`` command line run in this process: ``main(argv)`` on a worker thread with
stdin, stdout and stderr swapped for buffers.

Why: a subprocess per verb costs an interpreter start-up and the client's imports (about half a
second idle, seconds on a loaded machine), and the CLI tests run a hundred verbs. What the process
adds is kept apart and tested apart: ``sys.exit(main())`` and the console script have their own
subprocess tests (``test_client_cli.py``'s exit-code tests, ``test_wheel.py``), a terminal on
stderr needs a real pty (``test_client_cli_json.py``'s progress tests).

Kept as a process would see it: stdin is a byte stream (``sys.stdin.buffer``) that is not a
terminal, stdout and stderr are not terminals, and a warning the client logs in the command's
thread lands on stderr as Python's last-resort handler would print it there (no logging is
configured in the real process). A command that does not end within ``timeout`` fails the test.
"""

from __future__ import annotations

import io
import logging
import sys
import threading

from shoal.client.cli.main import main

_one_at_a_time = threading.Lock()  # sys.std* are the process's: one command at a time


class _ThreadStderr(logging.Handler):
    """Warnings and errors logged in one thread, as the last-resort handler prints them."""

    def __init__(self, thread_id: int, out: io.StringIO) -> None:
        super().__init__(logging.WARNING)
        self.thread_id = thread_id
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread_id:
            self.out.write(self.format(record) + "\n")


def run_cli(*args: str, stdin: str | bytes | None = None, timeout: float = 60) -> tuple[int, str, str]:
    """``shoal ARGS`` in this process: (exit code, stdout, stderr)."""
    data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
    fake_in = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    result: list[int] = []
    failure: list[BaseException] = []

    def call() -> None:
        handler = _ThreadStderr(threading.get_ident(), err)
        root = logging.getLogger()
        root.addHandler(handler)
        try:
            result.append(main(list(args)))
        except BaseException as e:  # noqa: BLE001 (SystemExit included: main must return, not exit)
            failure.append(e)
        finally:
            root.removeHandler(handler)

    with _one_at_a_time:
        saved = sys.stdin, sys.stdout, sys.stderr
        sys.stdin, sys.stdout, sys.stderr = fake_in, out, err
        try:
            worker = threading.Thread(target=call, name="shoal-cli", daemon=True)
            worker.start()
            worker.join(timeout)
        finally:
            sys.stdin, sys.stdout, sys.stderr = saved
    if worker.is_alive():
        raise AssertionError(f"shoal {' '.join(args)} did not end within {timeout} s; stderr so far:\n{err.getvalue()}")
    if failure:
        raise AssertionError(f"shoal {' '.join(args)} raised instead of returning an exit code") from failure[0]
    return result[0], out.getvalue(), err.getvalue()
