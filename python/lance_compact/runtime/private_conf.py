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


def write_properties(conf: Mapping[str, str], prefix: str = "", keep: bool = False) -> Path:
    """A Spark properties file holding ``conf`` (after ``prefix``, text copied first, such as
    a user's own properties file), readable by this user only. Removed at exit unless ``keep``
    (then the caller removes its folder)."""
    folder = Path(tempfile.mkdtemp(prefix="lance-compact-conf-"))  # mode 0700
    if not keep:
        atexit.register(shutil.rmtree, folder, True)
    path = folder / "spark.properties"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        if prefix:
            f.write(prefix if prefix.endswith("\n") else prefix + "\n")
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
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"cannot read the properties file {path} named in {named_in}: {e.strerror}") from None

