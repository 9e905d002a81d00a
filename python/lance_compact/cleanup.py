"""``CALL lance.cleanup``: old versions and orphaned files, removed by Lance's own cleanup
(``cleanup_old_versions``), with a dry run (``explain_cleanup_old_versions``)."""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

from .errors import CompactionError
from .options import _convert, cleanup_specs, result_columns
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


def cleanup_row(request_json: str) -> tuple:
    """Run (or explain) Lance's cleanup; one row in parameters.json's ``cleanup_columns``."""
    raw = json.loads(request_json)
    table, uri = raw.get("table") or raw["uri"], raw["uri"]
    specs = cleanup_specs()
    args = {}
    for key, value in (raw.get("params") or {}).items():
        if key not in specs:
            raise CompactionError(
                f"table {table}: unknown cleanup parameter {key!r}; valid ones are: "
                + ", ".join(sorted(specs)))
        if value is not None:
            args[key] = _convert(specs[key], value, table)
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
    row = {"table": table, "version": ds.version, "dry_run": dry_run,
           "old_versions": stats.old_versions, "data_files_removed": stats.data_files_removed,
           "deletion_files_removed": stats.deletion_files_removed,
           "index_files_removed": stats.index_files_removed,
           "transaction_files_removed": stats.transaction_files_removed,
           "bytes_removed": stats.bytes_removed}
    return tuple(row[name] for name, _ in result_columns("cleanup_columns"))
