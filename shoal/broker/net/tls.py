"""TLS for the listeners that speak SSL or SASL_SSL: one ``ssl.SSLContext`` per listener.

Why built at start, once per listener: a wrong path, a key that does not match its
certificate or a wrong ``ssl.key.password`` must stop the broker before it accepts anyone,
with a ``ConfigError`` naming the setting (exit 2, no traceback) and never the password;
and a context is costly to build (files read, keys parsed), while handshakes share it.
Every ssl.* setting is read through ``BrokerConfig.for_listener``, so
``listener.name.<l>.ssl.keystore.location`` gives one listener its own certificate.

After a handshake, ``principal`` turns the client certificate (if the listener asked for
one and the client sent it) into ``User:<name>`` through ``ssl.principal.mapping.rules``
(``shoal.broker.security.ssl_principal``, a sans-IO core); a client without a certificate is
``User:ANONYMOUS``, and a certificate no rule maps is refused (the connection closes).
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from shoal.broker.config.keys import ConfigError
from shoal.broker.config.settings import BrokerConfig, Listener
from shoal.broker.security.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal
from shoal.broker.security.ssl_principal import NoMatchingRule, PrincipalMapper
from shoal.broker.security.x500 import DerError, rfc2253_subject

log = logging.getLogger("shoal.tls")

# Security protocols whose listeners run TLS (SASL_SSL: SASL inside TLS).
TLS_PROTOCOLS: Final = frozenset({"SSL", "SASL_SSL"})
_VERSIONS: Final = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH: Final = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_TLS13_SUITES: Final = ("TLS_AES_", "TLS_CHACHA20_")


@dataclass(frozen=True, slots=True)
class ListenerTls:
    """What one TLS listener needs: its context and its principal rules."""

    listener: str
    context: ssl.SSLContext
    mapper: PrincipalMapper
    client_auth: str

    def principal(self, transport: Any) -> KafkaPrincipal | None:
        """The peer's principal after the handshake; None when no rule maps its certificate."""
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return ANONYMOUS
        try:
            dn = rfc2253_subject(der)
            return KafkaPrincipal(USER_TYPE, self.mapper.name(dn))
        except (NoMatchingRule, DerError) as e:
            log.info("refusing a client certificate on %s: %s", self.listener, e)
            return None


def listener_tls(cfg: BrokerConfig) -> dict[str, ListenerTls]:
    """A ``ListenerTls`` for every listener whose protocol is SSL or SASL_SSL; ConfigError on a
    setting that cannot work (the message names it and never shows a secret)."""
    return {e.name: _build(cfg, e) for e in cfg.endpoints if e.security_protocol in TLS_PROTOCOLS}


def _setting_name(listener: str, name: str, cfg: BrokerConfig) -> str:
    """The spelling that set ``name`` for ``listener`` (for error messages)."""
    if name in cfg.per_listener.get(listener, {}):
        return f"listener.name.{listener.lower()}.{name}"
    return name


def _build(cfg: BrokerConfig, listener: Listener) -> ListenerTls:
    name = listener.name

    def get(key: str) -> Any:
        return cfg.for_listener(name, key)

    def fail(key: str, reason: str) -> ConfigError:
        return ConfigError(_setting_name(name, key, cfg), f"{reason} (listener {name})")

    for store in ("keystore", "truststore"):
        if str(get(f"ssl.{store}.type")).upper() != "PEM":
            raise fail(f"ssl.{store}.type", "Shoal reads PEM files only")
        if get(f"ssl.{store}.password") is not None:
            raise fail(f"ssl.{store}.password", "a PEM store takes no store password (the key's is ssl.key.password)")
    try:
        mapper = PrincipalMapper.of(get("ssl.principal.mapping.rules"))
    except ValueError as e:
        raise fail("ssl.principal.mapping.rules", str(e)) from None

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_key(ctx, get, fail)
    client_auth = str(get("ssl.client.auth")).lower()
    _load_trust(ctx, get, fail, client_auth)
    ctx.verify_mode = _CLIENT_AUTH[client_auth]
    _set_versions(ctx, get, fail)
    suites = get("ssl.cipher.suites")
    if suites:
        older = [s for s in suites if not s.startswith(_TLS13_SUITES)]
        if older:
            try:
                ctx.set_ciphers(":".join(older))
            except ssl.SSLError:
                raise fail("ssl.cipher.suites", "no entry is a cipher suite OpenSSL knows") from None
    ctx.options |= ssl.OP_NO_COMPRESSION
    return ListenerTls(name, ctx, mapper, client_auth)


def _load_key(ctx: ssl.SSLContext, get: Any, fail: Any) -> None:
    location = get("ssl.keystore.location")
    inline_key, inline_chain = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    password = get("ssl.key.password")
    if location is None and inline_key is None:
        raise fail("ssl.keystore.location", "a TLS listener needs its key and certificate: set it or ssl.keystore.key")
    if inline_key is not None and inline_chain is None:
        raise fail("ssl.keystore.certificate.chain", "ssl.keystore.key needs its certificate chain here")
    if location is not None and inline_key is not None:
        raise fail("ssl.keystore.key", "set either ssl.keystore.location or ssl.keystore.key, not both")
    key = "ssl.keystore.location" if location is not None else "ssl.keystore.key"
    # The password always goes as a callable returning bytes: never an argument OpenSSL could
    # echo, and never OpenSSL's own prompt on the terminal for an encrypted key without one.
    secret = (password or "").encode()
    text = ""
    try:
        with _pem_file(location, inline_key, inline_chain) as path:
            text = _peek(path)
            ctx.load_cert_chain(path, password=lambda: secret)
    except FileNotFoundError:
        raise fail(key, f"no file {location!r}") from None
    except PermissionError:
        raise fail(key, f"cannot read {location!r} (permission denied)") from None
    except IsADirectoryError:
        raise fail(key, f"{location!r} is a directory") from None
    except (ssl.SSLError, OSError, ValueError, TypeError) as e:
        raise fail(key, _diagnose(text, str(e))) from None


def _peek(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read(1 << 20)


def _diagnose(pem: str, error: str) -> str:
    """Why OpenSSL refused a key and chain (its own message is mostly "PEM lib")."""
    if "PRIVATE KEY-----" not in pem:
        return "it holds no PEM private key (a PEM keystore has the key and the certificate chain)"
    if "CERTIFICATE-----" not in pem:
        return "it holds no PEM certificate (a PEM keystore has the key and the certificate chain)"
    if "ENCRYPTED" in pem:
        return "the private key cannot be decrypted: wrong or missing ssl.key.password"
    if "mismatch" in error.lower():
        return "the private key does not belong to the certificate"
    return "the key or certificate cannot be read"


@contextlib.contextmanager
def _pem_file(location: str | None, key: str | None, chain: str | None) -> Iterator[str]:
    """A path OpenSSL can load: the keystore file, or the inline PEM written to a private
    temporary file (Python's ssl module loads keys from files only) removed right after."""
    if location is not None:
        yield location
        return
    fd, path = tempfile.mkstemp(prefix="shoal-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:  # mkstemp's file is readable by us only
            f.write(_pem_text(key or "") + "\n" + _pem_text(chain or "") + "\n")
        yield path
    finally:
        os.unlink(path)


def _pem_text(value: str) -> str:
    """Inline PEM as Kafka takes it in a properties file: newlines may be written as \\n or lost."""
    return value.replace("\\n", "\n").strip()


def _load_trust(ctx: ssl.SSLContext, get: Any, fail: Any, client_auth: str) -> None:
    location, inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if location is None and inline is None:
        if client_auth != "none":
            raise fail(
                "ssl.client.auth",
                f"ssl.client.auth={client_auth} needs ssl.truststore.location or ssl.truststore.certificates",
            )
        return
    key = "ssl.truststore.location" if location is not None else "ssl.truststore.certificates"
    try:
        if location is not None:
            ctx.load_verify_locations(cafile=location)
        if inline is not None:
            ctx.load_verify_locations(cadata=_pem_text(inline))
    except FileNotFoundError:
        raise fail(key, f"no file {location!r}") from None
    except (ssl.SSLError, OSError, ValueError):
        raise fail(key, "it does not hold PEM certificates") from None


def _set_versions(ctx: ssl.SSLContext, get: Any, fail: Any) -> None:
    enabled = [_VERSIONS[v] for v in get("ssl.enabled.protocols")]
    low, high = min(enabled), max(enabled)
    cap = str(get("ssl.protocol"))
    if cap in _VERSIONS:
        high = min(high, _VERSIONS[cap])
    if high < low:
        raise fail("ssl.protocol", "it is below every version of ssl.enabled.protocols")
    try:
        ctx.minimum_version, ctx.maximum_version = low, high
    except (ValueError, ssl.SSLError):
        raise fail("ssl.enabled.protocols", "this OpenSSL cannot limit TLS to these versions") from None
