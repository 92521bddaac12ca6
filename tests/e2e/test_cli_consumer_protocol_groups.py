"""``shoal groups describe`` on a KIP-848 consumer group: the protocol, the group and assignment
epochs, each member's epoch and its current and target assignment (ConsumerGroupDescribe), in
the --state and --members tables and in JSON; a classic group keeps its classic answer."""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer

from shoal.client.cli.shapes import SHAPES, validate
from tests.e2e.test_client_cli import rows, shoal
from tests.e2e.test_consumer_group_protocol import SETTINGS, consumer_config, wait_for
from tests.support.clients import create_topic


def test_groups_describe_shows_consumer_protocol_epochs(broker_factory) -> None:
    b = broker_factory(*SETTINGS).start()
    topic, group = "cli848", "g-cli848"
    create_topic(b.bootstrap, topic, 4)
    members = [Consumer(consumer_config(b.bootstrap, group)) for _ in range(2)]
    for c in members:
        c.subscribe([topic])

    def settled() -> bool:
        for c in members:
            c.poll(0.05)
        return all(len(c.assignment()) == 2 for c in members)

    try:
        wait_for(settled, 60, "two members with two partitions each")
        deadline = time.monotonic() + 20
        while True:  # the acknowledgements reach the coordinator with the next heartbeats
            for c in members:
                c.poll(0.05)
            rc, out, err = shoal("groups", "describe", group, "--output", "json", b=b)
            assert rc == 0, err
            doc = json.loads(out)
            assert validate(doc, SHAPES["groups describe"]) == []
            (g,) = doc["groups"]
            if all(m["assignment"] == m["target_assignment"] and m["assignment"] for m in g["members"]):
                break
            assert time.monotonic() < deadline, g
        assert g["protocol"] == "consumer" and g["state"] == "Stable" and g["assignment_strategy"] == "uniform"
        assert g["group_epoch"] >= 2 and g["assignment_epoch"] == g["group_epoch"]
        assert all(m["member_epoch"] == g["assignment_epoch"] for m in g["members"])
        assert all(m["subscribed_topics"] == [topic] for m in g["members"])
        held = sorted((p["topic"], p["partition"]) for m in g["members"] for p in m["assignment"])
        assert held == [(topic, p) for p in range(4)]

        rc, out, err = shoal("groups", "describe", group, "--state", b=b)
        assert rc == 0, err
        header, line = out.strip().splitlines()
        assert header.split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "PROTOCOL", "STATE",
                                  "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]  # fmt: skip
        assert line.split()[2:] == ["uniform", "consumer", "Stable", str(g["group_epoch"]),
                                    str(g["assignment_epoch"]), "2"]  # fmt: skip

        rc, out, err = shoal("groups", "describe", group, "--members", b=b)
        assert rc == 0, err
        table = rows(out)
        assert table[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                            "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]  # fmt: skip
        by_id = {m["consumer_id"]: m for m in g["members"]}
        for r in table[1:]:
            m = by_id[r[1]]
            assert r[4:] == ["2", str(m["member_epoch"]), r[6], str(g["assignment_epoch"]), r[6]]
            assert r[6] == f"{topic}:" + ".".join(str(p["partition"]) for p in m["assignment"])

        rc, out, err = shoal("groups", "describe", group, b=b)  # the lag table serves both kinds
        assert rc == 0, err
        assert {r[6] for r in rows(out)[1:]} == set(by_id)
    finally:
        for c in members:
            c.close()
