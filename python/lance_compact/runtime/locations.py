"""A table's or namespace's location as Lance will read it, and the catalog's warehouse
boundary checked on exactly that text, in the engine (the JVM checks it first:
Scala ``WarehouseBoundary``; this is the second check, on the location the engine opens).

Lance parses a location with a scheme (``s3://``, ``gs://``, ``az://``, ``file://``, ...) as a
URL: it decodes percent-escapes (``%2e%2e`` is ``..``), resolves dot segments (``wh/../x``),
drops an empty segment before ``..``, reads a backslash as ``/`` in a ``file://`` URL, cuts the
location at ``?`` and ``#``, and takes ``S3://`` as ``s3://``. A plain path it takes literally
(no decoding; the OS resolves ``..``). Verified on pylance 14.0.2 (../shared/NOTES.md). So a
location reaches Lance only in its normal form, in which none of these can change its meaning:
a lower-case scheme, no percent-escape, no backslash, ``?`` or ``#``, no ``.``, ``..`` or empty
segment, and (on an object store) a bucket named as the warehouse names it.
"""
from __future__ import annotations

import os
import re

from ..errors import CompactionError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def _scheme(location: str) -> str | None:
    """The URL scheme Lance would see, or None for a plain path (a drive letter is a path)."""
    m = _SCHEME.match(location)
    return m.group(1) if m and len(m.group(1)) > 1 else None


def reinterpreted(location: str) -> str | None:
    """Why Lance would read ``location`` as another location than its text says (a spelling
    it decodes, resolves or cuts), or None when it reads it as written."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in location):
        return "a control character (Lance's URL parser drops tabs and newlines)"
    scheme = _scheme(location)
    if scheme is None:
        if ".." in re.split(r"[/\\]", location):
            return "a '..' segment (it leads out of the folder it names)"
        return None
    if scheme != scheme.lower():
        return f"an upper-case scheme '{scheme}:' (Lance reads it as '{scheme.lower()}:')"
    if _ESCAPE.search(location):
        return (f"the percent-escape '{_ESCAPE.search(location).group(0)}' (Lance decodes escapes in a URL: "
                "'%2e%2e' is '..')")
    for c, why in (("\\", "a backslash (Lance reads it as '/' in a file:// URL)"),
                   ("?", "a '?' (Lance cuts a URL there)"), ("#", "a '#' (Lance cuts a URL there)")):
        if c in location:
            return why
    rest = location[len(scheme) + 1:]
    if scheme == "file" and not rest.startswith("//"):
        rest = "//" + rest  # file:/x is file:///x to Lance
    if not rest.startswith("//"):
        return f"no '//' after '{scheme}:' (write {scheme}://<bucket>/<path>)"
    authority, _, path = rest[2:].partition("/")
    if not authority and scheme != "file":
        return "no bucket (nothing between '//' and the path)"
    segments = path.split("/")
    if segments and segments[-1] == "":
        segments = segments[:-1]  # one trailing '/' is no segment
    for s in segments:
        if s in (".", ".."):
            return f"a '{s}' segment (Lance resolves dot segments in a URL)"
        if s == "":
            return "an empty segment '//' (Lance drops it, and with it what a '..' after it removes)"
    return None


def _split(location: str) -> tuple[str | None, str, list[str]]:
    """(scheme, authority, path segments) of a location in normal form; a plain path has
    scheme None and its absolute, normalised path's segments."""
    scheme = _scheme(location)
    if scheme is None:
        return None, "", [s for s in os.path.realpath(location).split(os.sep) if s]
    rest = location[len(scheme) + 1:]
    authority, _, path = (rest[2:] if rest.startswith("//") else rest).partition("/")
    segments = [s for s in path.split("/") if s]
    if scheme == "file":
        return None, "", [s for s in os.path.realpath("/" + "/".join(segments)).split(os.sep) if s]
    return scheme, authority, segments


def inside(location: str, warehouse: str) -> bool:
    """Whether ``location`` lies in ``warehouse`` (both in normal form): the same store and
    bucket, written alike, and the warehouse's path segments a prefix of the location's; a
    local location by its real path (symbolic links resolved), as the JVM's check."""
    a, b = _split(location), _split(warehouse)
    return a[0] == b[0] and a[1] == b[1] and a[2][:len(b[2])] == b[2]


def check(location: str, warehouse: str | None, what: str, catalog: str) -> str:
    """``location`` if Lance reads it as written and it lies inside ``warehouse`` (when the
    catalog has one); else a :class:`CompactionError` naming ``what`` and the reason."""
    why = reinterpreted(location)
    if why is not None:
        raise CompactionError(f"{what}: location '{location}' is refused: it holds {why}; "
                              "locations reach Lance only as written, in normal form")
    if warehouse and not inside(location, warehouse):
        raise CompactionError(f"{what}: location '{location}' is outside the warehouse {warehouse} "
                              f"of catalog {catalog}; refused")
    return location
