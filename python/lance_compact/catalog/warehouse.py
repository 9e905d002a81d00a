"""The warehouse's folders on any store Lance reaches (s3://, gs://, az://, ...), through
Lance's own object store and storage options: the catalog lists and creates namespaces and
finds tables there with these calls. (A local warehouse is listed by the JVM directly.)

Object stores have no folders: a namespace is a prefix with something under it. An empty
namespace made by ``CREATE NAMESPACE`` holds one empty marker object, :data:`MARKER`.
"""
from __future__ import annotations

import os
import tempfile

from lance.file import LanceFileSession

from ..errors import CompactionError
from ..runtime.envelope import Envelope, Result

MARKER = ".lance-namespace"


def _session(request: Envelope) -> tuple[LanceFileSession, str]:
    if request.target is None:
        raise CompactionError("warehouse request names no location")
    uri = request.target.uri
    return LanceFileSession(uri.rstrip("/"), dict(request.storage_options) or None), uri


def _children(session: LanceFileSession) -> tuple[list[str], list[str]]:
    listed = session.list_with_delimiter()
    name = lambda p: p.rstrip("/").rsplit("/", 1)[-1]  # noqa: E731
    return sorted(name(p) for p in listed.common_prefixes), sorted(name(o) for o in listed.objects)


def _rows(rows: list[tuple[str, str]]) -> Result:
    return Result("`name` STRING, `kind` STRING", rows)


def warehouse_rows(request: Envelope) -> Result:
    """Serve one warehouse request: ``{"op", "uri", "storage_options"}``, with op

    - ``list``: rows ``(name, "folder" | "object")`` of the location's immediate children;
    - ``create``: make the location exist as an (empty) namespace; one row ``(uri, "created")``;
    - ``drop``: remove an empty namespace's marker; fails if it holds anything else.
    """
    op = request.extras.get("op")
    session, uri = _session(request)
    try:
        folders, objects = _children(session)
        if op == "list":
            return _rows([(n, "folder") for n in folders] + [(n, "object") for n in objects])
        if op == "create":
            with tempfile.NamedTemporaryFile(delete=False) as empty:
                pass
            try:
                session.upload_file(empty.name, MARKER)
            finally:
                os.unlink(empty.name)
            return _rows([(uri, "created")])
        if op == "drop":
            if folders or [o for o in objects if o != MARKER]:
                raise CompactionError(f"namespace {uri} is not empty")
            if MARKER in objects:
                session.delete_file(MARKER)
            return _rows([(uri, "dropped")])
    except (OSError, RuntimeError, ValueError) as e:
        raise CompactionError(f"cannot {op} {uri}: {str(e).splitlines()[0]}") from None
    raise CompactionError(f"warehouse: unknown operation {op!r}")
