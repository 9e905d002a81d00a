"""The clustering's record, kept in the table's own config (key ``lance_compact.clustering.state``):
which fragments a clustering run wrote, for which order, and each one's key range as codes;
and the measure built on it, *depth*.

Why the table's config: it is in every manifest, so it survives Lance's compaction and
cleanup (the newest version always carries it) and needs no side file; fragment metadata
takes no user fields and Lance's transaction properties are neither settable for a Rewrite
from pylance nor kept by cleanup. The record is keyed by fragment id, and Lance never reuses
an id: a fragment a later compaction, delete-rewrite or writer replaced is simply absent from
the manifest and is dropped from the record at the next run, and a fragment not in the record
counts as unclustered. A crash between the Rewrite and the record's commit therefore only
makes the new fragments count as unclustered (clustered again next run): never wrong.

Codes: every row gets an integer code from the *domain*, bounds picked once from a sample
(at most 1,023 per column) and kept in the record so codes of different runs compare. A linear
order codes the first sort column (its rank among the bounds, in the order's direction); a
z-order codes the z-value of all its columns (``keys.zvalues``), and a z-order run sorts by these very z-values, so
a fragment's range is contiguous in the order (a linear run sorts by the full keys, whose
first column's rank is monotone in that order). A fragment's range is
[lowest code, highest code] of its rows.

Depth (as Snowflake's clustering depth, on code ranges): take the clustered fragments' ranges
as half-open intervals [lo, hi + 1); over the union of the intervals, the average, weighted
by code width, of the number of intervals covering a code; plus the number of unclustered
fragments (each may hold any key, so each covers every code). 1.0 is perfectly clustered
(every key in one fragment); a table of N unclustered fragments has depth N.
"""
from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..fragment_facts import FragmentFacts
from .keys import _ranks, column_bounds, from_ipc, key_table, pick_bounds, to_ipc, zvalues
from .sort_order import SortKey, SortOrder
from .table_clustering import STATE_PREFIX

log = logging.getLogger(__name__)

STATE_KEY = STATE_PREFIX + "state"
MAX_DOMAIN_BOUNDS = 1023


def _thin(bounds: pa.Table, at_most: int) -> pa.Table:
    if bounds.num_rows <= at_most:
        return bounds
    at = np.unique(np.linspace(0, bounds.num_rows - 1, at_most).round().astype(np.int64))
    return bounds.take(pa.array(at, pa.int64()))


def make_domain(sample: pa.Table, order: SortOrder) -> tuple[bytes, ...]:
    """The domain's bounds from a sample of the key columns (IPC bytes, one per coded column)."""
    if order.zorder:
        return tuple(to_ipc(_thin(b, MAX_DOMAIN_BOUNDS)) for b in column_bounds(sample, order))
    first = (order.keys[0],)
    b = pick_bounds(sample, first, min(MAX_DOMAIN_BOUNDS + 1, max(1, sample.num_rows)))
    if b.num_rows:
        b = pa.table({"k0": pc.unique(b["k0"].combine_chunks())})
    return (to_ipc(b),)


def codes(rows: pa.Table, order: SortOrder, domain: list[pa.Table]) -> np.ndarray:
    """Each row's code under the domain (see the module's docstring)."""
    if order.zorder:
        return zvalues(rows, order, domain).astype(np.int64)
    first = order.keys[0]
    k = key_table(rows, (first,))
    return _ranks(k, domain[0], (SortKey("k0", first.descending, first.nulls_first),), ties_after=True)


def open_domain(domain: tuple[bytes, ...]) -> list[pa.Table]:
    return [from_ipc(d) for d in domain]


@dataclass(frozen=True)
class ClusteringState:
    """The record: the order it is for, the domain, and fragment id -> (lo, hi) codes."""

    order: str
    domain: tuple[bytes, ...]
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)

    def to_config(self) -> str:
        return json.dumps({"v": 1, "order": self.order,
                           "domain": [base64.b64encode(d).decode() for d in self.domain],
                           "fragments": {str(k): [int(lo), int(hi)] for k, (lo, hi) in sorted(self.ranges.items())}},
                          separators=(",", ":"))

    @staticmethod
    def from_config(config: dict[str, str] | None) -> "ClusteringState | None":
        """The record in the table's config, or None (absent, or unreadable: then every
        fragment counts as unclustered, which is safe)."""
        text = (config or {}).get(STATE_KEY)
        if not text:
            return None
        try:
            raw = json.loads(text)
            state = ClusteringState(str(raw["order"]), tuple(base64.b64decode(d, validate=True) for d in raw["domain"]),
                                    {int(k): (int(v[0]), int(v[1])) for k, v in raw["fragments"].items()})
            if not state.domain or any(lo > hi for lo, hi in state.ranges.values()):
                raise ValueError("no domain, or a range with its low end above its high end")
            open_domain(state.domain)  # readable Arrow IPC, or start over
            return state
        except Exception as e:  # written by hand or by another version: start over
            log.warning("ignoring an unreadable %s (%s)", STATE_KEY, e)
            return None

    def for_order(self, order: SortOrder) -> "ClusteringState | None":
        return self if self.order == order.text() else None


def depth(ranges: list[tuple[int, int]], unclustered: int) -> float:
    """The depth of clustered ranges plus ``unclustered`` fragments (module docstring)."""
    if not ranges:
        return float(unclustered)
    lo = np.array([r[0] for r in ranges], dtype=np.int64)
    hi = np.array([r[1] for r in ranges], dtype=np.int64) + 1
    points = np.unique(np.concatenate([lo, hi]))
    starts = np.searchsorted(np.sort(lo), points[:-1], side="right")
    ends = np.searchsorted(np.sort(hi), points[:-1], side="right")
    cover = (starts - ends).astype(np.float64)
    width = np.diff(points).astype(np.float64)
    inside = cover > 0
    return float((cover[inside] * width[inside]).sum() / width[inside].sum()) + unclustered


def components(ranges: dict[int, tuple[int, int]]) -> list[list[int]]:
    """Fragments whose ranges overlap, transitively (sweep by lowest code): each group is one
    run of overlapping intervals; a group of one is clustered already. Ranges that share only
    their end code do not overlap: a sorted run splits a key's rows over two fragments where
    the key is heavy, and rewriting them cannot change that."""
    out: list[list[int]] = []
    end = None
    for fid, (lo, hi) in sorted(ranges.items(), key=lambda kv: (kv[1][0], kv[1][1], kv[0])):
        if end is None or lo >= end:
            out.append([fid])
            end = hi
        else:
            out[-1].append(fid)
            end = max(end, hi)
    return out


@dataclass(frozen=True)
class Measure:
    """The clustering of a table now: its order, depth, and rows not clustered by it."""

    order: str | None
    depth: float | None
    clustered_fragments: int
    unclustered_fragments: int
    unclustered_rows: int
    rows: int
    clustered_ids: frozenset[int] = frozenset()  # fragments the record says are clustered

    @property
    def unclustered_share(self) -> float | None:
        if self.order is None:
            return None
        return (self.unclustered_rows / self.rows) if self.rows else 0.0


def measure(fragments: Any, config: dict[str, str] | None, order_text: str | None) -> Measure:
    """The measure of ``fragments`` (the table's facts at one version, fragment_facts.py, or
    its fragments' metadata) for the table's clustering ``order_text`` (None: no clustering,
    no measure)."""
    facts = fragments if isinstance(fragments, FragmentFacts) else FragmentFacts.of_metadata(fragments)
    live = facts.live
    rows = int(live.sum())
    if order_text is None:
        return Measure(None, None, 0, 0, 0, rows)
    state = ClusteringState.from_config(config)
    known = state.ranges if state is not None and state.order == order_text else {}
    alive = live > 0
    is_known = np.isin(facts.ids, np.fromiter(known, np.int64, len(known)))
    clustered = facts.ids[alive & is_known].tolist()
    unclustered = alive & ~is_known
    n_unclustered = int(unclustered.sum())
    d = depth([known[i] for i in clustered], n_unclustered) if alive.any() else 0.0
    return Measure(order_text, round(d, 3), len(clustered), n_unclustered,
                   int(live[unclustered].sum()), rows, frozenset(clustered))


def measure_table(dataset: Any, facts: FragmentFacts | None = None) -> Measure:
    """The measure of ``dataset`` at its version, for the table's own clustering; ``facts``:
    its fragments (fragment_facts.py) when the caller read them already."""
    from .sort_order import parse_sort_order
    from .table_clustering import table_sort_order
    config = dataset.config() or {}
    text = table_sort_order(config)
    if text is not None:
        try:
            text = parse_sort_order(text, "").text()
        except Exception:
            text = None
    return measure(facts if facts is not None else FragmentFacts.of(dataset), config, text)


def clustering_columns(dataset: Any, m: Measure | None = None) -> dict[str, Any]:
    """describe_layout's and table_health's clustering columns (parameters.json), from the
    measure ``m`` when the caller has it already."""
    m = m if m is not None else measure_table(dataset)
    return {"cluster_by": m.order, "clustering_depth": m.depth,
            "unclustered_row_share": None if m.order is None else round(m.unclustered_share, 4)}


def shown_config(config: dict[str, str]) -> dict[str, str]:
    """The config as SHOW TBLPROPERTIES shows it: the record summarized (its full text holds
    the domain's bounds, kilobytes of base64)."""
    if STATE_KEY not in config:
        return config
    state = ClusteringState.from_config(config)
    summary = (f"{len(state.ranges)} fragments clustered by {state.order} (the clustering's record; "
               "UNSET forgets it)") if state is not None else "unreadable (ignored; UNSET removes it)"
    return {**config, STATE_KEY: summary}
