"""Kafka principals: the identity every authorization decision is about.

Kafka names a principal ``<type>:<name>``; brokers build ``User:<name>`` from a
SASL login or from a client certificate's distinguished name, and
``User:ANONYMOUS`` for a connection that proved nothing (PLAINTEXT, or TLS
without a client certificate). ACLs and ``super.users`` are written in the same
spelling, so parsing and printing live here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

USER_TYPE: Final = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice"); ValueError without a type."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"{text!r} is not a principal of the form Type:name")
        return cls(kind, name)


ANONYMOUS: Final = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
