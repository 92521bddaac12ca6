"""SASL settings (Kafka's names), kept apart from the broker's other rows so the security
features each add a table of their own.

Each may also be set for one listener as ``listener.name.<listener>.<setting>``, and
``sasl.jaas.config`` for one mechanism of one listener as
``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (``BrokerConfig.for_listener``).
"""

from __future__ import annotations

from typing import Any, Final

from shoal.broker.config.keys import AT_LEAST_0, INT, LIST, LONG, MED, STR, Check, ConfigKey

# What Shoal's authenticator speaks. Kafka also has GSSAPI (Kerberos) and OAUTHBEARER: not served.
SERVED_SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _mechanisms_problem(value: Any) -> str | None:
    if not value:
        return "must name at least one mechanism"
    unserved = [m for m in value if m not in SERVED_SASL_MECHANISMS]
    if unserved:
        return f"Shoal does not serve {', '.join(unserved)}; it serves {', '.join(SERVED_SASL_MECHANISMS)}"
    if len(set(value)) != len(value):
        return "has a repeated entry"
    return None


def _reauth_problem(value: Any) -> str | None:
    if value:
        return "re-authentication (KIP-368) is not served by Shoal: leave it at 0"
    return None


SASL_KEYS: Final = (
    ConfigKey(
        "sasl.enabled.mechanisms",
        LIST,
        SERVED_SASL_MECHANISMS,
        "SASL mechanisms a SASL listener accepts (per listener through listener.name.<l>.sasl.enabled.mechanisms). "
        "Shoal serves PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, all enabled by default; Kafka's default, GSSAPI, "
        "is not served. PLAIN accepts only the users of a PLAIN sasl.jaas.config, so it is inert without one.",
        importance=MED,
        validator=Check(_mechanisms_problem, "[PLAIN, SCRAM-SHA-256, SCRAM-SHA-512]"),
        kafka_default=("GSSAPI",),
    ),
    ConfigKey(
        "sasl.jaas.config",
        STR,
        None,
        "JAAS login configuration. For PLAIN, the users a listener accepts: "
        "'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice=\"secret\";' "
        "(usually set per listener and mechanism: listener.name.<l>.plain.sasl.jaas.config).",
        importance=MED,
        sensitive=True,
    ),
    ConfigKey(
        "connection.failed.authentication.delay.ms",
        INT,
        100,
        "How long the answer to a failed authentication is held back before the connection closes "
        "(slows down password guessing).",
        importance=MED,
        validator=AT_LEAST_0,
    ),
    ConfigKey(
        "sasl.server.max.receive.size",
        INT,
        524288,
        "Largest frame taken from a SASL connection before it has authenticated; bigger ones close it.",
        importance=MED,
        validator=AT_LEAST_0,
    ),
    ConfigKey(
        "connections.max.reauth.ms",
        LONG,
        0,
        "Session lifetime for re-authentication (KIP-368). Not served by Shoal: only 0 (never) is accepted, "
        "and SaslAuthenticate answers a session lifetime of 0.",
        importance=MED,
        validator=Check(_reauth_problem, "0"),
    ),
)
