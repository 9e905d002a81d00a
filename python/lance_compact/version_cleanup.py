"""``CALL lance.cleanup``: old versions and orphaned files, removed by Lance's own cleanup
(``cleanup_old_versions``), with a dry run (``explain_cleanup_old_versions``).

Lance's cleanup leaves deletion files that no version ever referenced. Carrying concurrent
deletions over (``rebase.py``) writes such files before its commit; if the driver dies in
between they stay behind.

``delete_unverified`` removes files no remaining version references (failed or abandoned
writes), but never one younger than ``unverified_min_age`` (default one hour): a live writer
writes its data and deletion files before its commit, and a compaction carrying deletions
over writes its deletion files before its commit. pylance 14.0.2's own
``cleanup_old_versions(delete_unverified=True)`` removes every unreferenced data and deletion
file written before the latest commit, whatever its age (checked), so Lance is asked for that
only when the bound is zero. Otherwise Lance applies its own rule (unreferenced files at least
7 days old) and this module removes unreferenced data and deletion files older than the bound
(their age read from the store: local files and S3; elsewhere they wait for Lance's 7 days).
Index and transaction files of abandoned writes are left to Lance's 7-day rule.
"""
from __future__ import annotations

import os
import re
import time
from datetime import datetime, timedelta, timezone
from typing import Callable
from urllib.parse import urlparse

from lance.file import LanceFileSession

from .errors import CompactionError
from .options import result_columns
from .request import ProcedureRequest

_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}


LANCE_UNVERIFIED_AGE = timedelta(days=7)  # Lance removes unreferenced files this old anyway
DEFAULT_UNVERIFIED_MIN_AGE = "1 hour"


def parse_duration(text: str) -> timedelta | None:
    """'7 days', '12 hours', '30 minutes', '90 seconds', '2 weeks'; None if ``text`` is not one."""
    m = re.fullmatch(r"\s*(\d+)\s*(second|minute|hour|day|week)s?\s*", text.lower())
    return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)]) if m else None


def parse_older_than(text: str, table: str, name: str = "older_than") -> timedelta:
    """A duration (:func:`parse_duration`), or an ISO timestamp (the age of that moment)."""
    duration = parse_duration(text)
    if duration is not None:
        return duration
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CompactionError(
            f"table {table}: {name} expects '<n> days|hours|minutes|seconds|weeks' or an ISO "
            f"timestamp, got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(timedelta(0), datetime.now(timezone.utc) - when)


def _referenced(ds) -> tuple[set[tuple[int, int, int]], set[str]]:
    """Deletion files (fragment id, read version, id) and data file names that any remaining
    version of the table references."""
    deletions: set[tuple[int, int, int]] = set()
    data: set[str] = set()
    for v in ds.versions():
        for f in ds.checkout_version(v["version"]).get_fragments():
            d = f.metadata.deletion_file
            if d is not None:
                deletions.add((f.fragment_id, d.read_version, d.id))
            for df in f.metadata.files:
                data.add(df.path.rsplit("/", 1)[-1])
    return deletions, data


def _listed(session: LanceFileSession, folder: str) -> list[str]:
    return [n if n.startswith(folder) else f"{folder}/{n}" for n in session.list(folder)]


def unreferenced_files(ds, uri: str, storage_options: dict | None) -> list[str]:
    """Paths (relative to the table) of data and deletion files no version of the table
    references."""
    session = LanceFileSession(uri.rstrip("/"), storage_options or None)
    deletions, data = _referenced(ds)
    orphans = []
    for name in _listed(session, "_deletions"):
        parts = name.rsplit("/", 1)[-1].split(".")[0].split("-")
        if len(parts) == 3 and all(p.isdigit() for p in parts) and tuple(map(int, parts)) not in deletions:
            orphans.append(name)
    for name in _listed(session, "data"):
        base = name.rsplit("/", 1)[-1]
        if "/" not in name[len("data/"):] and base.endswith(".lance") and base not in data:
            orphans.append(name)
    return orphans


def _file_info(uri: str, storage_options: dict | None) -> Callable[[str], tuple[float, int] | None]:
    """A function giving a table file's (last-modified time in epoch seconds, size in bytes),
    None if unknown: local files and S3 (through pyarrow, with the table's S3 options)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        root = parsed.path if parsed.scheme else uri

        def local(rel: str) -> tuple[float, int] | None:
            try:
                st = os.stat(os.path.join(root, rel))
            except OSError:
                return None
            return st.st_mtime, st.st_size
        return local
    if parsed.scheme in ("s3", "s3a"):
        from pyarrow import fs

        o = {k.lower(): v for k, v in (storage_options or {}).items()}
        endpoint = o.get("aws_endpoint") or o.get("endpoint")
        kwargs = {"access_key": o.get("aws_access_key_id") or o.get("access_key_id"),
                  "secret_key": o.get("aws_secret_access_key") or o.get("secret_access_key"),
                  "session_token": o.get("aws_session_token") or o.get("session_token"),
                  "region": o.get("aws_region") or o.get("region")}
        if endpoint:
            e = urlparse(endpoint)
            kwargs.update(endpoint_override=e.netloc or e.path, scheme=e.scheme or "https")
        s3 = fs.S3FileSystem(**{k: v for k, v in kwargs.items() if v})
        prefix = f"{parsed.netloc}{parsed.path}".rstrip("/")

        def remote(rel: str) -> tuple[float, int] | None:
            try:
                info = s3.get_file_info(f"{prefix}/{rel}")
            except OSError:
                return None
            return (info.mtime.timestamp(), info.size or 0) if info.mtime is not None else None
        return remote
    return lambda rel: None  # other stores: age unknown, so never removed here


def cleanup_row(request_json: str) -> tuple:
    """Run (or explain) Lance's cleanup; one row in parameters.json's ``cleanup_columns``."""
    request = ProcedureRequest.from_json(request_json, "cleanup")
    table, uri, storage, args = request.table, request.uri, request.storage_options, request.args
    if request.raw.get("options"):
        raise CompactionError(f"table {table}: cleanup takes no options map")
    dry_run = args.pop("dry_run", False)
    unverified = args.get("delete_unverified", False)
    min_age = parse_older_than(args.get("unverified_min_age", DEFAULT_UNVERIFIED_MIN_AGE), table,
                               "unverified_min_age")
    if min_age > LANCE_UNVERIFIED_AGE:
        raise CompactionError(
            f"table {table}: unverified_min_age must be at most 7 days (Lance's own cleanup removes "
            f"files no version references once they are 7 days old), got {args['unverified_min_age']!r}")
    # Lance's delete_unverified ignores age: only when no bound is asked for.
    kwargs = {"delete_unverified": unverified and min_age == timedelta(0)}
    if "older_than" in args:
        kwargs["older_than"] = parse_older_than(args["older_than"], table)
    if "retain_versions" in args:
        kwargs["retain_versions"] = args["retain_versions"]
    ds = request.open()
    counted: set[str] = set()  # files Lance's own dry run already counts
    if dry_run:
        explained = ds.explain_cleanup_old_versions(**kwargs)
        stats = explained.stats
        counted = {c.path.rsplit("/", 1)[-1] for c in explained.candidate_files}
    else:
        stats = ds.cleanup_old_versions(**kwargs)
    data_removed = deletions_removed = bytes_removed = 0
    if unverified:
        ds = request.open()
        file_info = _file_info(uri, storage)
        cutoff = time.time() - min_age.total_seconds()
        session = LanceFileSession(uri.rstrip("/"), storage or None)
        for name in unreferenced_files(ds, uri, storage):
            info = file_info(name)
            if info is None or info[0] > cutoff or name.rsplit("/", 1)[-1] in counted:
                continue  # young (a writer may be about to commit it), of unknown age, or Lance's
            if not dry_run:
                session.delete_file(name)
            bytes_removed += info[1]
            if name.startswith("data/"):
                data_removed += 1
            else:
                deletions_removed += 1
    row = {"table": table, "version": ds.version, "dry_run": dry_run,
           "old_versions": stats.old_versions,
           "data_files_removed": stats.data_files_removed + data_removed,
           "deletion_files_removed": stats.deletion_files_removed + deletions_removed,
           "index_files_removed": stats.index_files_removed,
           "transaction_files_removed": stats.transaction_files_removed,
           "bytes_removed": stats.bytes_removed + bytes_removed}
    return tuple(row[name] for name, _ in result_columns("cleanup_columns"))
