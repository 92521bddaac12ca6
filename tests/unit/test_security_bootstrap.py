"""shoal.broker.security_bootstrap (the container's first-start step) and the broker's repeated
--config: SCRAM users salted into the credential store idempotently, secrets written to a
mode-600 properties file that the broker's own parser reads back unchanged."""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

import pytest

from shoal.broker.cli import load_config
from shoal.broker.config.settings import ConfigError, parse_properties
from shoal.broker.log.dir_lock import DataDirLocked, DirLock
from shoal.broker.security.jaas import parse_jaas, plain_users
from shoal.broker.security.scram_store import FILE_NAME, ScramStore
from shoal.broker.security_bootstrap import (
    BootstrapError,
    bootstrap_scram,
    main,
    plain_jaas,
    read_users,
    secret_properties,
    sensitive_env,
    write_private,
)
from shoal.protocol.sasl.scram import MECHANISMS, salt_password


def _opens(store: ScramStore, user: str, mech: str, password: str) -> bool:
    cred = store.get(user, mech)
    assert cred is not None
    m = MECHANISMS[mech]
    salted = salt_password(m, password, cred.salt, cred.iterations)
    return m.h(m.hmac(salted, b"Client Key")) == cred.stored_key


def test_users_file_lines(tmp_path: Path) -> None:
    f = tmp_path / "users"
    f.write_text("# comment\n\nalice:pa:ss word\n bob :x\nalice:second\n")
    assert read_users(f) == {"alice": "second", "bob": "x"}
    f.write_text("carol-no-colon-s3cret\n")
    with pytest.raises(BootstrapError) as e:
        read_users(f)
    assert "line 1" in str(e.value) and "s3cret" not in str(e.value)
    f.write_text("a b:pw\n")
    with pytest.raises(BootstrapError):
        read_users(f)


def test_scram_bootstrap_is_idempotent_and_keeps_stored_credentials(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = bootstrap_scram(data, {"alice": "a-pw", "bob": "b-pw"})
    assert [(o.user, o.created, o.kept) for o in first] == [
        ("alice", ("SCRAM-SHA-256", "SCRAM-SHA-512"), ()),
        ("bob", ("SCRAM-SHA-256", "SCRAM-SHA-512"), ()),
    ]
    written = (data / FILE_NAME).read_bytes()
    assert b"a-pw" not in written and b"b-pw" not in written
    again = bootstrap_scram(data, {"alice": "a-pw", "bob": "b-pw"})
    assert all(o.created == () and o.stale == () for o in again)
    assert (data / FILE_NAME).read_bytes() == written, "a second run rewrites nothing"
    # A changed password in the file: reported, the stored credential stays.
    (changed,) = bootstrap_scram(data, {"alice": "new-pw"})
    assert changed.stale == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    store = ScramStore(data)
    store.load()
    assert _opens(store, "alice", "SCRAM-SHA-512", "a-pw") and not _opens(store, "alice", "SCRAM-SHA-512", "new-pw")
    # A new user and a missing mechanism are added next to what is there.
    bootstrap_scram(data, {"carol": "c-pw"}, ["SCRAM-SHA-256"], iterations=8192)
    store.load()
    assert store.describe("carol") == [("SCRAM-SHA-256", 8192)]
    assert _opens(store, "bob", "SCRAM-SHA-256", "b-pw")


def test_scram_bootstrap_refuses_a_directory_a_broker_holds(tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    data.mkdir()
    users = tmp_path / "users"
    users.write_text("alice:a-pw\n")
    held = DirLock(data)
    held.acquire()
    try:
        with pytest.raises(DataDirLocked):
            bootstrap_scram(data, {"alice": "a-pw"})
        assert main(["--data-dir", str(data), "--scram-users", str(users)]) == 2
    finally:
        held.release()
    assert "a-pw" not in capsys.readouterr().err
    assert main(["--data-dir", str(data), "--scram-users", str(users)]) == 0


@pytest.mark.parametrize(
    "value", ["plain", "back\\slash", " leading blank", "line\nbreak", 'quo"te = colon: # hash', "tab\tff\f"]
)
def test_secret_properties_read_back_unchanged(value: str) -> None:
    assert parse_properties(secret_properties({"ssl.key.password": value})) == {"ssl.key.password": value}


def test_plain_users_become_a_jaas_value_the_broker_parses() -> None:
    users = {"alice": 'p"w\\1', "bob": "x y;z"}
    text = parse_properties(secret_properties({"sasl.jaas.config": plain_jaas(users)}))["sasl.jaas.config"]
    assert plain_users(parse_jaas(text)) == users


def test_sensitive_shoal_cfg_variables_are_picked_out() -> None:
    env = {
        "SHOAL_CFG_SSL_KEY_PASSWORD": "k",
        "SHOAL_CFG_LISTENER_NAME_EXTERNAL_PLAIN_SASL_JAAS_CONFIG": "j",
        "SHOAL_CFG_NUM_PARTITIONS": "3",
        "SHOAL_CFG_SSL_KEYSTORE_LOCATION": "/x.pem",
        "OTHER_SSL_KEY_PASSWORD": "no",
    }
    assert sensitive_env(env) == {
        "SHOAL_CFG_SSL_KEY_PASSWORD": ("ssl.key.password", "k"),
        "SHOAL_CFG_LISTENER_NAME_EXTERNAL_PLAIN_SASL_JAAS_CONFIG": (
            "listener.name.external.plain.sasl.jaas.config",
            "j",
        ),
    }


def test_main_writes_secrets_mode_600_and_prints_only_variable_names(tmp_path: Path, capsys, monkeypatch) -> None:
    out = tmp_path / "secrets.properties"
    out.write_text("old")
    os.chmod(out, 0o644)
    pw = tmp_path / "key-password"
    pw.write_text("k3y-pa55\nignored\n")
    plain = tmp_path / "plain"
    plain.write_text("alice:al1ce\n")
    monkeypatch.setenv("SHOAL_CFG_SASL_JAAS_CONFIG_UNUSED", "-")  # not a setting: left alone
    monkeypatch.setenv("SHOAL_CFG_SSL_KEYSTORE_KEY", "PEM-TEXT")
    args = ["--data-dir", str(tmp_path / "d"), "--sensitive-env", "--secrets-out", str(out)]
    assert main([*args, "--ssl-key-password-file", str(pw), "--plain-users", str(plain)]) == 0
    printed = capsys.readouterr()
    assert printed.out.split() == ["SHOAL_CFG_SSL_KEYSTORE_KEY"]
    assert "k3y-pa55" not in printed.out + printed.err and "al1ce" not in printed.out + printed.err
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    settings = parse_properties(out.read_text())
    assert settings["ssl.key.password"] == "k3y-pa55" and settings["ssl.keystore.key"] == "PEM-TEXT"
    assert plain_users(parse_jaas(settings["sasl.jaas.config"])) == {"alice": "al1ce"}


def test_write_private_tightens_an_existing_file(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x" * 100)
    os.chmod(f, 0o666)
    write_private(f, "y")
    assert f.read_text() == "y" and stat.S_IMODE(f.stat().st_mode) == 0o600


def test_broker_takes_several_config_files_later_wins(tmp_path: Path) -> None:
    a, b = tmp_path / "a.properties", tmp_path / "b.properties"
    a.write_text("num.partitions=2\ndefault.replication.factor=1\nlog.retention.hours=5\n")
    b.write_text("num.partitions=4\n")
    ns = argparse.Namespace(config=[str(a), str(b)], override=["log.retention.hours=7"])
    cfg = load_config(ns)
    assert cfg.get("num.partitions") == 4  # the later file wins
    assert cfg.get("log.retention.hours") == 7  # an override beats both files
    assert cfg.get("default.replication.factor") == 1  # the earlier file's other settings stay
    ns = argparse.Namespace(config=[str(a), str(tmp_path / "missing")], override=[])
    with pytest.raises(ConfigError) as e:
        load_config(ns)
    assert "missing" in str(e.value)
