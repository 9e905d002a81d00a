"""The last compaction of a table, read from Lance's own transactions: no record of ours,
no extra commit. Any compaction counts (a Rewrite transaction: this product's, pylance's
``compact_files``, lance-spark's ``OPTIMIZE``).

Tables as maintenance leaves them are read here too: cleanup removes old versions (their
manifests and transactions), so a search back through history ends at the oldest version
left, never with an error; and pylance 14.0.2 cannot decode a Rewrite that remapped indices
(:func:`undecodable_rewrite`), so such a version counts as a compaction whose counts are known
only from the manifests around it."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import lance

from .transactions import operation_kind


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


def _newest_rewrite(dataset: lance.LanceDataset) -> int | None:
    """The newest version committed by a Rewrite, newest first. Each version's kind is read
    from its manifest and transaction files' first bytes (transactions.py: cheaper than
    opening the version). Where that says nothing, a version whose live rows differ from the
    version's before cannot be a compaction (it keeps every live row) and its transaction is
    not read: reading one costs a Python object per fragment it names (2 s for an Append of
    100,000 fragments). Versions removed by cleanup end the search."""
    for v in range(dataset.version, 0, -1):
        kind = operation_kind(dataset, v)
        if kind is not None:
            if kind == "Rewrite":
                return v
            continue
        if v > 1:
            after, before = _live_rows(dataset, v), _live_rows(dataset, v - 1)
            if after is not None and before is not None and after != before:
                continue
        rewrite = _is_rewrite(dataset, v)
        if rewrite is None:
            return None
        if rewrite:
            return v
    return None


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
