"""``shoal ... --output json``, Kafka's spellings and progress bars, against a real broker.

Every list and describe command's JSON is validated against its documented shape
(``shoal.client.cli.shapes``) and its values are judged by something other than the CLI:
librdkafka's admin and consumer, raw protocol requests, what the test produced. Progress is
judged both ways: a pipe gets no bar (nor escape codes), a terminal (a pty) gets one.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import subprocess
import sys
import threading
import time

import pytest

from shoal.client.cli.main import _VALUED, build_parser
from shoal.client.cli.shapes import SHAPES, validate
from shoal.client.cli.support import UsageError, kafka_actions, split_config_list
from tests.support.brokers import ROOT, InProcessBroker
from tests.support.cli import run_cli
from tests.support.wire import raw_share_offsets

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

FAST = (
    "offsets.topic.num.partitions=2",
    "share.coordinator.state.topic.num.partitions=2",
    "group.initial.rebalance.delay.ms=0",
    "group.share.min.heartbeat.interval.ms=200",
    "group.share.heartbeat.interval.ms=200",
    "group.share.assignment.interval.ms=0",
)
ESC = "\x1b"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = InProcessBroker(tmp_path_factory.mktemp("cli-json") / "data", FAST).start()
    yield b
    b.stop()


def run(
    *args: str, stdin=None, stderr_tty: bool = False, process: bool = False, timeout: float = 90
) -> tuple[int, str, str]:
    """The CLI: (exit code, stdout, stderr). ``main(argv)`` in this process (``tests.support.cli``)
    unless the process is the point (``process``: real pipes; ``stderr_tty``: stderr on a pty;
    stdin an open file, whose size gives the bar its total): then a subprocess."""
    if not (process or stderr_tty) and (stdin is None or isinstance(stdin, str)):
        return run_cli(*args, stdin=stdin, timeout=timeout)
    argv = [sys.executable, "-m", "shoal.client.cli.main", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "TERM": "xterm"}
    if isinstance(stdin, str):
        stdin_arg: dict = {"input": stdin.encode()}
    else:
        stdin_arg = {"stdin": stdin if stdin is not None else subprocess.DEVNULL}
    if not stderr_tty:
        p = subprocess.run(argv, capture_output=True, cwd=ROOT, env=env, timeout=timeout, **stdin_arg)
        return p.returncode, p.stdout.decode(), p.stderr.decode()
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:  # read while it runs: a full pty would block the CLI's writes
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the other side is closed and drained
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, env=env, timeout=timeout, **stdin_arg)
    finally:
        os.close(slave)
        reader.join(10)
        os.close(master)
    return p.returncode, p.stdout.decode(), b"".join(chunks).decode(errors="replace")


def doc(command: str, *args: str) -> dict:
    """Run a list/describe command with --output json; its document, checked against its shape."""
    rc, out, err = run(*args, "--output", "json")
    assert rc == 0, err
    value = json.loads(out)
    problems = validate(value, SHAPES[command])
    assert problems == [], problems
    return value


def produce(b, topic: str, counts: dict[int, int]) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap, "log_level": 0, "linger.ms": 2})
    for partition, n in counts.items():
        for i in range(n):
            p.produce(topic, value=f"p{partition}-{i}".encode(), partition=partition)
    assert p.flush(15) == 0


# -- pure parts ---------------------------------------------------------------------------------


def test_the_validator_catches_what_a_script_would_trip_on() -> None:
    shape = SHAPES["share-groups list"]
    assert validate({"groups": [{"group": "g", "state": None}]}, shape) == []
    assert validate({"groups": [{"group": "g"}]}, shape) == ["$.groups[0]: missing key 'state'"]
    assert validate({"groups": [{"group": 1, "state": "Empty"}]}, shape)[0].startswith("$.groups[0].group: expected")
    assert validate({"groups": [], "extra": 1}, shape) == ["$: unexpected key 'extra'"]
    assert validate({"groups": {}}, shape)[0].startswith("$.groups: expected array")
    reset = SHAPES["share-groups reset-offsets"]
    good = {
        "group": "g",
        "executed": True,
        "offsets": [{"topic": "t", "partition": 0, "new_offset": 3}],
        "warnings": [],
    }
    assert validate(good, reset) == []
    assert validate({**good, "executed": 1}, reset) != []  # an integer is not a boolean
    assert validate({**good, "offsets": [{"topic": "t", "partition": True, "new_offset": 3}]}, reset) != []
    configs = SHAPES["configs describe"]
    assert validate({"resource": {"type": "table", "name": "x"}, "configs": []}, configs) != []
    # Every shape names every key of every object as required: scripts never need a default.
    stack = list(SHAPES.values())
    while stack:
        s = stack.pop()
        if s.get("type") == "object" and "properties" in s:
            assert sorted(s["required"]) == sorted(s["properties"]) and s["additionalProperties"] is False
            stack += s["properties"].values()
        if "items" in s:
            stack.append(s["items"])


def test_kafka_action_flags_become_verbs() -> None:
    def rw(*argv: str) -> list[str]:
        return kafka_actions(list(argv), _VALUED)

    assert rw("--bootstrap-server", "h:1", "topics", "--describe", "--topic", "t") == [
        "--bootstrap-server", "h:1", "topics", "describe", "--topic", "t",
    ]  # fmt: skip
    assert rw("consumer-groups", "--group", "g", "--describe", "--members") == [
        "consumer-groups", "describe", "--group", "g", "--members",
    ]  # fmt: skip
    assert rw("share-groups", "--reset-offsets", "--group", "g") == ["share-groups", "reset-offsets", "--group", "g"]
    # shoal's own verbs are left alone, and so is configs alter's --delete KEY.
    assert rw("topics", "list", "--describe") == ["topics", "list", "--describe"]
    assert rw("configs", "--alter", "--topic", "t", "--delete", "k") == [
        "configs",
        "alter",
        "--topic",
        "t",
        "--delete",
        "k",
    ]
    with pytest.raises(UsageError):
        rw("topics", "--list", "--describe")
    assert split_config_list("a=1,b=[x,y],c=") == ["a=1", "b=x,y", "c="]


def test_every_verb_takes_bootstrap_server_and_every_list_and_describe_takes_output() -> None:
    top = build_parser()
    areas = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    seen = 0
    for area, area_parser in areas.choices.items():
        verb_parsers = (
            {area: area_parser}
            if area in ("produce", "consume", "share-consume", "mirror")
            else next(a for a in area_parser._actions if a.dest == "verb").choices
        )
        for verb, vp in verb_parsers.items():
            options = {o for a in vp._actions for o in a.option_strings}
            assert {"--bootstrap-server", "--command-config", "--command-property"} <= options, (area, verb)
            if verb in ("list", "describe") or f"{area} {verb}" in SHAPES:
                assert "--output" in options, (area, verb)
                assert f"{'groups' if area == 'consumer-groups' else area} {verb}" in SHAPES, (area, verb)
            seen += 1
    assert seen >= 20


# -- against a broker ---------------------------------------------------------------------------


def test_topics_json_and_kafka_spellings(broker, topic_name) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    rc, out, err = run(
        "topics", "--create", "--topic", topic_name, "--partitions", "3", "--config", "retention.ms=60000", *bs
    )
    assert rc == 0 and out.strip() == f"Created topic {topic_name}.", err
    listed = doc("topics list", "topics", "--list", *bs)["topics"]
    by_name = {t["name"]: t for t in listed}
    assert by_name[topic_name]["internal"] is False and by_name["__consumer_offsets"]["internal"] is True
    assert [t["name"] for t in doc("topics list", "topics", "list", "--exclude-internal", *bs)["topics"]].count(
        "__consumer_offsets"
    ) == 0
    (t,) = doc("topics describe", "topics", "--describe", "--topic", topic_name, *bs)["topics"]
    ck = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0}).list_topics(timeout=10).topics[topic_name]
    assert t["name"] == topic_name and t["partition_count"] == 3 and t["replication_factor"] == 1
    assert t["configs"] == {"retention.ms": "60000"}
    assert [(p["partition"], p["leader"], p["replicas"]) for p in t["partitions"]] == [
        (i, ck.partitions[i].leader, list(ck.partitions[i].replicas)) for i in range(3)
    ]
    # Top-level and verb-level --bootstrap-server: the verb's wins.
    rc, out, err = run("--bootstrap-server", "127.0.0.1:1", "topics", "list", *bs)
    assert rc == 0 and topic_name in out.splitlines(), err
    # kafka-configs.sh's spelling; the JSON says what the broker now holds.
    rc, _, err = run("configs", "--alter", "--entity-type", "topics", "--entity-name", topic_name,
                     "--add-config", "retention.ms=1000,max.message.bytes=2000", *bs)  # fmt: skip
    assert rc == 0, err
    described = doc("configs describe", "configs", "--describe", "--topic", topic_name, *bs)
    assert described["resource"] == {"type": "topic", "name": topic_name}
    values = {c["name"]: (c["value"], c["source"]) for c in described["configs"]}
    assert values["retention.ms"] == ("1000", "DYNAMIC_TOPIC_CONFIG")
    assert values["max.message.bytes"] == ("2000", "DYNAMIC_TOPIC_CONFIG")
    assert run("topics", "--delete", "--topic", topic_name, *bs)[0] == 0
    assert topic_name not in run("topics", "list", *bs)[1].splitlines()


def test_consumer_group_json_lag_is_produced_minus_committed(broker, topic_name) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    group = topic_name + "-g"
    assert run("topics", "create", topic_name, "--partitions", "2", *bs)[0] == 0
    produce(broker, topic_name, {0: 7, 1: 3})
    c = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "log_level": 0, "client.id": "judge"}
    )
    c.subscribe([topic_name])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(c.assignment()) < 2:
        c.poll(0.2)
    TP = confluent_kafka.TopicPartition
    c.commit(offsets=[TP(topic_name, 0, 3), TP(topic_name, 1, 1)], asynchronous=False)
    try:
        groups = {g["group"]: g for g in doc("groups list", "consumer-groups", "--list", *bs)["groups"]}
        assert groups[group] == {"group": group, "type": "classic", "protocol_type": "consumer", "state": "Stable"}
        # Bare --state asks for the columns (Kafka's --list --state); a filter value keeps ids alone.
        rc, out, _ = run("consumer-groups", "--list", "--state", *bs)
        assert rc == 0 and [group, "classic", "consumer", "Stable"] in [line.split() for line in out.splitlines()]
        rc, out, _ = run("groups", "list", "--type", "classic", *bs)
        assert rc == 0 and group in out.splitlines()
        (g,) = doc("groups describe", "consumer-groups", "--describe", "--group", group, *bs)["groups"]
        assert g["group"] == group and g["state"] == "Stable" and len(g["members"]) == 1
        (m,) = g["members"]
        assert m["client_id"] == "judge" and m["assignment"] == [
            {"topic": topic_name, "partition": 0},
            {"topic": topic_name, "partition": 1},
        ]
        got = [
            (o["partition"], o["current_offset"], o["log_end_offset"], o["lag"], o["consumer_id"]) for o in g["offsets"]
        ]
        assert got == [(0, 3, 7, 4, m["consumer_id"]), (1, 1, 3, 2, m["consumer_id"])]
        # The text table has kafka-consumer-groups.sh's columns, in its order.
        rc, out, err = run("consumer-groups", "--describe", "--group", group, *bs)
        assert rc == 0, err
        assert out.splitlines()[0].split() == [
            "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID",
        ]  # fmt: skip
        assert out.splitlines()[1].split()[:6] == [group, topic_name, "0", "3", "7", "4"]
        # A live group refuses a reset, with Kafka's error.
        rc, _, err = run(
            "groups", "--reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute", *bs
        )
        assert rc == 1 and "NON_EMPTY_GROUP" in err
    finally:
        c.close()
    plan = doc("groups reset-offsets", "groups", "reset-offsets", "--group", group, "--all-topics", "--to-offset", "2",
               "--execute", *bs)  # fmt: skip
    assert plan["executed"] is True and [(o["partition"], o["new_offset"]) for o in plan["offsets"]] == [(0, 2), (1, 2)]
    assert len(plan["warnings"]) == 0
    ck = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    req = confluent_kafka.ConsumerGroupTopicPartitions(group, [TP(topic_name, 0), TP(topic_name, 1)])
    committed = ck.list_consumer_group_offsets([req])[group].result(10)
    assert sorted((tp.partition, tp.offset) for tp in committed.topic_partitions) == [(0, 2), (1, 2)]
    (g,) = doc("groups describe", "groups", "describe", group, "--state", *bs)["groups"]  # JSON is whole anyway
    assert g["state"] == "Empty" and g["members"] == []
    assert [(o["partition"], o["lag"], o["consumer_id"]) for o in g["offsets"]] == [(0, 5, None), (1, 1, None)]
    rc, out, err = run("groups", "--delete", "--group", group, *bs)
    assert rc == 0 and out.strip() == f"Deleted consumer group '{group}'.", err


def test_share_group_json_matches_the_broker(broker, topic_name) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    group = topic_name + "-sg"
    assert run("topics", "create", "--topic", topic_name, *bs)[0] == 0
    rc, _, err = run("configs", "--alter", "--entity-type", "groups", "--entity-name", group,
                     "--add-config", "share.auto.offset.reset=earliest", *bs)  # fmt: skip
    assert rc == 0, err
    produce(broker, topic_name, {0: 10})
    rc, out, err = run("share-consume", "--topic", topic_name, "--group", group, "--max-messages", "4", *bs)
    assert rc == 0 and out.splitlines() == [f"p0-{i}" for i in range(4)], err
    assert raw_share_offsets(broker.port, group) == {(topic_name, 0): (4, 6)}

    listed = {g["group"]: g for g in doc("share-groups list", "share-groups", "--list", *bs)["groups"]}
    assert group in listed
    (g,) = doc("share-groups describe", "share-groups", "--describe", "--group", group, *bs)["groups"]
    assert g["group"] == group and g["state"] in ("Empty", "Stable")
    assert [(o["topic"], o["partition"], o["start_offset"], o["lag"]) for o in g["offsets"]] == [(topic_name, 0, 4, 6)]
    rc, out, _ = run("share-groups", "--describe", "--group", group, *bs)
    assert [line.split() for line in out.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
        [group, topic_name, "0", "4", "6"],
    ]
    cfg = doc("configs describe", "configs", "describe", "--group", group, *bs)
    assert {"name": "share.auto.offset.reset", "value": "earliest", "source": "GROUP_CONFIG", "read_only": False,
            "sensitive": False} in cfg["configs"]  # fmt: skip
    # Wait for the CLI's member to be gone, then a dry run (no change) and a clamped execute.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        (g,) = doc("share-groups describe", "share-groups", "describe", group, *bs)["groups"]
        if g["state"] == "Empty":
            break
        time.sleep(0.5)
    assert g["state"] == "Empty" and g["members"] == []
    plan = doc("share-groups reset-offsets", "share-groups", "--reset-offsets", "--group", group, "--topic", topic_name,
               "--to-offset", "99", "--dry-run", *bs)  # fmt: skip
    assert plan["executed"] is False and plan["offsets"] == [{"topic": topic_name, "partition": 0, "new_offset": 10}]
    assert len(plan["warnings"]) == 1 and "higher than latest" in plan["warnings"][0]
    assert raw_share_offsets(broker.port, group) == {(topic_name, 0): (4, 6)}
    plan = doc("share-groups reset-offsets", "share-groups", "reset-offsets", "--group", group, "--all-topics",
               "--to-earliest", "--execute", *bs)  # fmt: skip
    assert plan["executed"] is True and raw_share_offsets(broker.port, group) == {(topic_name, 0): (0, 10)}
    rc, out, err = run("share-groups", "--delete", "--group", group, *bs)
    assert rc == 0 and out.strip() == f"Deleted share group '{group}'.", err


def test_progress_only_on_a_terminal(broker, topic_name, tmp_path) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    assert run("topics", "create", topic_name, *bs)[0] == 0
    data = tmp_path / "lines.txt"
    data.write_text("".join(f"line-{i}\n" for i in range(2000)))
    # Piped: stdout empty, stderr exactly Kafka's closing line, no escape codes.
    with open(data, "rb") as f:
        rc, out, err = run("produce", "--topic", topic_name, *bs, stdin=f)
    assert rc == 0 and out == "" and err == "Processed a total of 2000 messages\n"
    rc, out, err = run("consume", topic_name, "--from-beginning", "--max-messages", "1500", *bs, process=True)
    assert rc == 0 and out.splitlines() == [f"line-{i}" for i in range(1500)]
    assert err == "Processed a total of 1500 messages\n"
    # stderr a terminal: a bar (escape codes, the verb's description), and stdout just as clean.
    with open(data, "rb") as f:
        rc, out, err = run("produce", topic_name, *bs, stdin=f, stderr_tty=True)
    assert rc == 0 and out == "", err
    assert ESC in err and f"Producing to {topic_name}" in err and "bytes" in err
    assert "Processed a total of 2000 messages" in err
    rc, out, err = run("consume", topic_name, "--from-beginning", "--max-messages", "3000", *bs, stderr_tty=True)
    assert rc == 0 and ESC not in out and len(out.splitlines()) == 3000, err
    assert out.splitlines()[:2] == ["line-0", "line-1"]
    assert ESC in err and f"Consuming {topic_name}" in err and "Processed a total of 3000 messages" in err
    # Listing commands print no bar even on a terminal, and JSON on a pipe stays parseable.
    rc, out, err = run("topics", "list", "--output", "json", *bs, stderr_tty=True)
    assert rc == 0 and json.loads(out)["topics"] and ESC not in err
