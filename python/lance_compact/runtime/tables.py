"""Opening the dataset a request names, with errors that say what is wrong, through one Lance
session per process.

Lance builds an object store for every dataset it opens without a session: on S3 that is a new
HTTP client each time, about 11 ms of CPU a table (its TLS and credential set-up), and every
manifest is read again. One :class:`lance.Session` for the process keeps the stores (by URL and
storage options: another endpoint or key is another store) and a bounded cache of immutable
metadata (manifests and file footers, by path): an open of a table seen before is then one
listing of its versions, under a millisecond of CPU. Which version is the newest is never
cached: each open lists the table's versions, so a concurrent writer's commit is seen.

A manifest too big for that cache (a local table of more than about 50,000 fragments) would be
read and decoded by every statement: the worker holds its latest such table open instead
(:class:`_HeldTable`), and hands each caller a copy while it is still the newest version.
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import OrderedDict
from typing import Mapping
from urllib.parse import urlsplit

import lance
from lance.file import LanceFileSession

from ..errors import CompactionError
from .failures import MISSING, classify
from .catalog_service import client as catalog_client, lance_options, resolved_options, service_of
from .locations import reinterpreted


# The session's caches: bounded, because the engine lives as long as the driver (Lance's own
# defaults, meant for one dataset's lifetime, are gigabytes). Every commit adds a manifest (and
# a rewrite new file footers) that no later open reads once its version is superseded, so a
# long-lived engine fills the metadata cache to its bound (about 29 KiB a maintained table a
# round, measured: 256 MiB, the earlier bound, after some 9,000 table-rounds); 64 MiB still
# holds the newest manifests of thousands of small tables. The operator sets other bounds with
# the driver's static settings below (read at engine start, :func:`configure`).
METADATA_CACHE_BYTES = 64 << 20
INDEX_CACHE_BYTES = 64 << 20
HELD_TABLE_BYTES = 256 << 20  # the most a held table's manifest takes decoded (estimated; below)
METADATA_CACHE_SETTING = "spark.lance.compact.engine.metadataCacheBytes"
INDEX_CACHE_SETTING = "spark.lance.compact.engine.indexCacheBytes"
HELD_TABLE_SETTING = "spark.lance.compact.engine.heldTableBytes"
_cache_bytes = {"metadata": METADATA_CACHE_BYTES, "index": INDEX_CACHE_BYTES, "held": HELD_TABLE_BYTES}
_session: lance.Session | None = None
_session_lock = threading.Lock()


def configure(conf: Mapping[str, str]) -> None:
    """The session's cache bounds from the driver's static settings (engine start, before the
    session is made; executors keep the defaults)."""
    from .driver_conf import size_bytes

    bad = []
    for kind, key in (("metadata", METADATA_CACHE_SETTING), ("index", INDEX_CACHE_SETTING),
                      ("held", HELD_TABLE_SETTING)):
        if conf.get(key) is not None:
            try:  # each on its own: one typo does not discard the others
                _cache_bytes[kind] = size_bytes(key, conf[key])
            except ValueError as e:
                bad.append(str(e))
    if bad:
        raise ValueError("; ".join(bad))


def lance_session() -> lance.Session:
    """The process's Lance session (made on first use)."""
    global _session
    if _session is None:
        with _session_lock:
            if _session is None:
                _session = lance.Session(index_cache_size_bytes=_cache_bytes["index"],
                                         metadata_cache_size_bytes=_cache_bytes["metadata"])
    return _session


def cache_bounds() -> int:
    """The session caches' bounds together with the held table's (below), bytes."""
    return _cache_bytes["metadata"] + _cache_bytes["index"] + _cache_bytes["held"]


def session_figures() -> str:
    """What the session's caches and the held table hold against their bounds, for the
    engine's log (the memory keeper's line, once a minute after statements)."""
    held = _session.size_bytes() if _session is not None else 0
    return (f"Lance session caches {held >> 20} MiB (bounds: metadata {_cache_bytes['metadata'] >> 20} MiB, "
            f"index {_cache_bytes['index'] >> 20} MiB); {HELD.figures()}")


def options_digest(storage_options: Mapping[str, str] | None) -> str:
    """A digest of storage options, to key what is kept per store or table without keeping
    the options (keys among them) in the key."""
    return hashlib.sha256(repr(sorted((storage_options or {}).items())).encode()).hexdigest()[:32]


def _plain(location: str) -> str:
    """A location as compared with another: a ``file:`` URI as its path (the JVM catalog hands
    local locations on as plain paths), no trailing '/'."""
    for scheme in ("file://", "file:"):
        if location.startswith(scheme):
            location = location[len(scheme):]
            break
    return location.rstrip("/") or "/"


def dataset(uri: str, storage_options: Mapping[str, str] | None = None,
            version: int | None = None) -> lance.LanceDataset:
    """``lance.dataset`` through the process's session; a location Lance would read as another
    one than its text says (``%2e%2e``, ``S3://``, ...: runtime/locations.py) is refused."""
    why = reinterpreted(uri)
    if why is not None:
        raise CompactionError(f"location '{uri}' is refused: it holds {why}")
    service = service_of(storage_options)
    if service is not None and service.table_id is not None:
        # Through the catalog service: its storage options overlay ours and Lance refreshes
        # them before they expire (runtime/catalog_service.py).
        ds = lance.dataset(namespace_client=catalog_client(service), table_id=list(service.table_id),
                           version=version, storage_options=lance_options(storage_options) or None,
                           session=lance_session())
        if _plain(ds.uri) != _plain(uri):
            raise CompactionError(f"{service.shown} now gives table {'.'.join(service.table_id)} the location "
                                  f"'{ds.uri}', not '{uri}' as when the statement resolved it; run it again")
        return ds
    key = HELD.key(uri, storage_options) if version is None and _cache_bytes["held"] else None
    if key is not None:
        held = HELD.get(key)
        if held is not None:
            return held
    before = _folder_identity(key.rsplit("#", 1)[0]) if key is not None else None
    ds = lance.dataset(uri, version=version, storage_options=lance_options(storage_options) or None,
                       session=lance_session())
    HELD.offer(key, before, ds)
    return ds


# A table of many fragments has a manifest the session's metadata cache cannot keep (100,000
# fragments: 8.6 MB on disk, 67 MiB decoded; 0.1-0.18 s to read and decode on each open), so
# every statement on it paid the open again. The worker keeps its latest big table open
# instead (one, its manifest within ``heldTableBytes``; the pool sends a table's statements to
# the worker that last read it), and hands it out again while it is still the table's newest
# version. Only on local disk, where the manifest's file says cheaply whether it is still the
# same (a table dropped and made again at the same path has another file under the same
# version number).
_HELD_FROM_FILE_BYTES = 1 << 20  # and never below this
_DECODED_PER_FILE_BYTE = 8  # decoded size over file size (measured: 8.6 MB -> 67 MiB)


def held_from_file_bytes() -> int:
    """The smallest manifest file held: one that decoded would take over half the session's
    metadata cache (the default 64 MiB: a 4 MiB file, about 50,000 fragments); the cache keeps
    smaller ones itself (a 15,000-fragment table reopens through it in 0.3 ms)."""
    return max(_HELD_FROM_FILE_BYTES, _cache_bytes["metadata"] // (2 * _DECODED_PER_FILE_BYTE))


def _manifest_identity(root: str, version: int) -> tuple[int, ...] | None:
    """(size, inode, device, modification and change ns) of ``version``'s manifest file under
    a local table ``root``, in either of Lance's namings; None when neither is there. A file
    written again (or copied in, its modification time kept) has another change time."""
    for name in (f"{(1 << 64) - 1 - version:020d}.manifest", f"{version}.manifest"):
        try:
            st = os.stat(os.path.join(root, "_versions", name))
        except OSError:
            continue
        return st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns
    return None


def _folder_identity(root: str) -> tuple[int, ...] | None:
    """The table folder's and its ``_versions`` folder's identity: another table moved to the
    path, a table made again there, or a commit changes it."""
    try:
        top, versions = os.stat(root), os.stat(os.path.join(root, "_versions"))
    except OSError:
        return None
    return top.st_ino, top.st_dev, versions.st_ino, versions.st_mtime_ns, versions.st_ctime_ns


def _local_root(uri: str) -> str | None:
    """A local table's folder as Lance opens it (``file:///p``, ``file://localhost/p``,
    ``file:/p`` or a path); None for a table on an object store or one whose location has
    escapes (never held: its folder is not said here as Lance reads it)."""
    if uri.startswith("file:"):
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost") or "%" in parts.path or not parts.path:
            return None
        return parts.path.rstrip("/") or "/"
    return None if "://" in uri else uri.rstrip("/") or "/"


class _HeldTable:
    """The worker's latest big table, open (see above); one at a time, under a lock. A table
    held and not handed out for :data:`HELD_IDLE_S` is let go (a dropped table's memory is not
    kept for long: its drop runs in the JVM, which does not tell the worker)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (key, dataset, its manifest's identity, when last handed out or held)
        self._slot: tuple[str, lance.LanceDataset, tuple[int, ...], float] | None = None
        self._watch: threading.Thread | None = None

    @staticmethod
    def key(uri: str, storage_options: Mapping[str, str] | None) -> str | None:
        """The slot's key for ``uri`` (its local folder and the storage options); None: never held."""
        root = _local_root(uri)
        return None if root is None else root + "#" + options_digest(storage_options)

    def get(self, key: str | None) -> lance.LanceDataset | None:
        """A copy of the held table when ``key`` (:meth:`key`) is its and its version is still
        the newest, the same file."""
        with self._lock:
            slot = self._slot
            if key is None or slot is None or slot[0] != key:
                return None
            _, ds, identity, _ = slot
            try:
                fresh = ds.latest_version == ds.version and _manifest_identity(key.rsplit("#", 1)[0], ds.version) == identity
            except Exception:  # gone, unreadable: a new open says what it is
                fresh = False
            self._slot = (key, ds, identity, time.monotonic()) if fresh else None
        # A copy of its own for each caller (2.7 us: the manifest is shared): a commit moves the
        # dataset object it is made through to the new version in place (Compaction.commit,
        # update_config, ...), which must not move another caller's or the held one.
        return ds.checkout_version(ds.version) if fresh else None

    def offer(self, key: str | None, before: tuple[int, ...] | None, ds: lance.LanceDataset) -> None:
        """Hold ``ds``, just opened at its newest version, when its manifest is big and within
        the bound and the table's folders are as they were before the open (``before``,
        :func:`_folder_identity`): had another table been moved to the path while Lance read
        the manifest, the file checked now would not be the one read. It replaces the table
        held before."""
        if key is None or before is None:
            return
        root = key.rsplit("#", 1)[0]
        identity = _manifest_identity(root, ds.version)
        if identity is None or not held_from_file_bytes() <= identity[0] <= _cache_bytes["held"] // _DECODED_PER_FILE_BYTE:
            return
        if _folder_identity(root) != before:
            return
        held = ds.checkout_version(ds.version)  # not the caller's object (see get)
        with self._lock:
            self._slot = (key, held, identity, time.monotonic())
            if self._watch is None:  # lets an idle table go even when no statement comes
                self._watch = threading.Thread(target=self._expiring, daemon=True, name="held-table")
                self._watch.start()

    def _expiring(self) -> None:
        while True:
            time.sleep(60)
            self.expire(HELD_IDLE_S)

    def expire(self, idle_s: float) -> None:
        """Let go of the held table when it was not handed out for ``idle_s`` seconds."""
        with self._lock:
            if self._slot is not None and time.monotonic() - self._slot[3] > idle_s:
                self._slot = None

    def figures(self) -> str:
        with self._lock:
            slot = self._slot
        if slot is None:
            return "no table held"
        return (f"a table held: its manifest file {slot[2][0] / 2**20:.1f} MiB, about "
                f"{slot[2][0] * _DECODED_PER_FILE_BYTE >> 20} MiB decoded (heldTableBytes {_cache_bytes['held'] >> 20} MiB)")

    def clear(self) -> None:
        with self._lock:
            self._slot = None


HELD_IDLE_S = 15 * 60
HELD = _HeldTable()


class _FileSessions:
    """``LanceFileSession``s kept by store root (``s3://bucket``) and storage options, for
    listings: like a dataset's store, a file session is an HTTP client of its own on an
    object store. A local path gets a new one each time (it costs nothing there)."""

    def __init__(self, most: int = 64) -> None:
        self._lock = threading.Lock()
        self._most = most
        self._by_root: OrderedDict[str, LanceFileSession] = OrderedDict()

    def folder(self, uri: str, storage_options: Mapping[str, str] | None) -> tuple[LanceFileSession, str]:
        """A session and the path of ``uri`` relative to it."""
        uri = uri.rstrip("/")
        options = resolved_options(storage_options) or None
        parts = urlsplit(uri)
        if len(parts.scheme) <= 1 or parts.scheme == "file" or not parts.netloc:  # local (or C:\)
            return LanceFileSession(uri, options), ""
        root = f"{parts.scheme}://{parts.netloc}"
        key = root + "#" + options_digest(options)
        with self._lock:
            session = self._by_root.get(key)
            if session is None:
                session = self._by_root[key] = LanceFileSession(root, options)
                while len(self._by_root) > self._most:
                    self._by_root.popitem(last=False)
            self._by_root.move_to_end(key)
        return session, parts.path.strip("/")


FILE_SESSIONS = _FileSessions()


def list_folder(uri: str, storage_options: Mapping[str, str] | None, folder: str) -> list[str]:
    """The names of the objects directly in ``uri``'s ``folder`` (not its sub-folders)."""
    session, base = FILE_SESSIONS.folder(uri, storage_options)
    listing = session.list_with_delimiter(f"{base}/{folder}" if base else folder)
    return [name.rsplit("/", 1)[-1] for name in listing.objects]


def open_dataset(table: str, uri: str, storage_options: dict[str, str] | None = None,
                 version: int | None = None) -> lance.LanceDataset:
    """Open ``uri`` (optionally at ``version``). A failure says what it is: the table does
    not exist (or is not a Lance dataset), the version does not, the object store failed, or
    a file is corrupt (``failures.py``)."""
    if version is not None and not 1 <= version < 2 ** 64:
        raise CompactionError(f"table {table}: version {version} does not exist: Lance numbers a table's "
                              "versions from 1 (its versions metadata table lists them)")
    try:
        return dataset(uri, storage_options, version)
    except CompactionError as e:
        raise CompactionError(f"table {table}: {e.message}") from None
    except Exception as e:  # Lance raises ValueError, OSError or pyarrow errors
        failure = classify(e)
        if version is not None and failure.kind == MISSING:
            try:
                latest = dataset(uri, storage_options).version
            except Exception:
                latest = None
            if latest is not None:
                why = ("; older versions may have been cleaned up" if version < latest else "")
                raise CompactionError(
                    f"table {table}: version {version} does not exist (the table is at version "
                    f"{latest}{why})") from None
        if failure.kind == MISSING:
            # Say only what is known: Lance's own words, and for a local folder what is there.
            local = uri[len("file://"):] if uri.startswith("file://") else uri
            if "://" not in local and os.path.isdir(local):
                if not os.path.isdir(os.path.join(local, "_versions")):
                    raise CompactionError(f"table {table}: {uri} is not a Lance dataset (the folder "
                                          "exists but has no _versions folder)") from None
                # no version Lance can find in it (an empty _versions, say): no table there
                raise CompactionError(f"table {table}: Lance cannot open {uri} although it has a "
                                      f"_versions folder; Lance reported: {failure.detail}", MISSING) from None
            raise CompactionError(f"table {table}: {uri} does not exist (no Lance dataset "
                                  "there)") from None
        raise CompactionError(f"table {table}: cannot open {uri}: {failure.phrase} "
                              f"({failure.detail})") from None
