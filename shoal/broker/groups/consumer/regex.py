"""Java regular expressions (a subscription's SubscribedTopicRegex) checked and mapped to Python's ``re``.

Why: KIP-848 members may subscribe with a regex written for Java. Most of
the syntax means the same in both engines; the constructs below do not (or
Python lacks them), and rather than match different topics than a Java
broker would, the coordinator refuses the pattern with
INVALID_REGULAR_EXPRESSION and names the construct. Two Java spellings are
rewritten: named groups ``(?<name>...)`` and the end anchor ``\\z``. A topic
matches when the whole name matches, as with Java's ``Matcher.matches()``.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["RegexError", "compile_java"]


class RegexError(ValueError):
    pass


# (pattern on the Java source, what the error calls it)
_UNSUPPORTED = [
    (re.compile(r"\\[pP]\{?"), "Unicode class \\p{...}"),
    (re.compile(r"(?<!\\)(?:\\\\)*[*+?}]\+"), "possessive quantifier"),
    (re.compile(r"\\Q"), "quotation \\Q...\\E"),
    (re.compile(r"&&"), "character class intersection &&"),
    (re.compile(r"\\[GRXhHvVk]"), "escape"),
    (re.compile(r"\\Z"), "\\Z (Java: end before a final line terminator)"),
    (re.compile(r"\(\?[a-zA-Z-]*[dUu]"), "inline flag d/U/u"),
    (re.compile(r"\[[^\]]*\["), "nested character class"),
]


@lru_cache(maxsize=1024)
def compile_java(pattern: str) -> re.Pattern[str]:
    """Compile a Java regex, or raise RegexError naming what Python would read differently."""
    for probe, what in _UNSUPPORTED:
        m = probe.search(pattern)
        if m is not None:
            raise RegexError(f"Unsupported regular expression construct {what} at {m.start()}: {m.group(0)!r}")
    py = re.sub(r"\(\?<([A-Za-z][A-Za-z0-9]*)>", r"(?P<\1>", pattern)
    py = re.sub(r"(?<!\\)((?:\\\\)*)\\z", r"\1\\Z", py)
    try:
        return re.compile(py)
    except re.error as e:
        raise RegexError(f"Invalid regular expression: {e}") from None
