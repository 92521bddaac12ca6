"""`shoal-broker` / `python -m broker`: parse settings, run one broker until a signal.

Exit codes: 0 after a clean shutdown (SIGINT/SIGTERM), 2 for unusable
settings (reported before anything binds) or a data directory another broker
holds (its `.lock`), 1 if the broker fails to start
(port in use, unreadable data dir).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys

from shoal.broker.config.settings import BrokerConfig, ConfigError, parse_properties
from shoal.broker.log.dir_lock import DataDirLocked


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="shoal-broker",
        description="Run a Shoal broker (defaults: PLAINTEXT://127.0.0.1:9092, data in ./shoal-data).",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        action="append",
        default=[],
        help="a Kafka-style .properties file (repeatable: a later file's settings win over an earlier one's)",
    )
    p.add_argument(
        "--override",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="set one setting (repeatable); beats the file",
    )
    return p.parse_args(argv)


def load_config(args: argparse.Namespace) -> BrokerConfig:
    props: dict[str, str] = {}
    for path in args.config:  # several files: the container's generated secrets file after the operator's own
        try:
            with open(path, encoding="utf-8") as f:
                props.update(parse_properties(f.read()))
        except OSError as e:
            raise ConfigError("--config", f"cannot read {path}: {e.strerror}") from None
    return BrokerConfig.from_sources(props, args.override)


def setup_logging(level: str, fmt: str = "text") -> None:
    """The root logger on stderr: readable lines, or one JSON object a line (log.format=json)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt.lower() == "json":
        from shoal.broker.logformat import JsonFormatter

        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])


def announce(text: str, fmt: str) -> None:
    """Where the broker listens, on stderr whatever log.level says (tools wait for these lines);
    a JSON object in log.format=json, so every line of the output parses."""
    if fmt == "json":
        from shoal.broker.logformat import JsonFormatter

        text = JsonFormatter().format(logging.LogRecord("shoal", logging.INFO, __file__, 0, text, None, None))
    print(text, file=sys.stderr, flush=True)


async def run(config: BrokerConfig) -> int:
    from shoal.broker.broker import Broker

    broker = Broker(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except DataDirLocked as e:
        logging.getLogger("shoal").error("cannot start: %s", e)
        return 2
    except ConfigError as e:  # found at start: a TLS key or file that cannot be used
        print(f"shoal-broker: invalid configuration: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        logging.getLogger("shoal").error("cannot start: %s", e)
        return 1
    fmt = str(config.get("log.format")).lower()
    # The operations listener's lines first: a tool that waits for the broker's line (the sign
    # that it serves) then finds the other one already written, never half of the pair.
    for host, port in broker.ops.bound:
        announce(f"shoal http listening on {host}:{port}", fmt)
    for host, port in broker.server.bound:
        announce(f"shoal broker listening on {host}:{port}", fmt)
    await stop.wait()
    await broker.stop()
    return 0


# The GIL switch interval of a broker process, in seconds (CPython's default is 0.005). The
# log writer and fsync threads hand each append and fsync back to the event loop; while the
# loop runs Python code, a thread whose I/O is done waits up to this long for the GIL, twice
# per durable write. At 5 ms that was half of a share acknowledgement's 9 ms write under 32
# members (benchmarks/share_scaling.py); at 0.5 ms the hand-offs took 2 ms. Only the standalone
# broker sets it: an embedded broker leaves its host process's setting alone.
SWITCH_INTERVAL_S = 0.0005

# The cyclic garbage collector's thresholds in a broker process (CPython's default is
# (700, 10, 10)). The broker's objects die by reference count; what counts toward a collection
# is the tracked objects that stay (in-flight maps, log indexes, sessions). At 700, three loaded
# share_scaling rows (about 15 s of 32 and 128 members on one partition) collected about 800
# times, 6-7 of them full collections that stopped the loop 90-120 ms each: about 1 s of
# collecting, and the run's longest stalls. At 50,000 the same rows collected twice (27-54 ms
# each, under 0.1 s in all); a full collection comes after about ten million objects stayed.
# Only the standalone broker sets it, as with the switch interval.
GC_THRESHOLDS = (50_000, 20, 10)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        config = load_config(args)
    except ConfigError as e:
        print(f"shoal-broker: invalid configuration: {e}", file=sys.stderr)
        return 2
    setup_logging(str(config.get("log.level")), str(config.get("log.format")))
    try:
        import uvloop

        return uvloop.run(run(config))
    except ImportError:
        return asyncio.run(run(config))


if __name__ == "__main__":
    sys.exit(main())
