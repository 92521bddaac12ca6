"""``ssl.principal.mapping.rules``: a client certificate's distinguished name to a user name.

Kafka's syntax, so that a rule list copied from a Kafka broker's configuration maps the same
certificates to the same names: a comma-separated list of ``DEFAULT`` (the whole DN) and
``RULE:pattern/replacement/[LU]`` entries, tried in order; the first rule whose pattern
matches the *whole* DN gives the name (every match of the pattern replaced by the
replacement, then lower- or upper-cased with L or U). A pattern may itself contain commas
(``RULE:^CN=(.*?),OU=(.*?)$/$1/``); ``\\/`` writes a slash inside a pattern or replacement.
Replacements use Java's ``$n`` and ``${name}`` group references; a ``$n`` past the pattern's
groups is dropped digit by digit to one that exists, or stays literal text (as Kafka does).
No rule matching is an authentication failure (``NoMatchingRule``), never a fallback name.

Sans-IO: strings in, strings out; the TLS shell (``shoal.broker.net.tls``) feeds it the DN.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_RULES", "NoMatchingRule", "PrincipalMapper", "parse_rules"]

DEFAULT_RULES: Final = "DEFAULT"

# One entry: DEFAULT, or RULE:<pattern>/<replacement>/<flag>, where pattern and replacement are
# runs of escaped characters or characters other than a backslash and a slash.
_PART: Final = r"(?:\\.|[^\\/])*"
_ENTRY: Final = rf"(DEFAULT)|RULE:({_PART})/({_PART})/([LU]?).*?|(.*?)"
_SPLIT: Final = re.compile(rf"\s*({_ENTRY})\s*(?:,\s*|$)", re.DOTALL)
_ONE: Final = re.compile(_ENTRY, re.DOTALL)


class NoMatchingRule(ValueError):
    """No rule of the list applies to a distinguished name."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    template: tuple[str | int, ...]  # literal text and group references (numbers or names)
    case: str  # "", "L" or "U"
    text: str

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self._expand, dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def _expand(self, m: re.Match[str]) -> str:
        return "".join(part if isinstance(part, str) else (m.group(part) or "") for part in self.template)


def _template(replacement: str, groups: int, names: dict[str, int]) -> tuple[str | int, ...]:
    """Java's replacement syntax as literal pieces and group numbers."""
    out: list[str | int] = []
    text: list[str] = []
    i, n = 0, len(replacement)
    while i < n:
        c = replacement[i]
        if c == "\\" and i + 1 < n:
            text.append(replacement[i + 1])
            i += 2
            continue
        if c == "$" and i + 1 < n and replacement[i + 1] == "{":
            close = replacement.find("}", i + 2)
            name = replacement[i + 2 : close] if close != -1 else ""
            if close == -1 or name not in names:
                raise ValueError(f"no group named {name!r} in the rule's pattern")
            out.extend(["".join(text), names[name]])
            text.clear()
            i = close + 1
            continue
        if c == "$" and i + 1 < n and replacement[i + 1].isdigit():
            # Java reads one digit, then more while the number still names a group.
            j = i + 2
            ref = int(replacement[i + 1])
            while j < n and replacement[j].isdigit() and ref * 10 + int(replacement[j]) <= groups:
                ref = ref * 10 + int(replacement[j])
                j += 1
            if ref > groups:
                if groups == 0:
                    raise ValueError(f"${ref} refers to a group, and the rule's pattern has none")
                text.append("$")  # Kafka keeps a reference past the last group as text
                i += 1
                continue
            out.extend(["".join(text), ref])
            text.clear()
            i = j
            continue
        text.append(c)
        i += 1
    out.append("".join(text))
    return tuple(p for p in out if p != "")


def _compile(entry: str) -> _Rule | None:
    m = _ONE.match(entry)
    if m is None or m.end() != len(entry):
        rest = entry[m.end() :] if m is not None else entry
        raise ValueError(f"invalid rule {entry!r} (cannot read {rest!r})")
    if m.group(1) is not None:
        return _Rule(None, (), "", "DEFAULT")
    if m.group(2) is None:
        return None  # an empty entry is skipped
    try:
        pattern = re.compile(m.group(2))
    except re.error as e:
        raise ValueError(f"invalid rule {entry!r}: bad pattern ({e})") from None
    template = _template(m.group(3), pattern.groups, dict(pattern.groupindex))
    return _Rule(pattern, template, m.group(4), entry)


def parse_rules(text: str | None) -> tuple[_Rule, ...]:
    """The rules of ``text`` in order (None: DEFAULT); ValueError says which entry is wrong."""
    source = (DEFAULT_RULES if text is None else text).strip()
    rules = []
    pos = 0
    while pos <= len(source):
        m = _SPLIT.match(source, pos)
        if m is None:
            break
        rule = _compile(m.group(1))
        if rule is not None:
            rules.append(rule)
        if m.end() == pos:  # an empty match at the end
            break
        pos = m.end()
    return tuple(rules)


@dataclass(frozen=True, slots=True)
class PrincipalMapper:
    """Parsed rules; ``name(dn)`` is the user name of a certificate's subject."""

    rules: tuple[_Rule, ...]

    @classmethod
    def of(cls, text: str | None) -> PrincipalMapper:
        return cls(parse_rules(text))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"no rule of ssl.principal.mapping.rules applies to {dn!r}")
