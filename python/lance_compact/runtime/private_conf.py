"""Spark settings that must not show on a process command line (storage keys, tokens).

``ps`` shows every process's arguments to every user of the machine, and Spark's launchers
put each ``--conf key=value`` on the JVM's command line. Settings that hold or identify a
secret travel instead in a Spark properties file: mode 0600, in a private temporary folder
(0700), removed when this process exits.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Mapping

# A catalog's storage options (all of them: an endpoint or account name is harmless, but the
# key names vary by store), a catalog service's headers (an API key, a bearer token) and
# anything named like a secret.
_SENSITIVE = re.compile(r"(?i)^spark\.sql\.catalog\.[^.]+\.(storage|headers?)\.|secret|password|token|"
                        r"access[._]?key|credential|session|signature|sas")


def is_sensitive(key: str) -> bool:
    """Whether Spark setting ``key`` holds (or may hold) a secret."""
    return bool(_SENSITIVE.search(key))


def split(conf: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(settings safe on a command line, settings for a properties file)."""
    public = {k: v for k, v in conf.items() if not is_sensitive(k)}
    private = {k: v for k, v in conf.items() if is_sensitive(k)}
    return public, private


def _escape(text: str, key: bool = False) -> str:
    """Java properties escaping (backslash, line breaks; '=', ':' and blanks in keys)."""
    out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if key:
        out = re.sub(r"([=: #!])", r"\\\1", out)
    elif out.startswith((" ", "#", "!")):
        out = "\\" + out
    return out


def joined(*texts: str) -> str:
    """Properties texts one after the other, each ended by a blank line: a last line ending in a
    backslash continues onto the next line in Java's properties format, and would swallow the
    next text's first setting (a storage key into another setting's value) without it."""
    return "".join(t + ("" if t.endswith("\n") else "\n") + "\n" for t in texts if t)


# Private folders this process made and removes at its exit (remove_now: before an os._exit).
_made: list[Path] = []


def remove_now() -> None:
    """Remove this process's private properties files now (an exit that skips atexit follows)."""
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)


def write_properties(conf: Mapping[str, str], prefix: str = "", keep: bool = False) -> Path:
    """A Spark properties file holding ``conf`` (after ``prefix``, text copied first, such as
    a user's own properties file), readable by this user only. Removed at exit unless ``keep``
    (then the caller removes its folder)."""
    folder = Path(tempfile.mkdtemp(prefix="lance-compact-conf-"))  # mode 0700
    if not keep:
        atexit.register(shutil.rmtree, folder, True)
        _made.append(folder)
    path = folder / "spark.properties"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(joined(prefix))
        for k, v in conf.items():
            f.write(f"{_escape(k, key=True)}={_escape(str(v))}\n")
    return path


def take_properties_file(args: list[str]) -> tuple[str | None, list[str]]:
    """The properties file spark-submit arguments ``args`` name (``--properties-file P`` or
    ``--properties-file=P``; of several, the last, the one spark-submit reads) and ``args``
    without any of them."""
    named, rest, i = None, [], 0
    while i < len(args):
        if args[i] == "--properties-file" and i + 1 < len(args):
            named, i = args[i + 1], i + 2
        elif args[i].startswith("--properties-file="):
            named, i = args[i].split("=", 1)[1], i + 1
        else:
            rest.append(args[i])
            i += 1
    return named, rest


def properties_text(path: str, named_in: str) -> str:
    """The text of properties file ``path`` (named in ``named_in``), or a ValueError saying
    which file could not be read and why."""
    try:  # as Spark reads one: UTF-8, a malformed byte replaced
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ValueError(f"cannot read the properties file {path} named in {named_in}: {e.strerror}") from None


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def read_properties(text: str) -> dict[str, str]:
    """The settings of a properties file's ``text`` as ``java.util.Properties.load`` reads them
    (logical lines joined at an odd count of trailing backslashes, comments and blank lines
    skipped, ``=``, ``:`` or blanks between key and value, backslash escapes; a later key wins)."""
    out: dict[str, str] = {}
    lines = re.split(r"\r\n|\r|\n", text)  # Java's line ends (a form feed is a blank)
    logical, continued = "", False
    for i, line in enumerate(lines):
        line = line.lstrip(" \t\f")
        if not continued and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 and i + 1 < len(lines):
            logical, continued = logical + line[:-1], True
            continue
        key, value = _split_entry(logical + (line[:-1] if trailing % 2 else line))
        out[key] = value
        logical, continued = "", False
    return out


def _split_entry(line: str) -> tuple[str, str]:
    key, i = _read_until(line, 0, "=: \t\f")
    while i < len(line) and line[i] in " \t\f":
        i += 1
    if i < len(line) and line[i] in "=:":
        i += 1
    while i < len(line) and line[i] in " \t\f":
        i += 1
    return key, _read_until(line, i, "")[0]


def _read_until(text: str, i: int, stops: str) -> tuple[str, int]:
    """``text`` from ``i`` to the first unescaped character of ``stops`` (or its end), its
    escapes read; and where it stopped."""
    out = []
    while i < len(text) and text[i] not in stops:
        if text[i] == "\\" and i + 1 < len(text):
            out.append(_unescape(text, i))
            i += 6 if text[i + 1] == "u" else 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out), i


def _unescape(text: str, at: int) -> str:
    c = text[at + 1]
    if c == "u":
        try:
            return chr(int(text[at + 2:at + 6], 16))
        except ValueError:
            return text[at + 2:at + 6]
    return _ESCAPES.get(c, c)

