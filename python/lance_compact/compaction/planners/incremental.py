"""``incremental``: only fragments added or changed since a version.

The version is the ``since_version`` setting, by default the version committed by the
table's last compaction (Lance's last Rewrite transaction, see ``history.py``).
"""
from __future__ import annotations

from typing import Any

import lance

from ..fragments import fragment_signature
from ...errors import CompactionError
from ..history import last_compaction
from .base import Planner


class IncrementalPlanner(Planner):
    """Lance's plan over fragments that are new or changed since ``since_version``."""

    name = "incremental"

    def since(self, dataset: lance.LanceDataset) -> int | None:
        if self.settings.get("since_version") is not None:
            return self.settings["since_version"]
        last = last_compaction(dataset)
        return None if last is None else last.version

    def filter_fragments(self, dataset: lance.LanceDataset,
                         fragments: list[lance.LanceFragment],
                         options: dict[str, Any]) -> list[lance.LanceFragment]:
        since = self.since(dataset)
        if since is None:  # never compacted: everything is new
            return fragments
        if since > dataset.version:
            raise CompactionError(
                f"since_version {since} is newer than the table's version {dataset.version}")
        try:
            old = dataset.checkout_version(since)
        except (ValueError, OSError) as e:
            raise CompactionError(
                f"since_version {since} no longer exists (cleaned up?): {str(e).split(',')[0]}") from None
        before = {f.fragment_id: fragment_signature(f.metadata) for f in old.get_fragments()}
        return [f for f in fragments if before.get(f.fragment_id) != fragment_signature(f.metadata)]
