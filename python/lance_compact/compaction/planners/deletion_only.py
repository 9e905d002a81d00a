"""``deletion_only``: rewrite only fragments with deleted rows; clean fragments stay as they are."""
from __future__ import annotations

from typing import Any

import lance

from .base import Planner


class DeletionOnlyPlanner(Planner):
    """Lance's plan over the fragments that have a deletion file, and no others."""

    name = "deletion_only"

    def filter_fragments(self, dataset: lance.LanceDataset,
                         fragments: list[lance.LanceFragment],
                         options: dict[str, Any]) -> list[lance.LanceFragment]:
        return [f for f in fragments
                if f.metadata.deletion_file and f.metadata.deletion_file.num_deleted_rows]
