"""``shoal``: the command line of the bundled client (``python -m client.cli`` too).

Why one program with verbs rather than Kafka's dozen scripts: one place for
connection settings and exit codes. The verbs and their output follow
Kafka's tools (kafka-topics.sh, kafka-console-producer/consumer.sh,
kafka-consumer-groups.sh, kafka-share-groups.sh) so that what people know
carries over. This module only parses arguments, assembles settings and maps
outcomes to exit codes; the verbs live in ``admin`` and ``data``,
the pure helpers in ``support``.

Settings, lowest precedence first: ``--command-config FILE`` (a Java
.properties file with Kafka's client setting names), ``--command-property k=v``
(KIP-1147's name; ``--property`` too, repeatable), ``--bootstrap-server`` (default
127.0.0.1:9092). Connection options may be given before or after the verb.

Kafka's spellings are accepted beside shoal's own: the action as a flag
(``shoal topics --describe --topic t``, ``shoal consumer-groups --list``,
``shoal share-groups --describe --group g``, ``shoal configs --alter --entity-type topics
--entity-name t --add-config k=v``), entities as ``--topic``/``--group`` (repeatable) or
``--all-groups``, the data verbs' topic as ``--topic``. List and describe verbs (and
reset-offsets) take ``--output json``: one JSON document per run, its shape documented and
checked in ``client.cli.shapes``. Long work (produce from a file, consume N, resets of many
partitions) draws a progress bar on stderr only when stderr is a terminal (``cli.progress``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

from shoal.client.cli.support import UsageError, kafka_actions, parse_key_values, parse_properties
from shoal.client.core.errors import ConfigError, KafkaClientError

__all__ = ["build_parser", "main"]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

EXIT_CODES = """\
exit codes:
  0  success
  1  the broker or the operation failed (one line on stderr says why, with
     Kafka's error name, e.g. "Error: TOPIC_ALREADY_EXISTS (36): ...")
  2  usage or configuration error (bad arguments, unknown or invalid setting)
"""

_DATA_VERBS = ("produce", "consume", "share-consume")


FORMAT_HELP = (
    "kcat-style output per record: %t topic, %p partition, %o offset, %k key, %s value, %h headers "
    "(k=v,...), %T timestamp (ms), %K/%S key/value size, %% a percent; \\n \\t escapes. "
    "No newline is added: end with \\n"
).replace("%", "%%")  # argparse formats help text with %


def _connection_options(p: argparse.ArgumentParser, level: str) -> None:
    """The same connection options at the top and on every verb (``level`` keeps their values apart)."""
    g = p.add_argument_group("connection")
    g.add_argument(
        "--bootstrap-server",
        dest=f"bootstrap_{level}",
        metavar="HOST:PORT[,...]",
        default=None,
        help=f"brokers to connect to (default {DEFAULT_BOOTSTRAP})",
    )
    g.add_argument(
        "--command-config",
        dest=f"command_config_{level}",
        metavar="FILE",
        default=None,
        help="a .properties file of client settings (Kafka's names)",
    )
    g.add_argument(
        "--command-property",
        "--property",
        dest=f"property_{level}",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="one client setting, e.g. --command-property request.timeout.ms=5000 (repeatable; KIP-1147's name)",
    )


def _output(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--output",
        choices=("text", "json"),
        default="text",
        help="text (Kafka's tables, the default) or json (one document; shapes in shoal.client.cli.shapes)",
    )


def _named(p: argparse.ArgumentParser, what: str, *, positional: str, required: bool = True) -> None:
    """Entities positionally (``describe g1 g2``) or as Kafka's tools take them (``--group g1 --group g2``)."""
    upper = what.upper()
    p.add_argument(positional, nargs="*", metavar=upper, help=None if required else "default: every " + what)
    p.add_argument(f"--{what}", action="append", metavar=upper, help=f"the same as {upper} (repeatable)")


def _group_options(p: argparse.ArgumentParser) -> None:
    _named(p, "group", positional="groups")
    p.add_argument("--all-groups", action="store_true", help="every group of this kind")


def _reset_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", required=True)
    p.add_argument("--topic", action="append", metavar="TOPIC[:PARTITIONS]", help="e.g. t or t:0,2-3 (repeatable)")
    p.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-offset", type=int, metavar="N")
    p.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", help="optionally with Z or +HH:MM")
    p.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    p.add_argument("--execute", action="store_true", help="apply the plan")
    _output(p)


def _topic_option(p: argparse.ArgumentParser) -> None:
    """The data verbs take the topic positionally or as ``--topic`` (kafka-console-*.sh)."""
    p.add_argument("topic", nargs="?", default=None)
    p.add_argument("--topic", dest="topic_opt", metavar="TOPIC", help="the same as TOPIC")


def _verb(sub: Any, name: str, help_text: str, **kw: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kw,
    )
    _connection_options(p, "verb")
    p.set_defaults(verb_parser=p)  # a typo in its options is reported with its own usage
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shoal",
        description="Administer topics, consumer groups and share groups, and produce and consume records, "
        "on Shoal or any Kafka broker.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _connection_options(parser, "top")
    areas = parser.add_subparsers(dest="area", metavar="COMMAND", required=True)

    # topics
    topics = areas.add_parser("topics", help="create, list, describe, alter and delete topics")
    tv = topics.add_subparsers(dest="verb", metavar="VERB", required=True)
    p = _verb(tv, "create", "create topics")
    _named(p, "topic", positional="topics")
    p.add_argument("--partitions", type=int, default=-1, help="partition count (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=int, default=-1, help="replicas (default: the broker's)")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic config override (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="an existing topic is not an error")
    p.add_argument("--validate-only", action="store_true", help="only check that the topics could be created")
    p = _verb(tv, "list", "list topic names")
    p.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    _output(p)
    p = _verb(tv, "describe", "partitions, leaders, replicas and config overrides")
    _named(p, "topic", positional="topics", required=False)
    p.add_argument("--exclude-internal", action="store_true")
    _output(p)
    p = _verb(tv, "alter", "add partitions to topics")
    _named(p, "topic", positional="topics")
    p.add_argument("--partitions", type=int, help="the new total partition count")
    p = _verb(tv, "delete", "delete topics")
    _named(p, "topic", positional="topics")
    p.add_argument("--if-exists", action="store_true", help="a missing topic is not an error")

    # data
    p = _verb(areas, "produce", "send lines from stdin as records (one record per line)")
    _topic_option(p)
    p.add_argument("--key-separator", metavar="SEP", help="split each line into KEY SEP VALUE at the first SEP")
    p.add_argument("--partition", type=int, help="send every record to this partition")
    p.add_argument("--header", action="append", metavar="KEY=VALUE", help="a header on every record (repeatable)")
    p = _verb(areas, "consume", "print records (value per line) from a consumer group or a partition")
    _topic_option(p)
    p.add_argument("--group", help="consume as this consumer group (commits its positions)")
    p.add_argument("--partition", type=int, help="read this partition without a group")
    p.add_argument("--offset", default=None, help="with --partition: an offset, 'earliest' or 'latest'")
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset when none is committed")
    p.add_argument("--max-messages", type=int, help="stop after this many records")
    p.add_argument(
        "--timeout-ms", type=int, help="stop after this long without a record, counted once partitions are assigned"
    )
    p.add_argument(
        "-e", "--exit-at-end", action="store_true", help="stop once every partition reached the end it had at start"
    )
    p.add_argument("--print-key", action="store_true", help="print KEY<separator>VALUE")
    p.add_argument("--key-separator", default="\t", metavar="SEP", help="with --print-key (default: tab)")
    p.add_argument("--format", metavar="FMT", help=FORMAT_HELP)
    p = _verb(areas, "share-consume", "print records from a share group, acknowledging each explicitly")
    _topic_option(p)
    p.add_argument("--group", required=True, help="the share group")
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="set the group's share.auto.offset.reset=earliest first (a new share group starts at the latest offset)",
    )
    p.add_argument("--max-messages", type=int, help="stop after this many deliveries")
    p.add_argument(
        "--timeout-ms", type=int, help="stop after this long without a record, counted once partitions are assigned"
    )
    p.add_argument("--release", metavar="REGEX", help="RELEASE records whose value matches (redelivered later)")
    p.add_argument("--reject", metavar="REGEX", help="REJECT records whose value matches (never delivered again)")
    p.add_argument("--print-key", action="store_true", help="print KEY<separator>VALUE")
    p.add_argument("--key-separator", default="\t", metavar="SEP")
    p.add_argument("--format", metavar="FMT", help=FORMAT_HELP)

    # consumer groups
    groups = areas.add_parser(
        "groups", aliases=["consumer-groups"], help="list, describe, reset and delete groups (kafka-consumer-groups.sh)"
    )
    gv = groups.add_subparsers(dest="verb", metavar="VERB", required=True)
    p = _verb(gv, "list", "list group ids")
    p.add_argument(
        "--type",
        action="append",
        nargs="?",
        choices=("classic", "consumer", "share"),
        help="only these types; alone: print the TYPE column",
    )
    p.add_argument(
        "--state", action="append", nargs="?", help="only groups in this state (e.g. Stable, Empty); alone: columns"
    )
    p.add_argument("-l", "--long", action="store_true", help="print GROUP TYPE PROTOCOL STATE")
    _output(p)
    p = _verb(gv, "describe", "offsets and lag of consumer groups (or --members / --state; epochs for KIP-848 groups)")
    _group_options(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--offsets", action="store_true", help="offsets and lag (the default)")
    mode.add_argument("--members", action="store_true")
    mode.add_argument("--state", action="store_true")
    p.add_argument("--verbose", action="store_true", help="accepted for kafka-consumer-groups.sh's sake")
    _output(p)
    p = _verb(gv, "reset-offsets", "move the committed offsets of an empty consumer group")
    _reset_options(p)
    p = _verb(gv, "delete", "delete consumer groups (they must be empty)")
    _group_options(p)

    # configs
    configs = areas.add_parser("configs", help="describe and change topic, broker and group configs")
    cv = configs.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name, text in (("describe", "configs of one resource"), ("alter", "change configs of one resource")):
        p = _verb(cv, name, text)
        which = p.add_mutually_exclusive_group()
        which.add_argument("--topic", metavar="TOPIC")
        which.add_argument("--broker", metavar="ID", nargs="?", const="", help="default: the broker answering")
        which.add_argument("--group", metavar="GROUP", help="a group's configs (share.auto.offset.reset, ...)")
        which.add_argument(
            "--entity-type",
            choices=("topics", "brokers", "groups"),
            help="kafka-configs.sh's spelling, with --entity-name",
        )
        p.add_argument("--entity-name", metavar="NAME", help="with --entity-type")
        if name == "describe":
            p.add_argument("--all", action="store_true", help="defaults too, not only overrides")
            _output(p)
        else:
            p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
            p.add_argument("--delete", action="append", default=[], metavar="KEY")
            p.add_argument("--append", action="append", default=[], metavar="KEY=VALUE", help="to a list config")
            p.add_argument("--subtract", action="append", default=[], metavar="KEY=VALUE", help="from a list config")
            p.add_argument(
                "--add-config", action="append", default=[], metavar="K=V,K2=[A,B]", help="kafka-configs.sh's --set"
            )
            p.add_argument(
                "--delete-config", action="append", default=[], metavar="K,K2", help="kafka-configs.sh's --delete"
            )

    # share groups
    share = areas.add_parser("share-groups", help="the kafka-share-groups.sh verbs")
    sv = share.add_subparsers(dest="verb", metavar="VERB", required=True)
    p = _verb(sv, "list", "list share groups")
    p.add_argument("--state", nargs="?", const="", default=None, help="print states too; STATE filters (comma list)")
    _output(p)
    p = _verb(sv, "describe", "start offsets and lag of share groups (or --members / --state)")
    _group_options(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--offsets", action="store_true", help="start offsets and lag (the default)")
    mode.add_argument("--members", action="store_true")
    mode.add_argument("--state", action="store_true")
    p.add_argument("--verbose", action="store_true", help="with offsets: the leader epoch too")
    _output(p)
    p = _verb(sv, "reset-offsets", "move the start offsets of an empty share group")
    _reset_options(p)
    p = _verb(sv, "delete-offsets", "forget an empty share group's offsets for whole topics")
    p.add_argument("--group", required=True)
    p.add_argument("--topic", action="append", required=True, metavar="TOPIC")
    p = _verb(sv, "delete", "delete share groups (they must be empty)")
    _group_options(p)

    from shoal.client.cli import acls as cli_acls

    cli_acls.add_parsers(areas, _verb, _output)
    # SCRAM users (cli/users.py)
    from shoal.client.cli import users as cli_users

    cli_users.add_parsers(areas.add_parser("users", help="add, list and delete SCRAM users"), _verb)
    # mirror to another cluster (cli/mirror.py)
    from shoal.client.cli import mirror as cli_mirror

    cli_mirror.add_parser(areas, EXIT_CODES, _connection_options)
    return parser


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """Client settings from --command-config, --property and --bootstrap-server (later wins)."""
    settings: dict[str, Any] = {}
    for level in ("top", "verb"):
        path = getattr(args, f"command_config_{level}", None)
        if path:
            try:
                with open(path, encoding="utf-8") as f:
                    settings.update(parse_properties(f.read()))
            except OSError as e:
                raise UsageError(f"--command-config {path}: {e.strerror or e}") from None
    for level in ("top", "verb"):
        settings.update(parse_key_values(getattr(args, f"property_{level}", []) or [], "--property"))
    bootstrap = getattr(args, "bootstrap_verb", None) or getattr(args, "bootstrap_top", None)
    if bootstrap:
        settings["bootstrap.servers"] = bootstrap
    settings.setdefault("bootstrap.servers", DEFAULT_BOOTSTRAP)
    settings.setdefault("client.id", "shoal-cli")
    return settings


_VALUED = frozenset({"--bootstrap-server", "--command-config", "--command-property", "--property"})


def _handler(args: argparse.Namespace) -> Any:
    if args.area in _DATA_VERBS:
        topic = args.topic if args.topic is not None else args.topic_opt
        if topic is None or args.topic_opt not in (None, topic):
            raise UsageError(f"{args.area} needs one topic: TOPIC or --topic TOPIC")
        args.topic = topic
        try:
            from shoal.client.cli import data as cli_data
        except ImportError as e:  # a build without the producer/consumers
            raise KafkaClientError(f"{args.area} is not available: {e}") from None
        return cli_data.VERBS[args.area]
    if args.area == "acls":
        from shoal.client.cli import acls as cli_acls

        return cli_acls.VERBS[args.verb]
    if args.area == "mirror":
        from shoal.client.cli import mirror as cli_mirror

        return cli_mirror.run
    if args.area == "users":
        from shoal.client.cli import users as cli_users

        return cli_users.VERBS[args.verb]
    from shoal.client.cli import admin as cli_admin

    area = "groups" if args.area == "consumer-groups" else args.area
    return cli_admin.VERBS[(area, args.verb)]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (0 ok, 1 operation failed, 2 usage/config error)."""
    parser = build_parser()
    try:
        argv = kafka_actions(sys.argv[1:] if argv is None else argv, _VALUED)
    except UsageError as e:
        print(f"shoal: error: {e}", file=sys.stderr)
        return 2
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # unknown options of a verb: its usage, not the top-level one
            getattr(args, "verb_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code or 0) if isinstance(e.code, int) else 2
    try:
        settings = _settings(args)
        return asyncio.run(_handler(args)(args, settings))
    except (UsageError, ConfigError) as e:
        print(f"shoal: error: {e}", file=sys.stderr)
        return 2
    except KafkaClientError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (| head): not an error; keep Python from complaining at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as e:  # the one-line contract holds for bugs too
        if os.environ.get("SHOAL_DEBUG"):
            raise
        print(f"Error: unexpected {type(e).__name__}: {e} (set SHOAL_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
