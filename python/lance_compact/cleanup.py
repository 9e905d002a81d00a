"""``CALL lance.cleanup``: old versions and orphaned files, removed by Lance's own cleanup
(``cleanup_old_versions``), with a dry run (``explain_cleanup_old_versions``).

Lance's cleanup leaves deletion files that no version ever referenced. Carrying concurrent
deletions over (``rebase.py``) writes such files before its commit; if the driver dies in
between they stay behind. With ``delete_unverified`` (which tells Lance too that nothing is
in progress), deletion files no remaining version references are removed as well.
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

from lance.file import LanceFileSession

from .errors import CompactionError
from .options import procedure_args, result_columns
from .tables import open_dataset

_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}


def parse_older_than(text: str, table: str) -> timedelta:
    """'7 days', '12 hours', '30 minutes', '90 seconds', '2 weeks', or an ISO timestamp."""
    m = re.fullmatch(r"\s*(\d+)\s*(second|minute|hour|day|week)s?\s*", text.lower())
    if m:
        return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)])
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CompactionError(
            f"table {table}: older_than expects '<n> days|hours|minutes|seconds|weeks' or an ISO "
            f"timestamp, got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(timedelta(0), datetime.now(timezone.utc) - when)


def unreferenced_deletion_files(ds, uri: str, storage_options: dict | None) -> list[str]:
    """Paths (relative to the table) of deletion files no version of the table references."""
    session = LanceFileSession(uri.rstrip("/"), storage_options or None)
    names = [n if n.startswith("_deletions") else f"_deletions/{n}" for n in session.list("_deletions")]
    if not names:
        return []
    used = set()
    for v in ds.versions():
        for f in ds.checkout_version(v["version"]).get_fragments():
            d = f.metadata.deletion_file
            if d is not None:
                used.add((f.fragment_id, d.read_version, d.id))
    orphans = []
    for name in names:
        parts = name.rsplit("/", 1)[-1].split(".")[0].split("-")
        if len(parts) == 3 and all(p.isdigit() for p in parts) and tuple(map(int, parts)) not in used:
            orphans.append(name)
    return orphans


def cleanup_row(request_json: str) -> tuple:
    """Run (or explain) Lance's cleanup; one row in parameters.json's ``cleanup_columns``."""
    raw = json.loads(request_json)
    table, uri = raw.get("table") or raw["uri"], raw["uri"]
    args = procedure_args("cleanup", "cleanup_parameters", raw.get("params"), table)
    if raw.get("options"):
        raise CompactionError(f"table {table}: cleanup takes no options map")
    dry_run = args.pop("dry_run", False)
    kwargs = {"delete_unverified": args.get("delete_unverified", False)}
    if "older_than" in args:
        kwargs["older_than"] = parse_older_than(args["older_than"], table)
    if "retain_versions" in args:
        kwargs["retain_versions"] = args["retain_versions"]
    ds = open_dataset(table, uri, raw.get("storage_options"))
    stats = (ds.explain_cleanup_old_versions(**kwargs).stats if dry_run
             else ds.cleanup_old_versions(**kwargs))
    orphans = []
    if kwargs["delete_unverified"]:
        ds = open_dataset(table, uri, raw.get("storage_options"))
        orphans = unreferenced_deletion_files(ds, uri, raw.get("storage_options"))
        if not dry_run:
            session = LanceFileSession(uri.rstrip("/"), raw.get("storage_options") or None)
            for name in orphans:
                session.delete_file(name)
    row = {"table": table, "version": ds.version, "dry_run": dry_run,
           "old_versions": stats.old_versions, "data_files_removed": stats.data_files_removed,
           "deletion_files_removed": stats.deletion_files_removed + len(orphans),
           "index_files_removed": stats.index_files_removed,
           "transaction_files_removed": stats.transaction_files_removed,
           "bytes_removed": stats.bytes_removed}
    return tuple(row[name] for name, _ in result_columns("cleanup_columns"))
