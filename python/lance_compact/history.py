"""The last compaction of a table, read from Lance's own transactions: no record of ours,
no extra commit. Any compaction counts (a Rewrite transaction: this product's, pylance's
``compact_files``, lance-spark's ``OPTIMIZE``)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timezone
from typing import Any

import lance


@dataclass(frozen=True)
class LastCompaction:
    version: int            # the version the compaction committed
    fragments_removed: int | None  # None: the version before was cleaned up and the
    fragments_added: int | None    # Rewrite's transaction cannot be decoded


def undecodable_rewrite(error: TypeError) -> bool:
    """Whether reading a transaction failed on pylance 14.0.2's known gap: it cannot decode a
    Rewrite that remapped indices (its RewrittenIndex binding takes more arguments than it
    passes). Only a Rewrite carries those, so such a transaction is a Rewrite."""
    return "RewrittenIndex" in str(error)


def _is_rewrite(dataset: lance.LanceDataset, version: int) -> bool | None:
    """Whether ``version`` was committed by a Rewrite; None when its transaction is gone."""
    try:
        t = dataset.checkout_version(version).get_transactions(1)[0]
    except TypeError as e:
        if undecodable_rewrite(e):
            return True
        raise
    return None if t is None else type(t.operation).__name__ == "Rewrite"


def _newest_rewrite(dataset: lance.LanceDataset) -> int | None:
    """The newest version committed by a Rewrite. Transactions are read newest first in
    growing windows, so a recently compacted table costs a few reads whatever its age;
    versions removed by cleanup end the search."""
    window = 16
    while True:
        window = min(window, dataset.version)
        try:
            kinds: list[Any] = [None if t is None else type(t.operation).__name__ == "Rewrite"
                                for t in dataset.get_transactions(window)]
        except TypeError:  # a Rewrite the binding cannot decode: one version at a time
            kinds = [_is_rewrite(dataset, dataset.version - i) for i in range(window)]
        for i, rewrite in enumerate(kinds):
            if rewrite is None:
                return None
            if rewrite:
                return dataset.version - i
        if window >= dataset.version:
            return None
        window *= 8


def last_compaction(dataset: lance.LanceDataset) -> LastCompaction | None:
    """The table's newest compaction up to ``dataset.version``, or None."""
    version = _newest_rewrite(dataset)
    if version is None or version < 2:
        return None
    # A Rewrite only replaces fragments: the ids it removed and added, from the manifests.
    try:
        before = {f.fragment_id for f in dataset.checkout_version(version - 1).get_fragments()}
    except (OSError, ValueError):
        # The version before was cleaned up: the counts from the Rewrite's own groups, if
        # its transaction can be decoded (None when not: an unknown count is not made up).
        try:
            groups = dataset.checkout_version(version).get_transactions(1)[0].operation.groups
            return LastCompaction(version, sum(len(g.old_fragments) for g in groups),
                                  sum(len(g.new_fragments) for g in groups))
        except Exception:
            return LastCompaction(version, None, None)
    after = {f.fragment_id for f in dataset.checkout_version(version).get_fragments()}
    return LastCompaction(version, len(before - after), len(after - before))


def committed_at(dataset: lance.LanceDataset, version: int) -> str | None:
    """When ``version`` was committed, ISO 8601 in UTC."""
    # get_version() reads the checked-out manifest only; versions() would read them all.
    when = dataset.checkout_version(version).get_version()["timestamp"]
    return when.astimezone(timezone.utc).isoformat(timespec="seconds")
