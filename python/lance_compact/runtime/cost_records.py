"""What each maintenance version cost, kept with the table: bytes read and written, task-seconds
and elapsed time of the step that committed it, in a small JSON object at
``_lance_compact/costs/<version>.json`` under the table's location.

Why beside the table and not in its transaction: pylance 14.0.2 lets a commit carry transaction
properties only through ``LanceDataset.commit``; a compaction commits through
``Compaction.commit`` and an index build through ``commit_existing_index_segments``, which take
none (and their index remapping and segment checks are Lance's own, not ours to redo). A record
written right after the commit landed is kept with the table all the same: any later application
and ``lance.system.maintenance_history`` read it back (a version without one, older than this
product's records or whose record could not be written, shows NULL). Lance's cleanup leaves the
folder alone (it removes only what its manifests name).

Cheap to read: one listing of the folder per table, and one small read per maintenance version
asked for that has a record. Writing never fails the work: the commit stands; a record that
could not be written is logged and leaves the version's cost NULL. ``CALL lance.cleanup``
removes the records of the versions it removed (:func:`prune`): a table maintained every few
minutes would otherwise keep one file a maintenance version forever, and each read lists them all.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping

from . import progress
from .tables import FILE_SESSIONS, list_folder

log = logging.getLogger(__name__)

FOLDER = "_lance_compact/costs"
# A record is ~150 bytes, written padded with spaces to exactly this size so that one ranged
# read of known length reads it (a ranged read past an object's end fails).
SIZE = 512


@dataclass(frozen=True)
class Cost:
    """One maintenance version's cost (None: not measured). ``step``: compaction, index build,
    index optimization."""

    version: int
    step: str
    bytes_read: int | None
    bytes_written: int | None
    task_ms: int | None
    elapsed_ms: int | None


def _path(base: str, name: str) -> str:
    return f"{base}/{FOLDER}/{name}" if base else f"{FOLDER}/{name}"


def _version_of(name: str) -> int | None:
    """The version a record's file name holds (``<version>.json``, ASCII digits), else None: a
    name such as a superscript two and .json passes str.isdigit() and fails int()."""
    stem = name[:-5] if name.endswith(".json") else ""
    return int(stem) if stem.isascii() and stem.isdigit() else None


def record(table: str, uri: str, storage_options: Mapping[str, str] | None, cost: Cost,
           catalog: str | None = None) -> None:
    """Keep ``cost`` with the table (after its version's commit landed), and say it to the
    statement's caller (the Lance tab's History page shows the same figures). Never raises."""
    body = asdict(cost)
    progress.figures({"kind": "cost", "catalog": catalog or "", "table": table, **body})
    try:
        session, base = FILE_SESSIONS.folder(uri, storage_options)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write(json.dumps(body).ljust(SIZE)[:SIZE])
            local = f.name
        try:
            session.upload_file(local, _path(base, f"{cost.version}.json"))
        finally:
            os.unlink(local)
    except Exception as e:  # the commit stands; its cost is not known later
        log.warning("table %s: the cost of version %d was not kept with the table: %s: %s",
                    table, cost.version, type(e).__name__, str(e).splitlines()[0] if str(e) else "")


def read(uri: str, storage_options: Mapping[str, str] | None, versions: Iterable[int]) -> dict[int, Cost]:
    """The kept costs of ``versions`` (those without a record are left out): one listing, then
    one read per version that has a record. A record that cannot be read is left out too."""
    wanted = set(versions)
    if not wanted:
        return {}
    try:
        names = list_folder(uri, storage_options, FOLDER)
    except (OSError, ValueError):
        return {}
    present = {v for v in map(_version_of, names) if v is not None} & wanted
    if not present:
        return {}
    session, base = FILE_SESSIONS.folder(uri, storage_options)
    out = {}
    for v in sorted(present):
        try:
            data = json.loads(bytes(session.read_range(_path(base, f"{v}.json"), 0, SIZE)))
            out[v] = Cost(version=v, step=str(data.get("step") or ""),
                          **{k: (int(data[k]) if isinstance(data.get(k), (int, float)) else None)
                             for k in ("bytes_read", "bytes_written", "task_ms", "elapsed_ms")})
        except (OSError, ValueError, TypeError, AttributeError, OverflowError) as e:  # Infinity: OverflowError
            log.warning("table at %s: the kept cost of version %d is not readable: %s", uri, v, type(e).__name__)
    return out


def prune(uri: str, storage_options: Mapping[str, str] | None, kept: Iterable[int],
          dry_run: bool = False) -> list[str]:
    """Remove the records of versions the table no longer has (after a cleanup): a version
    below the newest of ``kept`` (the table's versions after it) and not among them is gone for
    good; one above may be a commit landing now, whose record comes after it. The records'
    paths under the table's location, removed (``dry_run``: that would be, none removed); never
    raises (a record left behind only costs its listing)."""
    kept = set(kept)
    if not kept:
        return []
    newest, removed = max(kept), []
    try:
        names = list_folder(uri, storage_options, FOLDER)
        session, base = FILE_SESSIONS.folder(uri, storage_options)
        for n in names:
            v = _version_of(n)
            if v is not None and v < newest and v not in kept:
                if not dry_run:
                    session.delete_file(_path(base, n))
                removed.append(f"{FOLDER}/{n}")
    except Exception as e:  # noqa: BLE001 - the cleanup stands; old records stay until the next one
        log.warning("table at %s: the costs of removed versions were not all removed (%d were): %s",
                    uri, len(removed), type(e).__name__)
    return removed
