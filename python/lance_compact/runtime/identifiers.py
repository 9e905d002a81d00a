"""What a name a user gives may be, checked once for each kind before anything is read or
logged, and how any name or text is shown (in messages, log lines, job descriptions).

The kinds and their rules (docs/shared-servers.md, "Names"):

* table, namespace: the catalog's (spark-ext ``Names.scala``), for every identifier and table
  argument before the JVM logs it or asks the engine: no control or other non-printable
  character, at most 255 bytes (UTF-8) for a namespace, 249 for a table (its folder is
  ``<name>.lance``). The engine gets only names that passed.
* ``index``, a new index's name (``create_index``'s ``name``, ``CREATE INDEX name``): 1 to
  :data:`MAX_INDEX_NAME` characters, each printable; not starting with ``__`` (Lance names its
  own system indices so: ``__lance_frag_reuse``, ...); no ``/`` or ``\\``; not ``.`` or ``..``; no
  space at either end. Lance takes any string (checked on pylance 14.0.2: a newline, 5,000
  characters, ``..``, ``x/y``, ``""`` and ``__mine`` were all built), and each of these broke
  something here: a log line, a listing that hides ``__`` names, a message.
* ``existing index``, an index the table has (``drop_index``'s ``name``, ``optimize_indices``'
  ``indices``): its exact name, whatever pylance let it be, except that a control character
  (:func:`control`) is refused before anything is read or logged. Every name the ``index``
  rule accepts passes it.
* ``column``, a column named in a parameter or option (``create_index``'s ``column``,
  ``sort_order``'s and ``CLUSTER BY``'s columns, the ``lance_compact.cluster_by`` property): 1
  to :data:`MAX_COLUMN_NAME` characters, each printable.

Printable: no character of the Unicode categories Cc (controls: C0, DEL, C1), Cf (format:
zero-width and bidirectional marks), Zl, Zp (line and paragraph separators), Cs (surrogates),
Co (private use) or Cn (unassigned). A control character (:func:`control`: Cc, Zl, Zp) is one
that breaks or rewrites a line: a name holding one would forge lines in a log.

Shown: :func:`escape` writes every character that is not printable as Python's escapes do
(``\\n``, ``\\x85``, ``\\u200b``); :func:`shown` quotes a name so, its backslashes doubled,
truncated for display. A name that passed its kind's check is printable and may be written as
it is; every other text that holds a user's or a table's name (an existing index's name, a
Lance error) is escaped, and the engine's log guard (:class:`LineGuard`) escapes what
any log record of the engine would otherwise write raw.
"""
from __future__ import annotations

import logging
import unicodedata
from typing import Any

from ..errors import CompactionError

# A new index's name, in characters. Lance has no limit; this one keeps every line that names
# an index (progress, job descriptions, errors) readable, and is the identifier limit of SQL
# Server and Oracle (128).
MAX_INDEX_NAME = 128
# A column named in a parameter, in characters: the longest column name Unity Catalog and Delta
# take (255); a longer one is refused before the table is read.
MAX_COLUMN_NAME = 255
# What a message shows of a long name.
SHOWN = 60

_UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
_CONTROL = frozenset({"Cc", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

INDEX, EXISTING_INDEX, COLUMN = "index", "existing index", "column"


def printable(ch: str) -> bool:
    """Whether one character may be written as it is (see the module's doc)."""
    return unicodedata.category(ch) not in _UNPRINTABLE


def control(ch: str) -> bool:
    """A control character or a line or paragraph separator: one that breaks or rewrites a line."""
    return unicodedata.category(ch) in _CONTROL


def _escape_char(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape(text: Any, limit: int | None = None) -> str:
    """``text`` with every character that is not printable escaped (``\\n``, ``\\x7f``,
    ``\\u2028``), cut after ``limit`` characters (``...`` and the length said): safe in one log line."""
    text = str(text)
    cut = limit is not None and len(text) > limit
    body = text[:limit] if cut else text
    # str.isprintable is stricter than printable() (it also refuses spaces other than ' '), so
    # a text it passes has nothing to escape: the common case, without a call per character
    # (progress lines and log lines go through here; a warehouse run says thousands)
    out = body if body.isprintable() else "".join(ch if printable(ch) else _escape_char(ch) for ch in body)
    return f"{out}... ({len(text):,} characters)" if cut else out


def shown(name: Any, limit: int = SHOWN) -> str:
    """A name as a message shows it: quoted, its backslashes doubled and every character that
    is not printable escaped (as Python's ``repr`` does), cut after ``limit`` characters."""
    text = str(name)
    cut = len(text) > limit
    part = text[:limit] if cut else text
    body = part.replace("\\", "\\\\") if part.isprintable() else "".join(
        "\\\\" if ch == "\\" else ch if printable(ch) else _escape_char(ch) for ch in part)
    return f"'{body}'" + (f"... ({len(text):,} characters)" if cut else "")


# What each kind expects, said in every refusal.
_EXPECTED = {
    INDEX: (f"an index name is 1 to {MAX_INDEX_NAME} printable characters, does not start with '__' (Lance's "
            "own system indices), holds no '/' or '\\', has no space at either end and is not '.' or '..'"),
    EXISTING_INDEX: "the exact name of one of the table's indices, without control characters",
    COLUMN: f"a column name is 1 to {MAX_COLUMN_NAME} printable characters",
}


def problem(kind: str, name: str) -> str | None:
    """What is wrong with ``name`` as a name of ``kind``, or None."""
    if kind not in _EXPECTED:
        raise ValueError(f"no kind of name {kind!r}")
    bound = MAX_INDEX_NAME if kind == INDEX else MAX_COLUMN_NAME if kind == COLUMN else None
    if not name:
        return "it is empty"
    if bound is not None and len(name) > bound:
        return f"it has {len(name):,} characters, more than {bound}"
    bad = next((ch for ch in name if control(ch)), None)
    if bad is not None:
        return f"it contains a control character ({_escape_char(bad)})"
    if kind == EXISTING_INDEX:
        return None
    bad = next((ch for ch in name if not printable(ch)), None)
    if bad is not None:
        return (f"it contains a character that is not printable ({_escape_char(bad)}, Unicode category "
                f"{unicodedata.category(bad)})")
    if kind == COLUMN:
        return None
    if name.startswith("__"):
        return "it starts with '__', which Lance keeps for its own system indices"
    if "/" in name or "\\" in name:
        return "it contains '/' or '\\'"
    if name in (".", ".."):
        return "it is '.' or '..'"
    if name[0].isspace() or name[-1].isspace():
        return "it starts or ends with a space"
    return None


def check(kind: str, table: str, name: Any, procedure: str, what: str | None = None) -> str:
    """``name`` if it is a good name of ``kind`` (:data:`INDEX`, :data:`EXISTING_INDEX`,
    :data:`COLUMN`); else a :class:`CompactionError` naming the table, the procedure, what the
    name is (``what``, default the kind's: "index name", "column"), the name shown escaped,
    what is wrong and what is expected."""
    what = what or ("index name" if kind in (INDEX, EXISTING_INDEX) else "column")
    if not isinstance(name, str):
        raise CompactionError(f"table {table}: {procedure}: {what} must be a string, got {type(name).__name__}; "
                              f"{_EXPECTED[kind]}; nothing was changed")
    why = problem(kind, name)
    if why:
        raise CompactionError(f"table {table}: {procedure}: {what} {shown(name)} is refused: {why}; "
                              f"{_EXPECTED[kind]}; nothing was changed")
    return name


class LineGuard(logging.Filter):
    """Every record of the engine's log on lines of its own: a character that is not printable
    in its message or traceback is escaped (:func:`escape`), and the lines a record writes
    itself (a traceback's) continue indented, so no text a record carries (a name, a Lance
    error quoting one) can write a line that reads as another record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = _lines(record.getMessage())
        record.args = None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = _lines(record.exc_text)
        if record.stack_info:
            record.stack_info = _lines(record.stack_info)
        return True


def _lines(text: str) -> str:
    return "\n    ".join(escape(line) for line in text.split("\n"))


def guard_log_lines() -> None:
    """Install :class:`LineGuard` on every handler of the root logger (after the redaction
    filter, which must see the text as written)."""
    guard = LineGuard()
    for handler in logging.getLogger().handlers:
        handler.addFilter(guard)
