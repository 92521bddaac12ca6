"""The image's security variables, run outside Docker (Docker cannot run here).

docker/compose.sasl-ssl.yaml is played by hand: docker/security_setup.py makes the certificates,
users and client files its one-shot service makes, the entrypoint starts the broker with the
compose file's own environment (paths and ports moved into the test's directory), the
healthcheck asks over TLS, the acls service's commands run as written, and the app user then
produces and reads as its share group over SASL_SSL (librdkafka and the CLI). No secret is on
the broker's command line (/proc/<pid>/cmdline); a restart keeps the stored credentials.
"""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_docker_entrypoint import DOCKER, ENTRYPOINT, _env, _free_port, _healthcheck, _start_entrypoint
from tests.support.brokers import ROOT

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("trustme")

COMPOSE = DOCKER / "compose.sasl-ssl.yaml"
QUIET = {"log_level": 0}


def _service(name: str) -> str:
    text = COMPOSE.read_text()
    return re.search(rf"^  {name}:\n(.*?)(?=^  \S|^\S)", text, re.M | re.S).group(1)


def _compose_env(sec: Path, port: int) -> dict[str, str]:
    block = _service("broker").split("    environment:\n", 1)[1].split("    volumes:", 1)[0]
    env = {}
    for key, value in re.findall(r"^      (SHOAL_\w+): (.*)$", block, re.M):
        value = value.strip().strip('"')
        value = value.replace("/etc/shoal/security", str(sec)).replace("0.0.0.0:9093", f"127.0.0.1:{port}")
        env[key] = value.replace("broker:9093", f"localhost:{port}").replace("127.0.0.1:9093", f"127.0.0.1:{port}")
    return env


def _acl_commands(sec: Path, port: int) -> list[list[str]]:
    folded = _service("acls").split("      - >-\n", 1)[1].split("    volumes:", 1)[0]
    script = " ".join(line.strip() for line in folded.splitlines())
    script = script.replace("/etc/shoal/security", str(sec)).replace("broker:9093", f"localhost:{port}")
    parts = [p.strip() for p in script.split(";") if p.strip()]
    assert parts[0] == "set -e"
    return [shlex.split(p) for p in parts[1:]]


def _settings(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def _stop(proc: subprocess.Popen, log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, log.read_text()[-2000:]


def _rdk_produce(settings: dict, port: int, topic: str, values: list[bytes]) -> list:
    errors: list = []
    p = confluent_kafka.Producer({"bootstrap.servers": f"localhost:{port}", **settings, **QUIET})
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert p.flush(20) == 0
    return errors


def test_compose_sasl_ssl_played_without_docker(tmp_path: Path) -> None:
    sec = tmp_path / "security"
    setup = subprocess.run(
        [sys.executable, str(DOCKER / "security_setup.py"), "--out", str(sec)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert setup.returncode == 0, setup.stderr
    assert stat.S_IMODE((sec / "scram-users").stat().st_mode) == 0o600
    assert stat.S_IMODE((sec / "tls" / "broker.pem").stat().st_mode) == 0o600
    passwords = dict(line.split(":", 1) for line in (sec / "scram-users").read_text().split())
    assert sorted(passwords) == ["admin", "app"]

    port = _free_port()
    env = _compose_env(sec, port)
    assert env["SHOAL_AUTHORIZER"] == "on" and env["SHOAL_SUPER_USERS"] == "User:admin"
    env.update(SHOAL_DATA_DIR=str(tmp_path / "data"), SHOAL_SECRETS_DIR=str(tmp_path / "none"), TMPDIR=str(tmp_path))
    proc, bound, log = _start_entrypoint(tmp_path, **env)
    try:
        assert bound == port
        cmdline = _cmdline(proc.pid)
        assert not any(pw.encode() in cmdline for pw in passwords.values()), cmdline
        assert b"sasl.password" not in cmdline and b"jaas" not in cmdline
        assert b"ssl.keystore.location=" + str(sec / "tls" / "broker.pem").encode() in cmdline
        assert not list(tmp_path.glob("shoal-secrets.*")), "no secret to pass: no secrets file"

        # The image's healthcheck, with the compose file's variables: ApiVersions over TLS.
        health = {k: v for k, v in env.items() if k.startswith("SHOAL_HEALTHCHECK_")}
        ok = subprocess.run(
            [sys.executable, str(DOCKER / "healthcheck.py"), "--timeout", "5"],
            env=_env(**health, SHOAL_HEALTHCHECK_HTTP_ADDRESS=""),
            capture_output=True,
            timeout=30,
        )
        assert ok.returncode == 0, ok.stderr
        assert _healthcheck(f"127.0.0.1:{port}", 2.0).returncode == 1, "plaintext to a TLS port is unhealthy"
        foreign = tmp_path / "foreign"
        subprocess.run([sys.executable, str(ROOT / "examples" / "make_certs.py"), "--out", str(foreign)], check=True)
        wrong_ca = _healthcheck(f"127.0.0.1:{port}", 2.0, "--tls-ca", str(foreign / "ca.pem"))
        assert wrong_ca.returncode == 1 and b"CERTIFICATE_VERIFY_FAILED" in wrong_ca.stderr

        # The acls service's commands, as written (the admin's client file).
        for argv in _acl_commands(sec, port):
            assert argv[0] == "shoal"
            done = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, (argv, done.stderr)
        admin = ["shoal", "--bootstrap-server", f"localhost:{port}", "--command-config", str(sec / "admin.properties")]
        subprocess.run(
            [*admin, "configs", "alter", "--group", "events-workers", "--set", "share.auto.offset.reset=earliest"],
            env=_env(),
            check=True,
            capture_output=True,
            timeout=60,
        )

        app = _settings(sec / "app.properties")
        assert app["security.protocol"] == "SASL_SSL" and app["sasl.username"] == "app"
        assert _rdk_produce(app, port, "events", [b"a", b"b", b"c"]) == []
        denied = _rdk_produce(app, port, "elsewhere", [b"x"])
        assert denied and denied[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
        as_app = ["shoal", "--bootstrap-server", f"localhost:{port}", "--command-config", str(sec / "app.properties")]
        read = subprocess.run(
            [
                *as_app,
                "share-consume",
                "events",
                "--group",
                "events-workers",
                "--max-messages",
                "3",
                "--timeout-ms",
                "5000",
            ],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert sorted(read.stdout.split()) == ["a", "b", "c"], read.stderr
        wrong = dict(app, **{"sasl.password": "not-" + passwords["app"]})
        failed = _rdk_produce(wrong | {"message.timeout.ms": "3000"}, port, "events", [b"z"])
        assert failed, "a wrong password is refused"
    finally:
        _stop(proc, log)
    stored = (tmp_path / "data" / "__scram_credentials.json").read_bytes()
    assert not any(pw.encode() in stored for pw in passwords.values())
    assert not any(pw in log.read_text() for pw in passwords.values())

    # Second start on the same volume: the bootstrap keeps the stored credentials as they are.
    proc, _, log = _start_entrypoint(tmp_path, **env)
    try:
        assert (tmp_path / "data" / "__scram_credentials.json").read_bytes() == stored
        assert "kept the stored SCRAM-SHA-256, SCRAM-SHA-512" in log.read_text()
        assert _rdk_produce(app, port, "events", [b"d"]) == []
    finally:
        _stop(proc, log)


@pytest.mark.parametrize("key_password_from", ["docker-secret", "shoal-cfg-variable"])
def test_entrypoint_keeps_secrets_off_the_command_line(tmp_path: Path, key_password_from: str) -> None:
    """An encrypted broker key, PLAIN users and SCRAM users from Docker secrets (or the key's
    password from a SHOAL_CFG_ variable): the broker starts (so the key password reached it), the
    users authenticate, and none of the secrets is on the command line; the secrets file is mode
    600 and comes after SHOAL_CONFIG_FILE."""
    from tests.support.tls import KEY_PASSWORD, make_tls_files

    tls = make_tls_files(tmp_path / "made")
    tls_dir = tmp_path / "tls"
    tls_dir.mkdir()
    shutil.copy(tls.broker_encrypted, tls_dir / "broker.pem")
    shutil.copy(tls.ca, tls_dir / "ca.pem")
    secrets = tmp_path / "run-secrets"
    secrets.mkdir()
    (secrets / "shoal-plain-users").write_text("alice:Al1ce-plain\n")
    (secrets / "shoal-scram-users").write_text("bob:B0b-scram\n")
    env = {}
    if key_password_from == "docker-secret":
        (secrets / "shoal-ssl-key-password").write_text(KEY_PASSWORD + "\n")
    else:
        env["SHOAL_CFG_SSL_KEY_PASSWORD"] = KEY_PASSWORD
    config = tmp_path / "server.properties"
    config.write_text("num.partitions=2\n")
    ssl_port, sasl_port = _free_port(), _free_port()
    proc, _, log = _start_entrypoint(
        tmp_path,
        SHOAL_DATA_DIR=str(tmp_path / "data"),
        SHOAL_LISTENERS=f"SSL://127.0.0.1:{ssl_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        SHOAL_TLS_DIR=str(tls_dir),
        SHOAL_SSL_CLIENT_AUTH="requested",
        SHOAL_SECRETS_DIR=str(secrets),
        SHOAL_CONFIG_FILE=str(config),
        TMPDIR=str(tmp_path),
        **env,
    )
    try:
        parts = _cmdline(proc.pid).split(b"\0")
        for secret in (KEY_PASSWORD, "Al1ce-plain", "B0b-scram"):
            assert not any(secret.encode() in p for p in parts), parts
        (secrets_file,) = tmp_path.glob("shoal-secrets.*")
        assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
        configs = [parts[i + 1] for i, p in enumerate(parts) if p == b"--config"]
        assert configs == [str(config).encode(), str(secrets_file).encode()]
        assert b"ssl.client.auth=requested" in parts
        assert KEY_PASSWORD in secrets_file.read_text()

        assert _healthcheck(f"127.0.0.1:{ssl_port}", 3.0, "--tls-ca", str(tls.ca)).returncode == 0
        for mech, user, pw in (("PLAIN", "alice", "Al1ce-plain"), ("SCRAM-SHA-256", "bob", "B0b-scram")):
            settings = {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mech,
                "sasl.username": user,
                "sasl.password": pw,
            }
            a = confluent_kafka.admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{sasl_port}", **settings, **QUIET})
            topic = f"t-{user}"
            a.create_topics([confluent_kafka.admin.NewTopic(topic)])[topic].result(20)
            meta = a.list_topics(topic, timeout=20)
            assert len(meta.topics[topic].partitions) == 2, "SHOAL_CONFIG_FILE reached the broker"
    finally:
        _stop(proc, log)
    for secret in (KEY_PASSWORD, "Al1ce-plain", "B0b-scram"):
        assert secret not in log.read_text()


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"SHOAL_AUTHORIZER": "yes"}, b"SHOAL_AUTHORIZER is on or off"),
        ({"SHOAL_TLS_DIR": "EMPTY"}, b"holds no broker.pem"),
        ({"SHOAL_SCRAM_USERS_FILE": "BAD"}, b"expected user:password"),
    ],
)
def test_entrypoint_refuses_unusable_security_settings(tmp_path: Path, env: dict, says: bytes) -> None:
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad-users"
    bad.write_text("carol-S3cret-without-colon\n")
    env = {k: {"EMPTY": str(tmp_path / "empty"), "BAD": str(bad)}.get(v, v) for k, v in env.items()}
    done = subprocess.run(
        ["sh", str(ENTRYPOINT)],
        env=_env(
            SHOAL_DATA_DIR=str(tmp_path / "d"), SHOAL_LISTENERS="PLAINTEXT://127.0.0.1:0", TMPDIR=str(tmp_path), **env
        ),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert b"S3cret" not in done.stderr


def test_compose_sasl_ssl_file_is_consistent() -> None:
    text = COMPOSE.read_text()
    for name in re.findall(r"dockerfile: (\S+)", text):
        assert (ROOT / name).exists(), name
    for src in re.findall(r"^\s+- (\.\.?/[^:]+):", text, re.M):
        assert (DOCKER / src).resolve().exists(), src
    assert "condition: service_completed_successfully" in text and "condition: service_healthy" in text
    assert "SASL_SSL://0.0.0.0:9093" in text and '"9093:9093"' in text
    entry = ENTRYPOINT.read_text()
    for var in re.findall(r"^      (SHOAL_\w+):", _service("broker"), re.M):
        if var.startswith("SHOAL_HEALTHCHECK_"):
            assert var in (DOCKER / "healthcheck.py").read_text(), var
        elif not var.startswith("SHOAL_CFG_"):
            assert var in entry, var
    # every shoal command of the acls service parses as the CLI's
    from shoal.client.cli.main import build_parser

    for argv in _acl_commands(Path("/etc/shoal/security"), 9093):
        build_parser().parse_args(argv[1:])
