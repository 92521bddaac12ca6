"""Kafka's JAAS login configuration (``sasl.jaas.config``), parsed without Java.

Kafka takes one login module per ``sasl.jaas.config`` value::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

that is: a class name, a control flag (required, requisite, sufficient or
optional), ``key=value`` options, and a closing ``;``. Values are bare words or
quoted with ``"`` or ``'``, in which ``\\`` escapes the next character. Shoal
reads PLAIN's ``user_<name>="<password>"`` options from it (the users a PLAIN
listener accepts); SCRAM's module takes no users (they are stored credentials).

The values are secrets, so a parse error names the setting and the position,
never the text around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from shoal.broker.config.keys import ConfigError

__all__ = ["PLAIN_MODULE", "SCRAM_MODULE", "JaasEntry", "parse_jaas", "plain_users"]

PLAIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS: Final = ("required", "requisite", "sufficient", "optional")


@dataclass(frozen=True, slots=True)
class JaasEntry:
    module: str
    flag: str
    options: dict[str, str] = field(repr=False)  # values are often passwords


def _tokens(text: str, key: str) -> list[tuple[str, bool, int]]:
    """(token, was_quoted, position); '=' and ';' are tokens of their own."""
    out: list[tuple[str, bool, int]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            out.append((c, False, i))
            i += 1
        elif c in "\"'":
            start, quote, chars = i, c, []
            i += 1
            while True:
                if i >= n:
                    raise ConfigError(key, f"a quoted value opened at character {start} is never closed")
                ch = text[i]
                if ch == "\\":
                    if i + 1 >= n:
                        raise ConfigError(key, f"a backslash at character {i} escapes nothing")
                    chars.append(text[i + 1])
                    i += 2
                elif ch == quote:
                    i += 1
                    break
                else:
                    chars.append(ch)
                    i += 1
            out.append(("".join(chars), True, start))
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in "=;\"'":
                i += 1
            out.append((text[start:i], False, start))
    return out


def parse_jaas(text: str, key: str = "sasl.jaas.config") -> JaasEntry:
    """The one login module of a ``sasl.jaas.config`` value; ConfigError (naming ``key``, never
    quoting the value) when it is not ``<module> <flag> [k=v ...];``."""
    toks = _tokens(text, key)
    if not toks:
        raise ConfigError(key, "is empty: expected '<LoginModule class> <flag> [key=value ...];'")
    module, quoted, _ = toks[0]
    if quoted or module in "=;":
        raise ConfigError(key, "must start with a login module class name")
    if len(toks) < 2 or toks[1][0] not in _FLAGS or toks[1][1]:
        raise ConfigError(key, f"the login module must be followed by a control flag ({', '.join(_FLAGS)})")
    flag = toks[1][0]
    options: dict[str, str] = {}
    i = 2
    while True:
        if i >= len(toks):
            raise ConfigError(key, "must end with ';'")
        tok, quoted, pos = toks[i]
        if tok == ";" and not quoted:
            break
        if quoted or tok == "=":
            raise ConfigError(key, f"expected an option name at character {pos}")
        if i + 2 >= len(toks) or toks[i + 1][0] != "=" or toks[i + 1][1]:
            raise ConfigError(key, f"the option at character {pos} needs '=value'")
        value, value_quoted, _ = toks[i + 2]
        if not value_quoted and value in "=;":
            raise ConfigError(key, f"the option at character {pos} has no value")
        if tok in options:
            raise ConfigError(key, f"the option at character {pos} is given twice")
        options[tok] = value
        i += 3
    if i + 1 != len(toks):
        raise ConfigError(key, "holds more than one login module; Kafka takes exactly one per setting")
    return JaasEntry(module, flag, options)


def plain_users(entry: JaasEntry, key: str = "sasl.jaas.config") -> dict[str, str]:
    """PLAIN's accepted users: every ``user_<name>=<password>`` option of a PlainLoginModule."""
    if entry.module != PLAIN_MODULE:
        raise ConfigError(key, f"PLAIN needs {PLAIN_MODULE}, not {entry.module}")
    return {k[len("user_") :]: v for k, v in entry.options.items() if k.startswith("user_") and len(k) > 5}
