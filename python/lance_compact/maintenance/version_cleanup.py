"""``CALL lance.cleanup``: old versions and orphaned files, removed by Lance's own cleanup
(``cleanup_old_versions``), with a dry run (``explain_cleanup_old_versions``).

Lance's cleanup leaves deletion files that no version ever referenced. Carrying concurrent
deletions over (``rebase.py``) writes such files before its commit; if the driver dies in
between they stay behind.

A writer in flight looks exactly like an abandoned one: its data and deletion files exist
(for as long as its job runs, hours for a long Spark job) before the commit that references
them. So an unreferenced data or deletion file younger than the FLOOR is never removed. The
floor is the operator's (driver setting ``spark.lance.compact.cleanup.unverifiedMinAge``,
read once when the engine starts, :mod:`driver_conf`); by default Lance's own 7 days, the age
after which Lance's cleanup removes unreferenced files anyway. A SQL user's
``unverified_min_age`` may raise the bound up to 7 days, never lower it below the floor.

``delete_unverified`` removes files no remaining version references that are older than
``unverified_min_age`` (default: the floor). pylance 14.0.2's own
``cleanup_old_versions(delete_unverified=True)`` removes every unreferenced data and deletion
file written before the latest commit, whatever its age (checked), so Lance is asked for that
only when the bound is zero, which needs the operator's floor to be zero. Otherwise Lance
applies its own rule (unreferenced files at least 7 days old; without ``delete_unverified`` it
removes no younger one, checked) and this module removes unreferenced data and deletion files
older than the bound, their age and size from Lance's own listing of the table
(``LanceDataset.all_files``: path, size, last-modified, one listing through the table's own
object store and storage options, on every store Lance supports). No other object-store
client is used: every request goes with exactly the table's storage options, so a user's own
catalog without keys sends them unsigned, never with the environment's credentials. The same
holds for index segments no version references (an index build whose driver died before its
commit leaves them), removed whole once the segment's newest file is older than the bound.
Transaction files of abandoned writes are left to Lance's 7-day rule.

Durations and moments (``older_than``, ``unverified_min_age``) are read by the one parser,
:mod:`runtime.durations` (INTERVALs, TIMESTAMPs, '7 days', '7d'; at most 100 years). No
cleanup removes a version younger than the operator's version floor
(``spark.lance.compact.cleanup.versionMinAge``, :mod:`retention`): ``older_than`` below it is
refused, and without one the shared default applies ('7 days', as maintain's), so Lance's
``retain_versions`` alone never removes a young version. A dry run lists the files it would
remove (Lance's own candidates, and those of ``delete_unverified``), the first
:data:`FILES_LISTED`.
"""
from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from contextlib import ExitStack
from typing import Any, Callable, Mapping, NamedTuple

from lance.file import LanceFileSession

from ..runtime import commit_gate, cost_records, driver_conf, durations
from .retention import check_older_than, default_older_than
from .version_ages import listed_versions
from ..errors import CompactionError
from ..runtime.catalog_service import resolved_options
from ..runtime.envelope import Target

LANCE_UNVERIFIED_AGE = timedelta(days=7)  # Lance removes unreferenced files this old anyway
MAX_DURATION = durations.MAX_DURATION
FILES_LISTED = 1000  # a dry run's file list, at most (Delta's VACUUM ... DRY RUN lists 1,000)
_SYNTAX = durations.DURATION_FORMS
_shown = durations.shown


def _manifest_versions(candidates: Any) -> set[int]:
    """The versions whose manifests are among a dry run's candidate files (``_versions/<n>.manifest``:
    n the version, or u64::MAX - version in Lance's V2 naming). A list cut at FILES_LISTED files
    names only some: the dry run then counts the records of those only."""
    out = set()
    for c in candidates:
        name = c.path.rsplit("/", 1)[-1]
        if c.path.rsplit("/", 2)[-2:-1] == ["_versions"] and name.endswith(".manifest") \
                and name[:-9].isascii() and name[:-9].isdigit():
            n = int(name[:-9])
            out.add((1 << 64) - 1 - n if n >= 1 << 63 else n)
    return out


def parse_duration(text: str, what: str = "a duration") -> timedelta | None:
    """A duration (:mod:`runtime.durations`' forms); None if ``text`` is not one."""
    return durations.parse_duration(text, what)


def parse_older_than(text: str, table: str, name: str = "older_than") -> timedelta:
    """A duration, or a moment in the past as its age (:func:`durations.age`); this checks no
    floor (:func:`retention.check_older_than` does)."""
    return durations.age(text, f"table {table}: {name}")


def unverified_floor() -> tuple[timedelta, str]:
    """The operator's floor (driver setting :data:`driver_conf.CLEANUP_FLOOR`): no unreferenced
    data or deletion file younger than this is removed; (the duration, its text)."""
    text = driver_conf.cleanup_floor()
    if text is None:
        return LANCE_UNVERIFIED_AGE, "7 days"
    problem = f"the driver setting {driver_conf.CLEANUP_FLOOR}"
    try:
        floor = parse_duration(text, problem)
    except CompactionError:
        floor = None
    if floor is None or floor > LANCE_UNVERIFIED_AGE:
        raise CompactionError(
            f"{problem} expects {_SYNTAX} from '0 seconds' to '7 days', got {_shown(text)}: the operator "
            "corrects it in the driver's configuration (read when the driver starts); cleanup "
            "removes nothing until then")
    return floor, text.strip()


def _min_age(args: dict, table: str) -> timedelta:
    """``unverified_min_age`` (default: the floor), checked against the floor and 7 days; Lance's
    7 days when neither it nor ``delete_unverified`` is given (the floor is not read then)."""
    if args.get("unverified_min_age") is None and not args.get("delete_unverified"):
        return LANCE_UNVERIFIED_AGE
    floor, floor_text = unverified_floor()
    if args.get("unverified_min_age") is None:
        return floor
    given = args["unverified_min_age"]
    min_age = parse_older_than(given, table, "unverified_min_age")
    if min_age > LANCE_UNVERIFIED_AGE:
        raise CompactionError(
            f"table {table}: unverified_min_age must be at most 7 days (Lance's own cleanup removes "
            f"files no version references once they are 7 days old), got {_shown(given)}")
    if min_age < floor:
        raise CompactionError(
            f"table {table}: unverified_min_age {_shown(given)} is below the floor {floor_text!r}: a file no "
            "version references may belong to a write still in flight (its files exist before its "
            "commit), so cleanup never removes one younger than the floor. The floor is the "
            f"operator's driver setting {driver_conf.CLEANUP_FLOOR} (default '7 days', Lance's own), "
            "read when the driver starts; a SQL statement (SET included) cannot lower it")
    return min_age


class Referenced(NamedTuple):
    """What the remaining versions of a table reference: deletion files (fragment id, read
    version, id), data file names, and index segments (their UUIDs, system indices included)."""

    deletions: set[tuple[int, int, int]]
    data: set[str]
    segments: set[str]


def _referenced(ds) -> Referenced:
    """The files any remaining version of the table references: data and deletion files from
    Lance's own stream of every version's files (``tracked_files()``: Arrow columns, no Python
    object a fragment; reading each version's fragments' metadata took about 10 us a fragment
    a version), index segments from each version's index metadata (a segment is kept whole by
    its UUID, whatever files Lance lists for it)."""
    import pyarrow.compute as pc

    import pyarrow as pa

    found = Referenced(set(), set(), set())
    data, deletions = [], []
    for batch in ds.tracked_files():  # every version's files: a path once per version holding it
        kind = batch.column("type").cast(pa.string())
        paths = batch.column("path")
        data.append(pc.unique(pc.filter(paths, pc.equal(kind, "data file"))))
        deletions.append(pc.unique(pc.filter(paths, pc.equal(kind, "deletion file"))))
    for path in pc.unique(pa.chunked_array(data, pa.string())).to_pylist():
        found.data.add(path.rsplit("/", 1)[-1])
    for path in pc.unique(pa.chunked_array(deletions, pa.string())).to_pylist():
        key = _deletion_key(path.rsplit("/", 1)[-1])
        if key is not None:
            found.deletions.add(key)
    for v in ds.versions():
        version = ds.checkout_version(v["version"])
        try:
            indices = version.describe_indices()
        except Exception:  # noqa: BLE001 - an index this pylance cannot describe: keep every segment
            found.segments.add(ANY_SEGMENT)
            continue
        for index in indices:
            found.segments.update(str(s.uuid) for s in index.segments)
    return found


def _deletion_key(name: str) -> tuple[int, int, int] | None:
    """(fragment id, read version, id) of a deletion file's name (``<fragment>-<read
    version>-<id>.arrow`` or ``.bin``), or None for another name."""
    parts = name.split(".")[0].split("-")
    # isascii too: str.isdigit passes digits int() refuses (e.g. "²"), a stray name in the store
    return tuple(map(int, parts)) if len(parts) == 3 and all(p.isascii() and p.isdigit() for p in parts) \
        else None


ANY_SEGMENT = "*"  # in Referenced.segments: which segments are referenced is unknown


class StoredFile(NamedTuple):
    """A file of the table as Lance's listing gives it: path relative to the table, its
    last-modified time (epoch seconds) and size in bytes."""

    path: str
    modified: float
    size: int


def _stored(listing) -> list[StoredFile]:
    """The table's data, deletion and index files now stored, with their ages, from one listing
    by Lance (``all_files()`` of ``listing``, any version of the table: the listing is of the
    store, not of that version)."""
    import pyarrow.compute as pc

    files = listing.all_files().read_all()
    path = files.column("path")
    files = files.filter(pc.or_(pc.or_(pc.starts_with(path, "data/"), pc.starts_with(path, "_deletions/")),
                                pc.starts_with(path, "_indices/")))
    return [StoredFile(p, m.timestamp(), s or 0) for p, m, s in zip(
        files.column("path").to_pylist(), files.column("last_modified").to_pylist(),
        files.column("size_bytes").to_pylist())]


def unreferenced_files(listing, open_latest: Callable[[], object]) -> list[StoredFile]:
    """Data, deletion and index files (relative path, age, size) no version of the table
    references. An index file's age is its segment folder's (the newest file in it): a build
    in flight writes a segment's files over time, and a segment is removed whole or not at all.

    The store is listed FIRST (``listing``: the table opened at any version), then the table
    is opened (``open_latest``) and the files of its versions read. A file a commit references
    was written before that commit: if the commit landed before the table was opened, its
    files are among the referenced ones; if it lands later, its files were, when listed and
    when the table was opened, those of a write in flight, which the age floor protects. Read
    the other way round (references, then the listing), a commit landing in between would
    leave its files listed but unreferenced."""
    stored = _stored(listing)
    deletions, data, segments = _referenced(open_latest())
    orphans = []
    newest: dict[str, float] = {}  # an unreferenced segment folder -> its newest file's time
    for f in stored:
        base = f.path.rsplit("/", 1)[-1]
        if f.path.startswith("_indices/"):
            parts = f.path.split("/")
            if len(parts) >= 3 and _is_uuid(parts[1]) and ANY_SEGMENT not in segments \
                    and parts[1] not in segments:
                orphans.append(f)
                newest[parts[1]] = max(newest.get(parts[1], 0.0), f.modified)
        elif f.path.startswith("_deletions/"):
            key = _deletion_key(base)
            if key is not None and key not in deletions:
                orphans.append(f)
        elif "/" not in f.path[len("data/"):] and base.endswith(".lance") and base not in data:
            orphans.append(f)
    return [f._replace(modified=newest[f.path.split("/")[1]]) if f.path.startswith("_indices/") else f
            for f in orphans]


def _is_uuid(text: str) -> bool:
    import uuid

    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


def _relative(path: str, uri: str) -> str:
    """A path as Lance's object store names it, relative to the table at ``uri``."""
    import os
    from urllib.parse import urlparse

    root = (urlparse(uri).path if "://" in uri else os.path.abspath(uri)).strip("/")
    return path[len(root) + 1:] if root and path.startswith(root + "/") else path


def _remove_empty_folders(uri: str, segments: set[str]) -> None:
    """The emptied folders of removed segments, on a local table (an object store has none)."""
    import os
    from urllib.parse import urlparse

    if "://" in uri and not uri.startswith("file://"):
        return
    root = urlparse(uri).path if uri.startswith("file://") else uri
    for name in segments:
        try:
            os.rmdir(os.path.join(root, "_indices", name))
        except OSError:
            pass  # not empty (a file written since) or already gone


def cleanup(target: Target, args: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run (or explain) Lance's cleanup of ``target`` with ``cleanup``'s checked parameters;
    its row (parameters.json's ``cleanup_columns``) by column name."""
    table, uri, storage = target.table, target.uri, dict(target.storage_options)
    if options:
        raise CompactionError(f"table {table}: cleanup takes no options map")
    args = dict(args)
    dry_run = bool(args.pop("dry_run", False))
    unverified = args.get("delete_unverified", False)
    min_age = _min_age(args, table)  # checked even without delete_unverified: bad input is refused
    # Lance's delete_unverified ignores age: only when the bound is zero (the floor allows it).
    kwargs = {"delete_unverified": bool(unverified) and min_age == timedelta(0),
              # a tagged version is kept (a tag is its owner's "keep this"), the rest removed:
              # Lance's default refuses the whole cleanup while any old version is tagged
              "error_if_tagged_old_versions": False}
    # Always a cutoff, never below the operator's version floor (retention.py): with
    # retain_versions alone Lance would remove versions of any age.
    kwargs["older_than"] = check_older_than(
        args["older_than"] if args.get("older_than") is not None else default_older_than(), table)
    if args.get("retain_versions") is not None:
        kwargs["retain_versions"] = args["retain_versions"]
    ds = target.open()
    with ExitStack() as gated:
        landed = None
        if not dry_run:  # the gate: nothing is deleted once a cancel is recorded; a cancel after it waits
            landed = gated.enter_context(commit_gate.gate(table, "cleanup (removing old versions and files)"))
        row = _cleanup(target, ds, args, kwargs, dry_run, unverified, min_age)
        if landed is not None and row["files_total"]:
            files = row["files_total"] - row["old_versions"]
            landed(f"the removal of {row['old_versions']} old versions and {files} files")
        return row


def _cleanup(target: Target, ds: Any, args: Mapping[str, Any], kwargs: dict[str, Any], dry_run: bool,
             unverified: Any, min_age: timedelta) -> dict[str, Any]:
    """:func:`cleanup` once its parameters are checked (and, unless a dry run, the gate let it begin)."""
    table, uri, storage = target.table, target.uri, dict(target.storage_options)
    counted: set[str] = set()  # files Lance's own dry run already counts
    listed: list[str] = []  # a dry run's files: Lance's candidates, then ours (delete_unverified)
    if dry_run:
        explained = ds.explain_cleanup_old_versions(**kwargs, include_files=True, max_files=FILES_LISTED)
        stats = explained.stats
        listed = [_relative(c.path, uri) for c in explained.candidate_files]
        # data and deletion files by name (unique), index files by path (their names repeat)
        counted = {c.path.rsplit("/", 1)[-1] for c in explained.candidate_files} | set(listed)
    else:
        stats = ds.cleanup_old_versions(**kwargs)
    data_removed = deletions_removed = index_removed = bytes_removed = 0
    # Also after Lance's delete_unverified: it leaves deletion files no version ever referenced.
    if unverified and min_age < LANCE_UNVERIFIED_AGE:
        cutoff = time.time() - min_age.total_seconds()
        session = LanceFileSession(uri.rstrip("/"), resolved_options(storage) or None)
        opened = []  # the latest version, opened after the listing (see unreferenced_files)

        def open_latest():
            opened.append(target.open())
            return opened[-1]

        segments: set[str] = set()
        for f in unreferenced_files(ds, open_latest):
            index = f.path.startswith("_indices/")
            if f.modified > cutoff or (f.path if index else f.path.rsplit("/", 1)[-1]) in counted:
                continue  # young (a writer may be about to commit it), or Lance's own
            listed.append(f.path)
            if not dry_run:
                session.delete_file(f.path)
            bytes_removed += f.size
            if index:
                index_removed += 1
                segments.add(f.path.split("/")[1])
            elif f.path.startswith("data/"):
                data_removed += 1
            else:
                deletions_removed += 1
        if not dry_run:
            _remove_empty_folders(uri, segments)
        ds = opened[-1]
    records: list[str] = []
    if stats.old_versions:  # the kept costs of the versions removed go with them (a dry run: counted)
        kept = set(listed_versions(uri, storage))
        if dry_run:  # the versions Lance would remove: its candidate manifests
            kept -= _manifest_versions(explained.candidate_files)
        records = cost_records.prune(uri, storage, kept, dry_run)
        listed += records
        bytes_removed += cost_records.SIZE * len(records)
    row = {"table": table, "version": ds.version, "dry_run": dry_run,
           "old_versions": stats.old_versions,
           "data_files_removed": stats.data_files_removed + data_removed,
           "deletion_files_removed": stats.deletion_files_removed + deletions_removed,
           "index_files_removed": stats.index_files_removed + index_removed,
           "transaction_files_removed": stats.transaction_files_removed,
           "bytes_removed": stats.bytes_removed + bytes_removed}
    row["files_total"] = sum(row[k] for k in ("old_versions", "data_files_removed", "deletion_files_removed",
                                              "index_files_removed", "transaction_files_removed"))
    row["files"] = sorted(listed)[:FILES_LISTED] if dry_run else None
    return row
