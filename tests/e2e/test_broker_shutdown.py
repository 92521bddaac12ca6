"""SIGTERM under load: the broker stops taking requests, answers those in flight, and exits.

A client keeps two long-polling fetches in flight at all times. If the broker
kept reading new requests while draining, it would never see an idle moment
and would sit out its whole drain timeout (5 s); it must instead stop reading,
let the fetches in flight finish (MaxWaitMs 500 ms), and exit 0 promptly.
"""

from __future__ import annotations

import signal
import threading
import time

from tests.support.brokers import RawClient
from tests.support.wire import create, fetch_body


def test_sigterm_under_a_stream_of_long_polls_exits_promptly(broker_factory, topic_name) -> None:
    b = broker_factory(process=True)
    b.start()
    with RawClient(b.port) as c:
        assert create(c, topic_name).error_code == 0
    answered = []
    stop = threading.Event()

    def hammer() -> None:
        try:
            with RawClient(b.port, timeout=30) as c:
                c.send("Fetch", 11, fetch_body(topic_name))
                while not stop.is_set():
                    c.send("Fetch", 11, fetch_body(topic_name))  # two in flight from here on
                    answered.append(c.receive("Fetch", 11))
        except (ConnectionError, OSError):
            pass

    t = threading.Thread(target=hammer, daemon=True)
    t.start()
    time.sleep(1.5)
    assert answered, "the client got no answers before shutdown"
    start = time.monotonic()
    b.proc.send_signal(signal.SIGTERM)
    rc = b.proc.wait(30)
    took = time.monotonic() - start
    stop.set()
    t.join(10)
    assert rc == 0
    print(f"shutdown took {took:.2f} s")
    assert took < 3.0, f"shutdown took {took:.1f} s: the broker kept taking requests while draining"


def test_the_process_ends_right_after_shutdown_complete(broker_factory) -> None:
    """#27 reported an exit about 2 s after "shutdown complete". Measured with the broker as a
    direct child (its parent reaps it), the process ends within ~0.1 s of that line; a process
    left to the sandbox's PID 1 stays a zombie until that init reaps it, which is what looked like
    a delay. Wide margin: 1 s."""
    import datetime as dt

    b = broker_factory(process=True)
    b.start()
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(30) == 0
    ended = time.time()
    b.stop()
    (line,) = [x for x in b.log_text().splitlines() if "shutdown complete" in x]
    logged = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    assert ended - logged < 1.0, (line, ended - logged)
