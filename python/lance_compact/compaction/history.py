"""The last compaction of a table, read from Lance's own transactions: no record of ours,
no extra commit. Any compaction counts (a Rewrite transaction: this product's, pylance's
``compact_files``, lance-spark's ``OPTIMIZE``).

Tables as maintenance leaves them are read here too: cleanup removes old versions (their
manifests and transactions), so a search back through history ends at the oldest version
left, never with an error; and pylance 14.0.2 cannot decode a Rewrite that remapped indices
(:func:`undecodable_rewrite`), so such a version counts as a compaction whose counts are known
only from the manifests around it."""
from __future__ import annotations

import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import lance

from ..runtime.tables import FILE_SESSIONS
from .transactions import manifest_kind, manifest_names, operation_kind

# Versions whose manifest heads are read at once per table, newest first: the first BATCH
# (one round trip, where most searches end: a small table's whole history, or a maintained
# table's newest few versions), then twice as many each time up to MOST_BATCH (a long history
# in few round trips, without reading far ahead of a Rewrite found near its top).
BATCH = 4
MOST_BATCH = 16
# Threads reading manifest heads, shared by every table searched at once (health reads at most
# METADATA_THREADS tables in full at once, each a BATCH at a time).
HEAD_THREADS = 32


@dataclass(frozen=True)
class LastCompaction:
    version: int            # the version the compaction committed
    fragments_removed: int | None  # None: the version before was cleaned up and the
    fragments_added: int | None    # Rewrite's transaction cannot be decoded


def undecodable_rewrite(error: TypeError) -> bool:
    """Whether reading a transaction failed on pylance 14.0.2's known gap: it cannot decode a
    Rewrite that remapped indices (its RewrittenIndex binding takes more arguments than it
    passes). Only a Rewrite carries those, so such a transaction is a Rewrite. The one place
    that gap is recognised."""
    return isinstance(error, TypeError) and "RewrittenIndex" in str(error)


def version_gone(error: BaseException) -> bool:
    """Whether reading a version failed because its manifest is not there: cleanup removed it
    (Lance: "Dataset at path .../_versions/N.manifest was not found"). Not a missing table:
    the table's current version was opened already."""
    text = str(error)
    return isinstance(error, (OSError, ValueError)) and "not found" in text and ".manifest" in text


def _is_rewrite(dataset: lance.LanceDataset, version: int) -> bool | None:
    """Whether ``version`` was committed by a Rewrite; None when it or its transaction is gone."""
    kind = operation_kind(dataset, version)  # its file's first bytes (transactions.py)
    if kind is not None:
        return kind == "Rewrite"
    try:
        t = dataset.read_transaction(version)
    except TypeError as e:
        if undecodable_rewrite(e):
            return True
        raise
    except (OSError, ValueError) as e:
        if version_gone(e):
            return None
        raise
    return None if t is None or t.operation is None else type(t.operation).__name__ == "Rewrite"


def _live_rows(dataset: lance.LanceDataset, version: int) -> int | None:
    """The live rows of ``version`` from its manifest's summary; None when cleanup removed it
    or the summary does not say."""
    try:
        at = dataset if version == dataset.version else dataset.checkout_version(version)
        rows = (at.get_version().get("metadata") or {}).get("total_rows")
    except (OSError, ValueError) as e:
        if version_gone(e):
            return None
        raise
    return int(rows) if rows is not None else None


def _read_rewrite(dataset: lance.LanceDataset, v: int) -> bool | None:
    """Whether ``v`` was committed by a Rewrite, read from its transaction file (the manifest
    file inlined none): its first bytes, else (where they say nothing) ``read_transaction``,
    unless the live rows changed from the version before (a compaction keeps every live row;
    reading an Append of 100,000 fragments costs a Python object per fragment, 2 s). None:
    it or its transaction is gone."""
    kind = operation_kind(dataset, v)
    if kind is not None:
        return kind == "Rewrite"
    if v > 1:
        after, before = _live_rows(dataset, v), _live_rows(dataset, v - 1)
        if after is not None and before is not None and after != before:
            return False
    return _is_rewrite(dataset, v)


def _kinds(dataset: lance.LanceDataset, versions: list[int]) -> list[str | None]:
    """The operation of each of ``versions`` from its manifest file's inlined transaction
    (transactions.manifest_kind), read at once on a shared pool; None where it is not known so
    (not laid out so, or not found under either naming: the caller reads the slow way)."""
    options = getattr(dataset, "_storage_options", None)
    try:
        session, base = FILE_SESSIONS.folder(dataset.uri, options)
    except (OSError, ValueError):
        return [None] * len(versions)

    def one(v: int) -> str | None:
        for name in manifest_names(v):
            try:
                return manifest_kind(session, f"{base}/{name}" if base else name)
            except (OSError, ValueError, struct.error):
                continue  # not this naming (or unreadable): the other, then the slow way
        return None

    if len(versions) == 1:
        return [one(versions[0])]
    return list(_pool().map(one, versions))


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """Threads for the reads of manifest heads, shared by every table searched at once: each
    read waits on the store with the GIL released, and none submits more work (no deadlock)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(HEAD_THREADS, thread_name_prefix="lance-compact-history")
        return _POOL


def newest_rewrite(dataset: lance.LanceDataset, listed: list[int] | None = None,
                   look_back: int | None = None) -> tuple[int | None, bool]:
    """(the newest version up to ``dataset.version`` committed by a Rewrite, or None; whether
    the search was complete). Newest first, a few versions at a time read at once (:data:`BATCH`), each
    version's operation from its manifest file's first bytes (one ranged read, two for a table
    with indices), else from its transaction file. The search ends at a version cleanup removed
    (absent from ``listed``, the table's ``_versions/`` listing, when given: nothing is read for
    it), at version 2 (a Rewrite reads an existing version, so version 1 is never one), or after
    ``look_back`` versions (then, with older versions left unread, it is not complete: the
    caller says the last compaction is not known beyond them)."""
    present = set(listed) if listed is not None else None
    candidates = range(dataset.version, 1, -1)
    if present is not None and dataset.version in present:  # else a listing of another moment: not used
        gone = next((v for v in candidates if v not in present), 1)
        candidates = range(dataset.version, gone, -1)
    complete = look_back is None or len(candidates) <= look_back
    if not complete:
        candidates = candidates[:look_back]
    start, size = 0, BATCH
    while start < len(candidates):
        batch = list(candidates[start:start + size])
        start, size = start + size, min(2 * size, MOST_BATCH)
        for v, kind in zip(batch, _kinds(dataset, batch)):
            rewrite = kind == "Rewrite" if kind is not None else _read_rewrite(dataset, v)
            if rewrite is None:  # removed by cleanup: the search ends, as at version 1
                return None, True
            if rewrite:
                return v, True
    return None, complete


def _newest_rewrite(dataset: lance.LanceDataset) -> int | None:
    """The newest version committed by a Rewrite, the whole history searched."""
    return newest_rewrite(dataset)[0]


def _fragment_ids(dataset: lance.LanceDataset, version: int) -> set[int] | None:
    """The fragment ids of ``version``; None when cleanup removed it."""
    try:
        return set(dataset.checkout_version(version).fragment_ids())
    except (OSError, ValueError) as e:
        if version_gone(e):
            return None
        raise


def rewrite_counts(dataset: lance.LanceDataset, version: int) -> tuple[int | None, int | None]:
    """(fragments removed, fragments added) by the Rewrite that committed ``version``: from
    the manifests before and after it, else (the version before was cleaned up) from the
    Rewrite's own groups, else (pylance cannot decode it) (None, None) -- an unknown count is
    not made up."""
    before = _fragment_ids(dataset, version - 1) if version > 1 else None
    after = _fragment_ids(dataset, version) if before is not None else None
    if before is not None and after is not None:
        return len(before - after), len(after - before)
    try:
        t = dataset.read_transaction(version)
    except TypeError as e:
        if undecodable_rewrite(e):
            return None, None
        raise
    except (OSError, ValueError) as e:
        if version_gone(e):
            return None, None
        raise
    groups = getattr(getattr(t, "operation", None), "groups", None)
    if groups is None:
        return None, None
    return sum(len(g.old_fragments) for g in groups), sum(len(g.new_fragments) for g in groups)


def last_compaction_version(dataset: lance.LanceDataset,
                            versions: list[dict[str, Any]] | None = None) -> int | None:
    """The version the table's newest compaction committed (up to ``dataset.version``), or
    None (what health needs: no manifest around it is opened). ``versions``: the table's
    ``versions()`` when the caller read them already; then only the transactions of versions
    that kept the live row count of the version before are read -- a compaction keeps every
    live row, so any other version cannot be one (on an object store each transaction read
    is a round trip or two per version)."""
    if versions is None:
        return _newest_rewrite(dataset)
    rows = {v["version"]: (v.get("metadata") or {}).get("total_rows") for v in versions}
    for v in sorted((n for n in rows if n <= dataset.version), reverse=True):
        now, before = rows[v], rows.get(v - 1)
        if now is not None and before is not None and now != before:
            continue  # the live rows changed: not a compaction
        rewrite = _is_rewrite(dataset, v)
        if rewrite is None:  # its transaction is gone or not recorded: the search ends, as above
            return None
        if rewrite:
            return v
    return None


def last_compaction(dataset: lance.LanceDataset) -> LastCompaction | None:
    """The table's newest compaction up to ``dataset.version``, or None."""
    version = _newest_rewrite(dataset)
    if version is None:
        return None
    return LastCompaction(version, *rewrite_counts(dataset, version))


def commit_time(dataset: lance.LanceDataset, version: int) -> datetime | None:
    """When ``version`` was committed (its manifest's timestamp); None when cleanup removed it."""
    # get_version() reads the checked-out manifest only; versions() would read them all.
    try:
        at = dataset if version == dataset.version else dataset.checkout_version(version)
        return at.get_version()["timestamp"]
    except (OSError, ValueError) as e:
        if version_gone(e):
            return None
        raise


def committed_at(dataset: lance.LanceDataset, version: int) -> str | None:
    """When ``version`` was committed, ISO 8601 in UTC; None when cleanup removed it."""
    when = commit_time(dataset, version)
    return when.astimezone(timezone.utc).isoformat(timespec="seconds") if when is not None else None
