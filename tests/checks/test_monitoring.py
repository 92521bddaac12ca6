"""The compose file's monitoring profile points at what the broker exposes (issue 19, item 5).

Docker and Grafana cannot run on the test machines, so the files are checked for the two
ways they go stale: a dashboard query naming a metric the broker no longer writes (the
panel silently shows "No data"), and a scrape target that is not the operations listener.
Metric names come from ``shoal.broker.metrics.names``, the one table the collector uses.
"""

from __future__ import annotations

import json
import re

from shoal.broker.config.settings import BrokerConfig
from shoal.broker.metrics.http import parse_http_listener
from shoal.broker.metrics.names import METRICS
from tests.support.brokers import ROOT

MONITORING = ROOT / "docker" / "monitoring"
DASHBOARD = MONITORING / "grafana" / "dashboards" / "shoal.json"
COMPOSE = ROOT / "docker" / "compose.yaml"

_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}
_PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
}


def exposed_names() -> set[str]:
    """Every sample name /metrics can hold, as prometheus-client writes them."""
    return {row.name + suffix for row in METRICS.values() for suffix in _SUFFIXES[row.kind]}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions, keywords,
    label names (inside braces or after by/without) or durations and strings."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors ([5m], [$__rate_interval])
    expr = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", expr)  # grouping labels
    names = set()
    for m in re.finditer(r"(?<![\w$.])([a-zA-Z_:][\w:]*)\s*(\()?", expr):
        word, call = m.group(1), m.group(2)
        if call or word in _PROMQL_WORDS:
            continue
        names.add(word)
    return names


def test_the_name_extractor_finds_names_and_skips_functions() -> None:
    expr = 'histogram_quantile(0.99, sum by (request, le) (rate(a_b_bucket{x="y(z)"}[5m]))) / on(le) c_total'
    assert metric_names(expr) == {"a_b_bucket", "c_total"}


def test_every_dashboard_query_reads_a_metric_the_broker_exposes() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", ())]
    assert len(exprs) >= 8
    used = set().union(*(metric_names(e) for e in exprs))
    assert used, "no metric names found in the dashboard"
    unknown = used - exposed_names()
    assert not unknown, f"dashboard queries name metrics that /metrics never holds: {sorted(unknown)}"
    # The panels: throughput, request latency, consumer and share lag, in-flight and archived.
    for key in ("messages_in", "request_time", "consumer_lag", "share_lag", "share_in_flight", "share_archived_limit"):
        assert any(name.startswith(METRICS[key].name) for name in used), key
    # Every panel reads the data source the provisioning file names.
    datasource = (MONITORING / "grafana" / "provisioning" / "datasources" / "prometheus.yaml").read_text()
    (uid,) = re.findall(r"^\s+uid:\s*(\S+)", datasource, re.M)
    assert {p["datasource"]["uid"] for p in dashboard["panels"]} == {uid}


def test_the_extractor_flags_an_unknown_name() -> None:
    assert metric_names("rate(kafka_server_brokertopicmetrics_messagesin[1m])") - exposed_names() == {
        "kafka_server_brokertopicmetrics_messagesin"  # a counter without _total: never exposed
    }


def test_prometheus_scrapes_the_brokers_http_listener() -> None:
    scrape = (MONITORING / "prometheus.yml").read_text()
    assert re.search(r"^\s+metrics_path:\s*/metrics\s*$", scrape, re.M)
    targets = re.findall(r"targets:\s*\[([^\]]*)\]", scrape)
    hosts = [t.strip().strip("\"'") for group in targets for t in group.split(",")]
    assert hosts == ["broker:9644"], hosts
    compose = COMPOSE.read_text()
    # The broker's listener is open to the compose network on the scraped port...
    (http_listener,) = re.findall(r"SHOAL_HTTP_LISTENERS:\s*(\S+)", compose)
    host, port = parse_http_listener(http_listener)
    assert host == "0.0.0.0" and f"broker:{port}" == hosts[0]
    # ...which is the broker's default HTTP port, the one the image's healthcheck asks on loopback.
    (default,) = BrokerConfig.from_sources().get("shoal.http.listeners")
    assert parse_http_listener(default)[1] == port
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert f"SHOAL_HEALTHCHECK_HTTP_ADDRESS=127.0.0.1:{port}" in dockerfile
    # Prometheus and Grafana run only with the profile.
    for service in ("prometheus", "grafana"):
        block = re.search(rf"^  {service}:\n((?:    .*\n|\s*\n)+)", compose, re.M)
        assert block and re.search(r"^    profiles: \[monitoring\]$", block.group(1), re.M), service
    assert "./monitoring/prometheus.yml:/etc/prometheus/prometheus.yml" in compose
