"""runtime/identifiers.py's escaping (no Spark): the fast path for text with nothing to escape
(str.isprintable) gives what the per-character path gives, for every code point."""
from __future__ import annotations

import sys

from lance_compact.runtime import identifiers as ids


def _by_character(text: str) -> str:
    return "".join(ch if ids.printable(ch) else ids._escape_char(ch) for ch in text)


def test_isprintable_never_passes_a_character_that_escape_would_escape():
    assert not [c for c in range(sys.maxunicode + 1) if chr(c).isprintable() and not ids.printable(chr(c))]


def test_escape_and_shown_are_the_same_with_and_without_the_fast_path():
    names = ["db.events", "db.t\u00a0x", "a\\b", "x\ny", "\u2028", "tab\tle", "\u200b", "é🙂", "", "a" * 70]
    for name in names:
        assert ids.escape(name) == _by_character(name)
        body = "".join("\\\\" if ch == "\\" else ch if ids.printable(ch) else ids._escape_char(ch)
                       for ch in name[:ids.SHOWN])
        cut = f"... ({len(name):,} characters)" if len(name) > ids.SHOWN else ""
        assert ids.shown(name) == f"'{body}'{cut}"
    assert ids.escape("x\ny") == "x\\ny" and ids.shown("a\\b") == "'a\\\\b'"
