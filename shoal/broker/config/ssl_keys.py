"""The broker's ssl.* settings (Kafka's names), for every listener that speaks TLS.

Kept apart from ``broker_keys`` because they are read in one place (``shoal.broker.net.tls``,
which builds each listener's ``ssl.SSLContext`` at start) and because most of them may be
set per listener (``listener.name.<l>.ssl.keystore.location``). Shoal reads PEM only: a
JKS or PKCS12 store is refused at start with a message that says so, never half-read.
Secrets (the key password, an inline key, inline certificates) are ``sensitive``: never in
a DescribeConfigs value or a log line. Their type is Kafka's PASSWORD.
"""

from __future__ import annotations

from typing import Final

from shoal.broker.config.keys import (
    HIGH,
    LIST,
    LOW,
    MED,
    STR,
    Check,
    ConfigKey,
    ListOf,
    OneOf,
)
from shoal.protocol.constants import ConfigType

_key = ConfigKey
PASSWORD = ConfigType.PASSWORD
TLS_VERSIONS: Final = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")


def _store_type_problem(value: str) -> str | None:
    if value.upper() == "PEM":
        return None
    return f"Shoal reads PEM files only ({value} is not read); convert the store to PEM, e.g. with keytool and openssl"


PEM_ONLY: Final = Check(_store_type_problem, "PEM")

SSL_KEYS: Final = (
    _key(
        "ssl.keystore.type",
        STR,
        "PEM",
        "Format of the broker's key and certificate: PEM (JKS and PKCS12 are refused at start).",
        importance=MED,
        validator=PEM_ONLY,
        kafka_default="JKS",
    ),
    _key(
        "ssl.keystore.location",
        STR,
        None,
        "PEM file holding the broker's private key and its certificate chain (leaf first).",
        importance=HIGH,
    ),
    _key(
        "ssl.keystore.password",
        PASSWORD,
        None,
        "Not used with PEM keystores (the key's own password is ssl.key.password); set, it is refused.",
        importance=HIGH,
        sensitive=True,
    ),
    _key(
        "ssl.keystore.key",
        PASSWORD,
        None,
        "The broker's private key as PEM text, in place of a keystore file.",
        importance=HIGH,
        sensitive=True,
    ),
    _key(
        "ssl.keystore.certificate.chain",
        PASSWORD,
        None,
        "The broker's certificate chain as PEM text (leaf first), with ssl.keystore.key.",
        importance=HIGH,
        sensitive=True,
    ),
    _key(
        "ssl.key.password",
        PASSWORD,
        None,
        "Password of an encrypted private key (PEM file or ssl.keystore.key).",
        importance=HIGH,
        sensitive=True,
    ),
    _key(
        "ssl.truststore.type",
        STR,
        "PEM",
        "Format of the certificates trusted to sign client certificates: PEM only.",
        importance=MED,
        validator=PEM_ONLY,
        kafka_default="JKS",
    ),
    _key(
        "ssl.truststore.location",
        STR,
        None,
        "PEM file of the CA certificates that client certificates must chain to.",
        importance=HIGH,
    ),
    _key(
        "ssl.truststore.password",
        PASSWORD,
        None,
        "Not used with PEM truststores; set, it is refused.",
        importance=HIGH,
        sensitive=True,
    ),
    _key(
        "ssl.truststore.certificates",
        PASSWORD,
        None,
        "Trusted CA certificates as PEM text, in place of a truststore file.",
        importance=HIGH,
        sensitive=True,
    ),
    _key(
        "ssl.client.auth",
        STR,
        "none",
        "Whether clients present a certificate: none (not asked), requested (asked; a client "
        "without one is User:ANONYMOUS), required (the handshake fails without a trusted one).",
        importance=MED,
        validator=OneOf(("none", "requested", "required")),
    ),
    _key(
        "ssl.enabled.protocols",
        LIST,
        ("TLSv1.2", "TLSv1.3"),
        "TLS versions a listener accepts.",
        importance=MED,
        validator=ListOf(TLS_VERSIONS),
    ),
    _key(
        "ssl.protocol",
        STR,
        "TLSv1.3",
        "Highest TLS version offered (within ssl.enabled.protocols); TLS means the newest known.",
        importance=MED,
        validator=OneOf(("TLS", "TLSv1.1", "TLSv1.2", "TLSv1.3")),
    ),
    _key(
        "ssl.cipher.suites",
        LIST,
        None,
        "Cipher suites for TLS 1.2 and below, in OpenSSL's names (unset: OpenSSL's defaults). "
        "TLS 1.3 suites cannot be narrowed from Python and are always offered.",
        importance=LOW,
    ),
    _key(
        "ssl.principal.mapping.rules",
        STR,
        "DEFAULT",
        "How a client certificate's distinguished name becomes a user name: RULE:pattern/replacement/[LU] "
        "entries and DEFAULT (the whole name), first match wins.",
        importance=LOW,  # read (and a bad rule refused) at start by shoal.broker.net.tls
    ),
)
