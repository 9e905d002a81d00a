"""The record of the last compaction this product committed, kept in the table's own config
(Lance's manifest), so no side files: ``lance_compact.last_compaction`` holds JSON."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import lance

KEY = "lance_compact.last_compaction"


def last_compaction(dataset: lance.LanceDataset) -> dict[str, Any] | None:
    """{"version", "read_version", "at", "strategy", "tasks", "fragments_removed",
    "fragments_added"} of the last recorded compaction, or None."""
    text = (dataset.config() or {}).get(KEY)
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def record_compaction(dataset: lance.LanceDataset, strategy: str, read_version: int,
                      metrics: dict[str, Any]) -> None:
    """Record a committed compaction in the table's config (a small commit of its own)."""
    dataset.update_config({KEY: json.dumps({
        "version": metrics["new_version"],
        "read_version": read_version,
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "strategy": strategy,
        "tasks": metrics["tasks"],
        "fragments_removed": metrics["fragments_removed"],
        "fragments_added": metrics["fragments_added"],
    })})
