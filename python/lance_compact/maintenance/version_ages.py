"""A table's versions and which of them cleanup would remove, from one listing of its
``_versions/`` folder and the commit times of as few versions as the answer needs.

``LanceDataset.versions()`` reads every manifest (on an object store, a round trip or two per
version: 27 requests for a table of 26 versions), only for their times. Health needs the
number of versions and which of them are older than a cutoff, beyond the newest ``retain``.
Commit times rise with versions (each commit follows the one it builds on), so the versions
older than a cutoff are a prefix of the list, found by bisection:

* the listing gives the version numbers (Lance's manifest names, both naming schemes; a
  detached version is not one of them);
* the current version's time is in the open manifest already: when it is older than the
  cutoff, so is every earlier version, and nothing more is read;
* else the oldest candidate's manifest is read (none reclaimable if it is younger), then the
  newest's, then a bisection between them: at most ``2 + log2(versions)`` manifests, usually one.

The answer is what ``compaction/rules.reclaimable`` gives on ``versions()`` whenever commit
times rise with versions (writers whose clocks disagree by more than the gap between their
commits could make the two differ by a version; cleanup itself, Lance's, reads every
manifest and decides with its own times). When the folder cannot be listed or its names do
not include the open version (another layout), ``versions()`` answers, as before.

A version's manifest never changes, so the engine (one long-lived process per driver) keeps the
commit times it has read, by table URI and storage options (:data:`COMMIT_TIMES`): a later
evaluation of the same table (the next statement, the maintenance service's next round, a
Thrift server's next query) reads no manifest for a version it knows. On an object store that
is a HEAD and a GET a table fewer (measured on 200 tables: a dry run's 5.0 requests a table the
first time, 2.0 later, the open's manifest coming from the engine's Lance session too).
"""
from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

import lance

from ..compaction import rules
from ..compaction.history import version_gone
from ..runtime.tables import list_folder, options_digest

# Lance's manifest names: "<version>.manifest" (V1), or 20 digits of u64::MAX - version (V2).
_MANIFEST = re.compile(r"^(\d+)\.manifest$")
_V2_DIGITS = 20
_U64_MAX = (1 << 64) - 1
_DETACHED = 1 << 63  # Lance marks a detached version with the top bit


def version_number(name: str) -> int | None:
    """The version a ``_versions/`` entry's file name holds, or None (not a manifest of an
    attached version: the latest-version hint, a detached version, a temporary file)."""
    m = _MANIFEST.match(name.rsplit("/", 1)[-1])
    if m is None:
        return None
    digits = m.group(1)
    version = _U64_MAX - int(digits) if len(digits) == _V2_DIGITS else int(digits)
    return version if 0 < version < _DETACHED else None


def listed_versions(uri: str, storage_options: Mapping[str, str] | None) -> list[int] | None:
    """The table's versions, sorted, from one listing of ``_versions/``; None when it cannot be
    listed (the caller reads ``versions()`` instead)."""
    try:
        names = list_folder(uri, storage_options, "_versions")
    except Exception:  # an unusual layout or store: versions() answers
        return None
    return sorted(v for v in map(version_number, names) if v is not None)


def _utc(when: datetime) -> datetime:
    return when.astimezone(timezone.utc)


class CommitTimes:
    """The commit times of versions already read, by table, for the engine's lifetime.

    A table dropped and created again at the same URI starts its versions again from 1: an
    open version below the highest one seen at that URI forgets the URI's times (a table
    created again and grown past the old one's versions between two evaluations is not told
    apart; its old times would only make cleanup look due, and Lance's cleanup decides with
    the manifests' own times). Only listed versions are kept (cleanup removes the others);
    at most ``tables`` URIs and ``versions`` times in all (about 200 bytes each), the least
    recently evaluated tables forgotten first, so the engine's memory stays flat however long
    it runs and however many versions its tables keep."""

    def __init__(self, tables: int = 4096, versions: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._tables = tables
        self._versions = versions
        self._count = 0  # times kept, over every table
        self._by_uri: OrderedDict[str, tuple[int, dict[int, datetime]]] = OrderedDict()

    def known(self, uri: str, version: int) -> dict[int, datetime]:
        """The times known for ``uri`` opened at ``version`` (a copy the caller may extend)."""
        with self._lock:
            entry = self._by_uri.get(uri)
            if entry is None or version < entry[0]:
                return {}
            self._by_uri.move_to_end(uri)
            return dict(entry[1])

    def remember(self, uri: str, version: int, times: Mapping[int, datetime], listed: list[int]) -> None:
        """Keep ``times`` for ``uri`` opened at ``version``, of the ``listed`` versions only."""
        present = set(listed)
        kept = {v: t for v, t in times.items() if v in present}
        if len(kept) > self._versions:  # one table past the whole bound: its newest times
            kept = dict(sorted(kept.items())[-self._versions:])
        with self._lock:
            old = self._by_uri.pop(uri, None)
            self._count -= len(old[1]) if old else 0
            self._by_uri[uri] = (version, kept)
            self._count += len(kept)
            while len(self._by_uri) > self._tables or self._count > self._versions:
                self._count -= len(self._by_uri.popitem(last=False)[1][1])

    def figures(self) -> str:
        """What is kept against the bounds, for the engine's log."""
        with self._lock:
            return (f"commit times of {len(self._by_uri)} tables (at most {self._tables}), "
                    f"{self._count} versions (at most {self._versions})")

COMMIT_TIMES = CommitTimes()


def table_key(uri: str, storage_options: Mapping[str, str] | None) -> str:
    """Which table: its URI and a digest of its storage options (the same URI on another
    endpoint is another table)."""
    return uri.rstrip("/") + "#" + options_digest(storage_options)


class _Times:
    """Commit times of a table's versions, each manifest read at most once; ``known`` (times
    read before, extended in place) spares the reads it answers."""

    def __init__(self, ds: lance.LanceDataset, known: dict[int, datetime] | None = None) -> None:
        self.ds = ds
        self.known = known if known is not None else {}
        self.known[ds.version] = _utc(ds.get_version()["timestamp"])  # the open manifest: no read
        self.reads = 0

    def __call__(self, version: int) -> datetime:
        if version not in self.known:
            self.reads += 1
            self.known[version] = _utc(self.ds.checkout_version(version).get_version()["timestamp"])
        return self.known[version]


def reclaimable(ds: lance.LanceDataset, versions: list[int], cutoff: datetime,
                retain: int | None, known: dict[int, datetime] | None = None) -> tuple[list[int], int]:
    """The versions cleanup would remove (not the newest ``retain``, at least the newest one,
    committed before ``cutoff``) among ``versions`` (sorted, the listing's), and how many
    manifests were read to know it. ``known``: commit times read before, by version; the ones
    read now are added to it."""
    time = _Times(ds, known)
    return reclaimable_by(versions, ds.version, cutoff, retain, time), time.reads


def reclaimable_by(versions: list[int], current: int, cutoff: datetime, retain: int | None,
                   time: Callable[[int], datetime]) -> list[int]:
    """:func:`reclaimable`'s answer with the commit time of a version given by ``time`` (which
    may raise ``KeyError`` for one it does not know: health_cache.py's known times only);
    ``current``: the open version, whose time is asked first."""
    keep = max(1, retain or 1)
    candidates = versions[:-keep]
    if not candidates:
        return []
    if candidates[-1] <= current and time(current) < cutoff:
        return candidates
    if time(candidates[0]) >= cutoff:
        return []
    if time(candidates[-1]) < cutoff:
        return candidates
    older, younger = 0, len(candidates) - 1  # candidates[older] is older than the cutoff, [younger] not
    while younger - older > 1:
        mid = (older + younger) // 2
        if time(candidates[mid]) < cutoff:
            older = mid
        else:
            younger = mid
    return candidates[:younger]


# Bytes of manifest files :func:`version_infos` decodes at once (a manifest holds about 85 bytes a
# fragment on disk and about a kilobyte decoded: some 370,000 fragments, 0.4 GB), by at most
# VERSION_THREADS threads; a single manifest above it is read alone.
MANIFEST_BYTES_AT_ONCE = 32 << 20
VERSION_THREADS = 4
# A version read alone (its own open) costs up to this much of what versions() spends on the same
# manifest (measured: 1.0x at 100,000 fragments, 1.4x for nine manifests of 150,000): it pays when
# the open version's manifest or the versions a filter leaves out are that much of the whole.
READ_ALONE_COST = 1.4


def _local_manifests(uri: str) -> dict[int, int] | None:
    """Version -> its manifest file's size, for a table on local disk (one directory scan); None
    for a table elsewhere or a folder that cannot be read."""
    if "://" in uri:
        return None
    try:
        with os.scandir(os.path.join(uri, "_versions")) as entries:
            return {v: e.stat().st_size for e in entries if (v := version_number(e.name)) is not None}
    except OSError:
        return None


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """Threads for :func:`version_infos`' manifest reads, shared by every table read at once (a
    warehouse's history): each read holds the GIL only to make its dict, and none submits more
    work (no deadlock)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(VERSION_THREADS, thread_name_prefix="lance-compact-versions")
        return _POOL


_NO_CACHE: lance.Session | None = None


def _uncached() -> lance.Session:
    """A Lance session that keeps nothing: an old version's manifest read for its summary must not
    push other tables' current manifests out of the engine's shared cache (a table of 2,000
    versions would fill its 64 MiB with manifests nobody reads again)."""
    global _NO_CACHE
    with _POOL_LOCK:
        if _NO_CACHE is None:
            _NO_CACHE = lance.Session(index_cache_size_bytes=0, metadata_cache_size_bytes=0)
        return _NO_CACHE


def version_infos(ds: lance.LanceDataset,
                  wanted: Callable[[int], bool] | None = None) -> tuple[list[dict[str, Any]], set[int]]:
    """What ``ds.versions()`` gives (``version``, ``timestamp``, ``metadata``: the manifest's
    summary), oldest first, for the versions ``wanted`` keeps (all by default); and the numbers
    of every version the table has (wanted or not).

    For a table on local disk, from one scan of ``_versions/``: the open version's summary is the
    open's (its manifest is not decoded again), the versions ``wanted`` leaves out are not read,
    and the others are read a few at once, at most :data:`MANIFEST_BYTES_AT_ONCE` of manifest
    files together (their sizes are in the scan), through a session that caches nothing; when
    what is skipped is too little for that to pay (:data:`READ_ALONE_COST`), ``versions()``
    answers, decoding every manifest one after the other. Measured: 100,000 fragments and three
    versions, 0.23-0.25 s against 0.35-0.50 s; 1,000,000 fragments in the open version, its
    manifest not decoded twice. A version cleaned up between the scan and its read is left out,
    as a scan after the cleanup would. On an object store ``versions()`` answers: a GET a
    manifest, where a read of one version costs a HEAD and a GET."""
    sizes = _local_manifests(ds.uri)
    chosen = sorted(v for v in (sizes or ()) if wanted is None or wanted(v))
    if not sizes or ds.version not in sizes or \
            READ_ALONE_COST * sum(sizes[v] for v in chosen if v != ds.version) > sum(sizes.values()):
        # another layout or store, or little to skip: versions() reads every manifest for less
        every = sorted(ds.versions(), key=lambda x: x["version"])
        return [x for x in every if wanted is None or wanted(x["version"])], {x["version"] for x in every}

    def one(version: int) -> dict[str, Any] | None:
        if version == ds.version:
            return ds.get_version()  # the open manifest: no read
        try:
            return lance.dataset(ds.uri, version=version, session=_uncached()).get_version()
        except (OSError, ValueError) as e:
            if version_gone(e):  # a concurrent cleanup removed it after the scan
                return None
            raise

    def read(batch: list[int]) -> list[dict[str, Any] | None]:
        return [one(batch[0])] if len(batch) == 1 else list(_pool().map(one, batch))

    infos: list[dict[str, Any] | None] = []
    batch: list[int] = []
    held = 0
    for v in chosen:
        size = 0 if v == ds.version else sizes[v]
        if batch and (held + size > MANIFEST_BYTES_AT_ONCE or len(batch) == VERSION_THREADS):
            infos += read(batch)
            batch, held = [], 0
        batch.append(v)
        held += size
    if batch:
        infos += read(batch)
    return [i for i in infos if i is not None], set(sizes)


def version_facts(ds: lance.LanceDataset, storage_options: Mapping[str, str] | None,
                  cutoff: datetime, retain: int | None, listed: list[int] | None = None,
                  times: dict[int, datetime] | None = None) -> tuple[int, list[int]]:
    """(how many versions the table has, those cleanup would remove), from the listing when it
    can be read (with the commit times this process read before), else from ``versions()``.
    ``listed``: the listing when the caller made it already (health_cache.py's probe);
    ``times``: a dict given to be filled with the commit times known of the listed versions."""
    listed = listed if listed is not None else listed_versions(ds.uri, storage_options)
    if listed and ds.version in listed:
        try:
            where = table_key(ds.uri, storage_options)
            known = COMMIT_TIMES.known(where, ds.version)
            old = reclaimable(ds, listed, cutoff, retain, known)[0]
            COMMIT_TIMES.remember(where, ds.version, known, listed)
            if times is not None:
                present = set(listed)
                times.update((v, t) for v, t in known.items() if v in present)
            return len(listed), old
        except (OSError, ValueError) as e:
            if not version_gone(e):  # a concurrent cleanup removed a listed version: read them all
                raise
    if times is not None:
        times.clear()  # not from the listing: nothing the caller may keep
    versions: list[dict[str, Any]] = ds.versions()
    return len(versions), rules.reclaimable(versions, cutoff, retain)
