"""The operations listener asks for HTTP basic auth once SASL users exist (#19 with #16).

The users and passwords are the broker's own: PLAIN users of a JAAS setting and SCRAM
credentials (checked by salting the password as the stored credential says). With an
authorizer, /metrics also needs DESCRIBE on the CLUSTER. /health/live and /health/ready
stay open for orchestrators' probes. SCRAM users are created with librdkafka's
AdminClient; scrapes are parsed with prometheus-client's parser.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request

import confluent_kafka.admin as admin_mod
import pytest
from prometheus_client.parser import text_string_to_metric_families

from shoal.testing import EmbeddedBroker

PLAIN_PW = "alice-0ps-secret"
SCRAM_PW = "bob-0ps-secret"
JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="{PLAIN_PW}";'
QUIET = {"log_level": 0}


def _get(port: int, path: str, user: str | None = None, password: str | None = None) -> tuple[int, str, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def _add_scram(bootstrap: str, user: str, password: str) -> None:
    a = admin_mod.AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    ups = [
        admin_mod.UserScramCredentialUpsertion(user, admin_mod.ScramCredentialInfo(m, 4096), password.encode())
        for m in (admin_mod.ScramMechanism.SCRAM_SHA_256, admin_mod.ScramMechanism.SCRAM_SHA_512)
    ]
    for f in a.alter_user_scram_credentials(ups).values():
        assert f.result(15) is None


def _metrics_ok(status: int, body: str) -> bool:
    return status == 200 and any(f.name.startswith("kafka_") for f in text_string_to_metric_families(body))


def test_no_users_no_auth(tmp_path) -> None:
    with EmbeddedBroker(data_dir=tmp_path / "d") as eb:
        assert _metrics_ok(*_get(eb.http_port, "/metrics")[:2])


def test_plain_users_guard_metrics_but_not_health(tmp_path, caplog) -> None:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    }
    with EmbeddedBroker(settings, data_dir=tmp_path / "d") as eb:
        port = eb.http_port
        status, _, headers = _get(port, "/metrics")
        assert status == 401 and headers.get("WWW-Authenticate", "").startswith("Basic")
        assert _get(port, "/metrics", "alice", "wrong")[0] == 401
        assert _get(port, "/metrics", "nobody", PLAIN_PW)[0] == 401
        assert _metrics_ok(*_get(port, "/metrics", "alice", PLAIN_PW)[:2])
        for path in ("/health/live", "/health/ready"):
            assert _get(port, path)[0] == 200
        # a malformed header is a refusal, not an error
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": "Basic ***"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 401
    assert PLAIN_PW not in caplog.text


def test_scram_users_switch_auth_on(tmp_path) -> None:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    }
    with EmbeddedBroker(settings, data_dir=tmp_path / "d") as eb:
        port = eb.http_port
        assert _metrics_ok(*_get(port, "/metrics")[:2])  # no user yet: open, as without SASL
        _add_scram(eb.bootstrap_servers, "bob", SCRAM_PW)
        assert _get(port, "/metrics")[0] == 401
        assert _get(port, "/metrics", "bob", SCRAM_PW + "x")[0] == 401
        assert _metrics_ok(*_get(port, "/metrics", "bob", SCRAM_PW)[:2])


def test_with_an_authorizer_metrics_need_describe_on_the_cluster(tmp_path) -> None:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_alice="{PLAIN_PW}" user_admin="admin-0ps-secret";'
        ),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",  # ANONYMOUS: the PLAINTEXT listener sets up ACLs
    }
    with EmbeddedBroker(settings, data_dir=tmp_path / "d") as eb:
        port = eb.http_port
        assert _get(port, "/metrics", "alice", PLAIN_PW)[0] == 403
        assert _metrics_ok(*_get(port, "/metrics", "admin", "admin-0ps-secret")[:2])
        a = admin_mod.AdminClient({"bootstrap.servers": eb.bootstrap_servers, **QUIET})
        binding = admin_mod.AclBinding(
            admin_mod.ResourceType.BROKER,
            "kafka-cluster",
            admin_mod.ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            admin_mod.AclOperation.DESCRIBE,
            admin_mod.AclPermissionType.ALLOW,
        )
        assert a.create_acls([binding])[binding].result(15) is None
        assert _metrics_ok(*_get(port, "/metrics", "alice", PLAIN_PW)[:2])
