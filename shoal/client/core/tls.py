"""The client's TLS context, from librdkafka's setting names.

Why a module of its own: every client kind (producer, consumer, share consumer, admin)
connects through ``ClientCore`` and the group coordinator link, and all of them must verify
the broker the same way. One context is built per client object, when it is constructed
(a missing file or a wrong ``ssl.key.password`` is a ``ConfigError`` naming the setting,
before any socket opens), and shared by its connections.

Verification is on unless turned off: the broker's certificate must chain to
``ssl.ca.location`` (the system's CAs when unset) and, with
``ssl.endpoint.identification.algorithm=https`` (the default, as in librdkafka 2.x and Kafka's
Java client), name the host the client connected to; ``none`` skips the host name check only.
``ssl.certificate.location`` and ``ssl.key.location`` give a client certificate (mutual TLS).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from shoal.client.core.errors import ConfigError

__all__ = ["TLS_PROTOCOLS", "client_ssl_context"]

TLS_PROTOCOLS = ("ssl", "sasl_ssl")


def client_ssl_context(cfg: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The context for ``cfg`` (None for PLAINTEXT); ConfigError names the setting at fault."""
    if str(cfg.get("security.protocol", "plaintext")).lower() not in TLS_PROTOCOLS:
        return None
    ca = cfg.get("ssl.ca.location")
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if ca is not None:
        try:
            ctx.load_verify_locations(cafile=ca)
        except FileNotFoundError:
            raise ConfigError("ssl.ca.location", f"no file {ca!r}") from None
        except (ssl.SSLError, OSError, ValueError):
            raise ConfigError("ssl.ca.location", f"{ca!r} does not hold PEM certificates") from None
    ctx.check_hostname = cfg.get("ssl.endpoint.identification.algorithm", "https") == "https"
    cert, key = cfg.get("ssl.certificate.location"), cfg.get("ssl.key.location")
    password = cfg.get("ssl.key.password")
    if key is not None and cert is None:
        raise ConfigError("ssl.key.location", "needs ssl.certificate.location")
    if cert is not None:
        # Always a callable: without one OpenSSL would prompt on the terminal for an encrypted key.
        secret = (password or "").encode()
        try:
            ctx.load_cert_chain(cert, key, password=lambda: secret)
        except FileNotFoundError as e:
            which = "ssl.key.location" if key is not None and e.filename == key else "ssl.certificate.location"
            raise ConfigError(which, "no such file") from None
        except (ssl.SSLError, OSError, ValueError, TypeError):
            if _encrypted(key or cert):
                raise ConfigError(
                    "ssl.key.password", "the key cannot be decrypted with it (or it is missing)"
                ) from None
            raise ConfigError("ssl.certificate.location", "the certificate and key cannot be read") from None
    return ctx


def _encrypted(path: str) -> bool:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return "ENCRYPTED" in f.read(1 << 20)
    except OSError:
        return False
