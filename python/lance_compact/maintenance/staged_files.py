"""Files a statement wrote and never committed, removed after its worker died or was killed (the
engine action ``discard_staged``, sent by the pool with the statement's own request and
``"discard": {uri: [paths]}``), or by a worker whose JVM died, before it exits
(:func:`remove_own`).

A path is removed only if the table's latest version does not reference it (an index segment
folder ``_indices/<uuid>`` no committed index holds; a data file ``data/<name>`` no fragment
holds), only in the form a request stages (nothing else, no ``..``), and only under a table
location the request itself names, checked as every location is (runtime/locations.py). Local
tables only: on an object store the files are left for ``CALL lance.cleanup(...,
delete_unverified => true)``, as a failed build's are.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
from typing import Any, Iterable, Mapping

from ..errors import CompactionError
from ..runtime import commit_gate, locations
from ..runtime.envelope import Envelope, Result
from ..runtime.tables import open_dataset

log = logging.getLogger(__name__)

# What a request stages: a segment folder (a UUID) or a data file's name, one level deep.
_STAGED = re.compile(r"(_indices/[0-9a-fA-F-]{36}|data/[A-Za-z0-9_.-]+)")


def _root(uri: str) -> str | None:
    """The local folder of ``uri``, None on an object store."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    return None if "://" in uri else uri


def discard(table: str, uri: str, storage_options: Mapping[str, str], paths: Iterable[str]) -> list[str]:
    """Remove those of ``paths`` (relative to ``uri``) that the latest version of the table does
    not reference; the paths removed (said in the engine's log)."""
    root = _root(uri)
    wanted = sorted({p for p in paths if isinstance(p, str) and _STAGED.fullmatch(p) and ".." not in p})
    if root is None or not wanted:
        if wanted:
            log.info("table %s: %d uncommitted files on an object store are left for cleanup "
                     "(delete_unverified)", table, len(wanted))
        return []
    latest = open_dataset(table, uri, dict(storage_options))
    indices = {str(s.uuid) for i in latest.describe_indices() for s in i.segments}
    data = {d.path for f in latest.get_fragments() for d in f.metadata.files}
    removed = []
    for p in wanted:
        kind, name = p.split("/", 1)
        if (kind == "_indices" and name in indices) or (kind == "data" and name in data):
            continue  # committed after all: never removed
        full = os.path.join(root, kind, name)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            elif os.path.lexists(full):
                os.remove(full)
            else:
                continue
            removed.append(p)
        except OSError as e:
            log.warning("table %s: could not remove uncommitted %s: %s", table, p, e)
    if removed:
        log.info("table %s: removed %d uncommitted files a stopped statement wrote: %s", table, len(removed),
                 ", ".join(removed))
    return removed


def _locations(request: Envelope) -> dict[str, str]:
    """The table locations the request names (its table, a warehouse request's tables), each
    with its table's name."""
    out = {}
    if request.target is not None:
        out[request.target.uri] = request.target.table
    for e in request.tables:
        out.setdefault(e.uri, e.qualified)
    return out


def discard_staged(request: Envelope) -> Result:
    """The engine action: ``request.extras['discard']`` (uri -> paths) removed as :func:`discard`
    says, only under locations the request names, each checked as every location is. One row per
    table: its name and the paths removed."""
    wanted = request.extras.get("discard")
    if not isinstance(wanted, dict):
        raise CompactionError("engine: discard_staged: the request has no discard map")
    named = _locations(request)
    rows = []
    for uri, paths in wanted.items():
        if uri not in named:
            log.warning("discard_staged: %s is not a table location of the request: nothing removed there", uri)
            continue
        locations.check(uri, request.warehouse, f"table {named[uri]}", request.catalog_name)
        storage = request.target.storage_options if request.target is not None else request.storage_options
        with commit_gate.gate(named[uri], "removing uncommitted files"):
            removed = discard(named[uri], uri, storage, paths if isinstance(paths, list) else [])
        rows.append([named[uri], removed])
    return Result("table STRING, removed ARRAY<STRING>", rows)


def remove_own(seconds: float = 10.0) -> None:
    """What this process's requests staged and have not committed, removed (a worker whose JVM
    died, before it exits), waiting at most ``seconds`` in all: first for commits still under
    way (a statement whose commit has not ended by then keeps its files: they may be committed),
    then for the removal."""
    deadline = time.monotonic() + seconds
    staged = commit_gate.own_staged(wait=seconds)
    if not staged:
        return

    def work() -> None:
        for uri, (paths, storage) in staged.items():
            try:
                discard(uri, uri, storage, paths)
            except Exception as e:  # the table may be gone: cleanup removes what is left
                log.warning("removing uncommitted files under %s failed: %s", uri, e)

    t = threading.Thread(target=work, daemon=True, name="remove-own-staged")
    t.start()
    t.join(max(1.0, deadline - time.monotonic()))
