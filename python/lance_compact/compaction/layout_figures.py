"""A table's layout before and after a compaction, said to the Lance tab (the Table page's
histograms, ``LanceEngineFigures``): fragments by live rows in power-of-two bins (the bins the
layout picture and the Table page draw), from the fragments the run already holds in memory (the
plan's table, the table as its commit returned it): no listing, no extra read of storage. A
view only: nothing is said outside a statement, and a failure here never fails the run."""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..runtime import progress
from .fragment_facts import FragmentFacts

log = logging.getLogger(__name__)


def bins(live: np.ndarray) -> list[list[int]]:
    """``[[bin, fragments], ...]``: bin 0 holds fragments of no live row, bin k those of
    2^(k-1) to 2^k - 1 rows (k = the count's bit length)."""
    keys = np.where(live <= 0, 0, np.floor(np.log2(np.maximum(live, 1))).astype(np.int64) + 1)
    values, counts = np.unique(keys, return_counts=True)
    return [[int(k), int(c)] for k, c in zip(values, counts)]


def said(table: str, catalog: str | None, dataset: Any, moment: str) -> None:
    """Say ``dataset``'s layout (``moment``: "before compaction", "after compaction")."""
    try:
        facts = FragmentFacts.of(dataset)
        row = {"version": dataset.version, "fragments": len(facts), "rows": facts.rows,
               "deleted_rows": facts.deleted_rows, "bins": bins(facts.live), "moment": moment}
        progress.figures({"kind": "layout", "catalog": catalog or "", "table": table, "row": row})
    except Exception as e:  # a view only
        log.debug("table %s: layout %s not said: %s", table, moment, e)
