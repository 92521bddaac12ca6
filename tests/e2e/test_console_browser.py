"""The web console in a real browser: Debian's headless Chromium, driven by selenium, against a
real broker (issue #20).

The scenario: 1,000 records; one share consumer accepts, one rejects every 7th record, one
holds its records with RENEW past their lock duration. The share-group page's counts, its
start and end offsets, lag and every offset's state, delivery count and owner (read from the
DOM the browser built, after live updates ran) are compared with DescribeShareGroupOffsets
(AsyncAdmin) and with the broker's own share-partition state. Screenshots of every page go to
the test's tmp dir. Then bad input: unknown groups and topics, absurd offsets, markup in keys,
values and names (shown as text, nothing runs), and POST/PUT/DELETE refused. The console sits
behind the same basic auth as /metrics once SASL users exist.

Needs Debian's chromium and chromium-driver: the test installs them when it runs as root
(tests/support/debian.py) and skips, saying so, otherwise.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter

import pytest

from shoal.client.admin.client import AsyncAdmin
from shoal.client.core.cluster import TopicPartition
from shoal.client.share.consumer import AcknowledgeType, AsyncShareConsumer
from shoal.testing import EmbeddedBroker
from tests.support.debian import need_programs

webdriver = pytest.importorskip("selenium.webdriver")
confluent_kafka = pytest.importorskip("confluent_kafka")


TOPIC, GROUP, DLQ = "orders", "workers", "dlq.orders"
RECORDS, HELD = 1000, 40
LOCK_S = 5.0  # the group's record lock duration
EVIL = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2;alert(1)</script>'


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(fast_timers=True) as b:
        yield b


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    found = need_programs({"chromium": "chromium", "chromedriver": "chromium-driver"})
    if isinstance(found, str):
        pytest.skip(found)
    opts = webdriver.ChromeOptions()
    opts.binary_location = found["chromium"]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(found["chromedriver"]), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def http(port: int, path: str, method: str = "GET", auth: tuple[str, str] | None = None) -> tuple[int, str]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method=method, data=b"x" if method != "GET" else None
    )
    if auth is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def produce(bootstrap: str, topic: str, values: list[tuple[bytes | None, bytes]]) -> None:
    # small log batches: share consumers acquire whole batches, and the three should each get some
    p = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 5, "batch.num.messages": 20}
    )
    for key, value in values:
        p.produce(topic, key=key, value=value, partition=0, headers=[("source", b"test")])
    assert p.flush(10) == 0


def screenshot(driver, path) -> None:
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(max(int(height), 600), 4000))
    assert driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)


def page_state(driver) -> dict:
    """What the share-group page shows for partition 0, read from the live DOM."""
    return driver.execute_script(
        """
        const sec = document.querySelector('section.sp[data-key="orders/0"]');
        const field = (f) => Number(sec.querySelector('[data-field="' + f + '"]').textContent.replace(/,/g, ''));
        const counts = {};
        for (const td of sec.querySelectorAll('td[data-state]')) counts[td.dataset.state] = Number(td.textContent.replace(/,/g, ''));
        const runs = Array.from(sec.querySelectorAll('svg.strip rect')).map((r) => [
            Number(r.dataset.first), Number(r.dataset.last), r.dataset.state, Number(r.dataset.deliveries),
            r.dataset.member || null, r.querySelector('title').textContent]);
        return {spso: field('spso'), speo: field('speo'), lag: field('lag'), counts: counts, runs: runs,
                updates: Number(document.body.dataset.updates || '0')};
        """
    )


def per_offset(ranges) -> dict[int, tuple[str, int, str | None]]:
    return {o: (state, count, member) for a, b, state, count, member in ranges for o in range(a, b + 1)}


async def test_share_group_page_matches_the_broker_and_describe_offsets(broker, browser, tmp_path) -> None:
    broker.create_topic(TOPIC, 1)
    broker.create_topic(DLQ, 1, {"errors.deadletterqueue.group.enable": "true"})  # KIP-1191's opt-in
    broker.set_group_config(
        GROUP,
        {
            "share.auto.offset.reset": "earliest",
            "share.record.lock.duration.ms": int(LOCK_S * 1000),
            "errors.deadletterqueue.topic.name": DLQ,
        },
    )
    values = [
        (f"order-{i}".encode(), json.dumps({"order": i, "item": "widget", "qty": i % 5 + 1}).encode())
        for i in range(RECORDS)
    ]
    await asyncio.to_thread(produce, broker.bootstrap_servers, TOPIC, values)

    cfg = {"bootstrap.servers": broker.bootstrap_servers, "group.id": GROUP, "share.acquire.mode": "record_limit"}
    holder = AsyncShareConsumer(cfg, client_id="holder", share_acknowledgement_mode="explicit", max_poll_records=HELD)
    accepter = AsyncShareConsumer(cfg, client_id="accepter", max_poll_records=50)
    rejecter = AsyncShareConsumer(
        cfg, client_id="rejecter", share_acknowledgement_mode="explicit", max_poll_records=100
    )
    stop = asyncio.Event()
    renewals = 0

    async def hold(held: list) -> None:
        nonlocal renewals
        while not stop.is_set():
            await asyncio.sleep(0.8)
            for r in held:
                holder.acknowledge(r, AcknowledgeType.RENEW)
            back = await holder.poll(1000)  # the renewed records come back with fresh locks
            if back:
                held[:] = back
                renewals += 1

    async with holder, accepter, rejecter:
        holder.subscribe([TOPIC])
        held: list = []
        deadline = time.monotonic() + 30
        while not held and time.monotonic() < deadline:
            held = await holder.poll(500)
        assert held and held[0].offset == 0, "the holder takes the first records"
        holding = asyncio.create_task(hold(held))
        held_since = time.monotonic()
        accepter.subscribe([TOPIC])
        rejecter.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while not (accepter.assignment() and rejecter.assignment()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # both in the group before either fetches: each gets a share
        seen: Counter = Counter()
        rejected: set[int] = set()

        async def drain(sc: AsyncShareConsumer, name: str) -> None:
            while sum(seen.values()) < RECORDS - len(held) and time.monotonic() < deadline:
                for r in await sc.poll(300):
                    seen[name] += 1
                    if name == "rejecter":
                        reject = r.offset % 7 == 0
                        sc.acknowledge(r, AcknowledgeType.REJECT if reject else AcknowledgeType.ACCEPT)
                        if reject:
                            rejected.add(r.offset)
                await asyncio.sleep(0.02)  # let the other consumer fetch too
            assert await sc.commit_sync() is not None

        deadline = time.monotonic() + 60
        await asyncio.gather(drain(accepter, "accepter"), drain(rejecter, "rejecter"))
        assert sum(seen.values()) == RECORDS - len(held) and seen["rejecter"] and seen["accepter"]
        held_offsets = {r.offset for r in held}

        # the broker settles: only the holder's records acquired, no write pending
        want = {"ACQUIRED": len(held), "ARCHIVED": len(rejected), "ACKNOWLEDGED": RECORDS - len(held) - len(rejected)}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            st = await asyncio.to_thread(broker.share_partition_state, GROUP, TOPIC, 0)
            got = Counter(s for s, _c, _m in per_offset(st.ranges).values()) if st else Counter()
            if {k: got.get(k, 0) for k in want} == want:
                break
            await asyncio.sleep(0.1)
        assert {k: got.get(k, 0) for k in want} == want

        # the page is read after the first locks would have run out: the holder's records are still its own
        await asyncio.sleep(max(0.0, held_since + LOCK_S + 0.5 - time.monotonic()))
        base = f"http://127.0.0.1:{broker.http_port}/console"
        shots = tmp_path / "screenshots"
        shots.mkdir()
        await asyncio.to_thread(browser.get, base + "/share-groups/" + GROUP)
        # live updates: the page polls its JSON at most once a second and redraws
        await asyncio.sleep(3.5)
        shown = await asyncio.to_thread(page_state, browser)
        polls = await asyncio.to_thread(
            browser.execute_script,
            "return performance.getEntriesByType('resource').filter(e => e.name.includes('/console/api/')).length",
        )
        assert 2 <= shown["updates"] and 2 <= polls <= 4, (shown["updates"], polls)
        st = await asyncio.to_thread(broker.share_partition_state, GROUP, TOPIC, 0)
        async with AsyncAdmin(bootstrap_servers=broker.bootstrap_servers) as admin:
            described = await admin.list_share_group_offsets(GROUP)
        await asyncio.to_thread(screenshot, browser, shots / "share-group.png")

        # the page against the broker's own share-partition state, offset by offset
        assert (shown["spso"], shown["speo"]) == (st.start_offset, st.end_offset) == (0, RECORDS - 1)
        page_offsets = per_offset((a, b, s, c, m) for a, b, s, c, m, _t in shown["runs"])
        assert page_offsets == per_offset(st.ranges)
        assert shown["counts"] == {"AVAILABLE": 0, "ARCHIVING": 0, **want}  # copies to the DLQ are done
        assert {
            o for o, (s, _c, m) in page_offsets.items() if s == "ACQUIRED" and m == holder.member_id
        } == held_offsets
        assert {o for o, (s, _c, _m) in page_offsets.items() if s == "ARCHIVED"} == rejected
        titles = [t for *_r, t in shown["runs"] if "ACQUIRED" in t]
        assert titles and all("lock until" in t and holder.member_id in t for t in titles)
        # ... and against DescribeShareGroupOffsets
        info = described[TopicPartition(TOPIC, 0)]
        assert info.start_offset == shown["spso"]
        assert info.lag == shown["lag"] == RECORDS - 0 - (RECORDS - len(held))
        assert renewals >= 2, "the holder kept its records past the lock duration by renewing"

        # members and their assignment, group configs
        members = await asyncio.to_thread(
            browser.execute_script,
            "return Array.from(document.querySelectorAll('tr[data-member]')).map(r => r.dataset.member)",
        )
        assert sorted(members) == sorted(sc.member_id for sc in (holder, accepter, rejecter))
        page_text = await asyncio.to_thread(lambda: browser.find_element("tag name", "main").text)
        assert "share.record.lock.duration.ms" in page_text and f"{TOPIC}: 0" in page_text

        # dead letters: every rejected record with its context headers
        await asyncio.to_thread(browser.get, base + "/dead-letters/" + GROUP)
        rows = await asyncio.to_thread(
            browser.execute_script,
            """return Array.from(document.querySelectorAll('table.dlq tbody tr[data-offset]')).map(r => {
                   const c = {}; for (const td of r.querySelectorAll('td[data-context]')) c[td.dataset.context] = td.textContent;
                   return c; })""",
        )
        assert sorted(int(r["offset"]) for r in rows) == sorted(rejected)
        assert {(r["topic"], r["partition"], r["message"]) for r in rows} == {
            (TOPIC, "0", "Offset rejected by client.")
        }
        # a record may have been delivered twice (a lock ran out in a slow client): as the page said
        assert all(int(r["delivery.count"]) == page_offsets[int(r["offset"])][1] for r in rows)
        await asyncio.to_thread(screenshot, browser, shots / "dead-letters.png")

        # overview and topic pages
        await asyncio.to_thread(broker.create_topic, "clicks", 1)
        await asyncio.to_thread(browser.get, base)
        for i in range(3):  # records arrive while the overview polls: its sparklines move
            await asyncio.to_thread(produce, broker.bootstrap_servers, "clicks", [(None, b"click %d" % i)] * 200)
            await asyncio.sleep(1.0)
        await asyncio.sleep(1.2)
        overview = await asyncio.to_thread(lambda: browser.find_element("tag name", "main").text)
        assert TOPIC in overview and GROUP in overview
        live = await asyncio.to_thread(
            browser.execute_script,
            """return [Number(document.body.dataset.updates || 0),
                       document.querySelector('span.spark[data-series="in:' + arguments[0] + '"] polyline') !== null,
                       document.querySelector('tr[data-topic="' + arguments[0] + '"] [data-col="records"]').textContent]""",
            "clicks",
        )
        assert live[0] >= 3 and live[1] and live[2] == "600", live
        await asyncio.to_thread(screenshot, browser, shots / "overview.png")
        await asyncio.to_thread(browser.get, base + f"/topics/{TOPIC}?partition=0&offset=990&count=20&format=json")
        offsets = await asyncio.to_thread(
            browser.execute_script,
            "return Array.from(document.querySelectorAll('table.records tbody tr[data-offset]')).map(r => Number(r.dataset.offset))",
        )
        assert offsets == list(range(990, 1000))
        value = await asyncio.to_thread(
            browser.execute_script,
            "return document.querySelector('tr[data-offset=\"995\"] pre[data-format=json]').textContent",
        )
        assert json.loads(value) == {"order": 995, "item": "widget", "qty": 1}
        await asyncio.to_thread(screenshot, browser, shots / "topic.png")
        stop.set()
        await holding
    for name in ("share-group", "dead-letters", "overview", "topic"):
        assert (shots / f"{name}.png").stat().st_size > 10_000


def _pwned(driver) -> object:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        driver.switch_to.alert.accept()
        return "alert"
    except NoAlertPresentException:
        pass
    return driver.execute_script("return window.__pwned || null")


def test_bad_input_is_shown_escaped_and_nothing_changes_state(broker, browser, tmp_path) -> None:
    broker.create_topic("evil", 2)
    produce(broker.bootstrap_servers, "evil", [(EVIL.encode(), EVIL.encode()), (b"\xff\xfe<b>", b"ok")])
    base = f"http://127.0.0.1:{broker.http_port}/console"
    evil_path = urllib.parse.quote(EVIL, safe="")

    for path, what in ((f"/share-groups/{evil_path}", "share group"), (f"/topics/{evil_path}", "topic")):
        assert http(broker.http_port, "/console" + path)[0] == 404
        browser.get(base + path)
        text = browser.find_element("id", "not-found").text
        assert EVIL in text and what in text
        assert _pwned(browser) is None
    assert http(broker.http_port, "/console/dead-letters/nobody")[0] == 404
    assert http(broker.http_port, "/console/api/share-groups/nobody")[0] == 404
    assert http(broker.http_port, "/console/no/such/page")[0] == 404

    # markup in keys and values: the DOM text is the raw string, no element was made of it
    browser.get(base + "/topics/evil?partition=0&offset=0&count=5&format=utf8")
    cells = browser.find_elements("css selector", "tr[data-offset='0'] pre")
    assert [c.text for c in cells] == [EVIL, EVIL, "test"]
    assert browser.find_elements("css selector", "main img, main script") == []
    assert _pwned(browser) is None
    browser.get(base + "/topics/evil?partition=0&offset=0&format=hex")  # the non-UTF-8 key falls back to hex
    assert browser.find_element("css selector", "tr[data-offset='1'] pre").text == "ff fe 3c 62 3e"

    # absurd inputs are clamped and said so
    for query in (
        "partition=999&offset=-99999999999999999999&count=100000000",
        "partition=-1&offset=99999999999999999999999&count=-5&format=<script>",
        "partition=abc&offset=abc&count=abc&format=",
    ):
        status, body = http(broker.http_port, f"/console/topics/evil?{query}")
        assert status == 200 and "<script>" not in body.split("</head>", 1)[1].replace(
            '<script src="/console/static/console.js"', ""
        )
        browser.get(base + "/topics/evil?" + query)
        assert len(browser.find_elements("css selector", "table.records tbody tr[data-offset]")) <= 200
        assert _pwned(browser) is None
    browser.get(base + "/topics/evil?partition=999&offset=-99999999999999999999&count=100000000")
    notes = " ".join(e.text for e in browser.find_elements("css selector", "p.note"))
    assert "partition 999 does not exist" in notes and "count limited to 200" in notes and "outside" in notes
    screenshot(browser, tmp_path / "bad-input.png")

    # read-only: every other method is refused and the broker is unchanged
    before = broker.read("evil", 0)
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for path in ("/console", "/console/topics/evil", f"/console/share-groups/{GROUP}", "/console/api/overview"):
            assert http(broker.http_port, path, method)[0] == 405, (method, path)
    assert [r.offset for r in broker.read("evil", 0)] == [r.offset for r in before]
    assert broker.call(lambda: broker.broker.topics.get("evil").partitions[0].high_watermark) == 2


def test_console_sits_behind_the_metrics_authentication(tmp_path) -> None:
    password = "carol-c0nsole"
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            f'org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="{password}";'
        ),
    }
    with EmbeddedBroker(settings, data_dir=tmp_path / "d") as eb:
        for path in ("/console", "/console/api/overview", "/console/static/console.js", "/console/topics/x"):
            assert http(eb.http_port, path)[0] == 401
            assert http(eb.http_port, path, auth=("carol", "wrong"))[0] == 401
        assert http(eb.http_port, "/console", auth=("carol", password))[0] == 200
        assert http(eb.http_port, "/console/topics/x", auth=("carol", password))[0] == 404
