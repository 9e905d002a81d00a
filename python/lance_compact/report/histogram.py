"""Fragment-size histograms of a Lance table, before and after, as text and as a picture.

    before = describe_layout(spark, "db.events")
    compact(spark, "db.events")
    h = FragmentHistogram.of(before, describe_layout(spark, "db.events"))
    h                      # a notebook shows the picture (_repr_png_ / _repr_svg_)
    print(h)               # the text form (no plotting library needed)
    h.save("layout.png")   # or .svg
    displayHTML(h.to_html())   # Databricks; or display(h.figure())

Fragments are counted in power-of-two buckets of live rows (bucket ``b`` holds fragments with
``2**b`` to ``2**(b+1) - 1`` live rows; empty fragments count in the first bucket), one panel
per layout on a shared log scale of counts, so 4 fragments after stay readable beside 600
before. The target rows per fragment is a dashed line through every panel and a tick on the
top axis; fragments with deleted rows are hatched over their bucket's bar.

The picture needs matplotlib, the optional extra ``plot`` (``pip install
'lance-spark-compact[plot]'``); it draws with matplotlib's Agg (PNG) and SVG backends only,
never a GUI or pyplot, so it is safe in the driver's engine and in threads. Without it,
pictures raise :class:`PlotUnavailable` naming the extra, and the text form still works.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from .histogram_picture import HistogramPicture, PlotUnavailable

__all__ = ["FragmentHistogram", "Layout", "PlotUnavailable"]

def _bucket(rows: int) -> int:
    return max(0, int(rows).bit_length() - 1)


@dataclass(frozen=True)
class Layout:
    """One layout: its live rows per fragment and, when known, deleted rows per fragment."""

    label: str
    rows: list[int]
    deleted: list[int] | None = None
    version: int | None = None

    @property
    def fragments(self) -> int:
        return len(self.rows)

    @property
    def total_rows(self) -> int:
        return sum(self.rows)

    @property
    def deleted_rows(self) -> int | None:
        return None if self.deleted is None else sum(self.deleted)

    @property
    def fragments_with_deletions(self) -> int | None:
        return None if self.deleted is None else sum(1 for d in self.deleted if d)

    def small(self, target: int | None) -> int | None:
        return None if not target else sum(1 for r in self.rows if r < target)


def _layout_of(layout: Any) -> dict[str, Any]:
    """rows, deleted, target, version and table from a describe_layout DataFrame, Row or
    dict, or a plain list of row counts."""
    if hasattr(layout, "collect"):
        layout = layout.collect()[0]
    if hasattr(layout, "asDict"):
        layout = layout.asDict()
    if isinstance(layout, dict):
        deleted = layout.get("fragment_deleted_rows")
        return {"rows": list(layout["fragment_rows"]),
                "deleted": None if deleted is None else list(deleted),
                "target": layout.get("target_rows_per_fragment"),
                "version": layout.get("version"), "table": layout.get("table")}
    return {"rows": list(layout), "deleted": None, "target": None, "version": None, "table": None}


class FragmentHistogram(HistogramPicture):
    """Counts of fragments by live rows, in power-of-two buckets, for one or more layouts
    (the first is "before", the last "after").

    ``series``: ``(label, rows)`` or ``(label, rows, deleted_rows)`` per layout, rows and
    deleted rows per fragment. ``target``: the target rows per fragment, marked on the axis.
    """

    COLORS = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"]
    MIN_BUCKETS = 4  # the x axis spans at least this many buckets (a decade and more)

    def __init__(self, series: Sequence[tuple], target: int | None = None,
                 title: str | None = None, versions: Sequence[int | None] | None = None) -> None:
        layouts = []
        for i, s in enumerate(series):
            label, rows = s[0], [int(r) for r in s[1]]
            deleted = None if len(s) < 3 or s[2] is None else [int(d) for d in s[2]]
            if deleted is not None and len(deleted) != len(rows):
                raise ValueError(f"{label}: {len(rows)} fragments but {len(deleted)} deleted-row counts")
            layouts.append(Layout(label, rows, deleted, versions[i] if versions else None))
        self.layouts = layouts
        self.series = [(l.label, l.rows) for l in layouts]
        self.target = int(target) if target else None
        self.title = title
        used = [_bucket(r) for l in layouts for r in l.rows]
        if self.target:
            used.append(_bucket(self.target))
        lo, hi = (min(used), max(used)) if used else (0, 0)
        while hi - lo + 1 < self.MIN_BUCKETS:
            if lo > 0 and (hi - lo) % 2:
                lo -= 1
            else:
                hi += 1
        self.buckets = list(range(lo, hi + 1))  # bucket b: rows in [2^b, 2^(b+1))

    @classmethod
    def of(cls, *layouts: Any, labels: Sequence[str] | None = None, target: int | None = None,
           title: str | None = None) -> "FragmentHistogram":
        """From describe_layout results (DataFrames, Rows or dicts) or lists of row counts."""
        parsed = [_layout_of(x) for x in layouts]
        series = []
        for i, p in enumerate(parsed):
            default = f"version {p['version']}" if p["version"] is not None else f"layout {i + 1}"
            series.append((labels[i] if labels else default, p["rows"], p["deleted"]))
        target = target or next((p["target"] for p in reversed(parsed) if p["target"]), None)
        if title is None:
            tables = {p["table"] for p in parsed if p["table"]}
            title = tables.pop() if len(tables) == 1 else None
        return cls(series, target, title, [p["version"] for p in parsed])

    # -- the figures -----------------------------------------------------------------------

    def counts(self) -> list[tuple[str, list[int]]]:
        """Per layout, fragments in each bucket of :attr:`buckets`."""
        return [(l.label, self._per_bucket(l.rows, [1] * len(l.rows))) for l in self.layouts]

    def deleted_counts(self) -> list[tuple[str, list[int] | None]]:
        """Per layout, fragments with deleted rows in each bucket (None: not known)."""
        return [(l.label, None if l.deleted is None else
                 self._per_bucket(l.rows, [1 if d else 0 for d in l.deleted])) for l in self.layouts]

    def deleted_shares(self) -> list[tuple[str, list[float | None] | None]]:
        """Per layout and bucket, the share of its fragments' rows that are deleted."""
        out = []
        for l in self.layouts:
            if l.deleted is None:
                out.append((l.label, None))
                continue
            live = self._per_bucket(l.rows, l.rows)
            dead = self._per_bucket(l.rows, l.deleted)
            out.append((l.label, [d / (d + a) if d + a else None for a, d in zip(live, dead)]))
        return out

    def _per_bucket(self, rows: list[int], weights: list[int]) -> list[int]:
        c = [0] * len(self.buckets)
        lo = self.buckets[0]
        for r, w in zip(rows, weights):
            c[_bucket(r) - lo] += w
        return c

    def _labels(self) -> list[str]:
        """Panel and column labels: ``(before)`` and ``(after)`` added to two versions."""
        labels = [l.label for l in self.layouts]
        versions = [l.version for l in self.layouts]
        if len(labels) == 2 and None not in versions and versions[0] < versions[1]:
            return [f"{labels[0]} (before)", f"{labels[1]} (after)"]
        return labels

    def heading(self) -> str:
        """The title: what is counted, the table, and the layouts compared."""
        what = "Fragments by live rows"
        parts = [self.title] if self.title else []
        if len(self.layouts) > 1:
            parts.append(" -> ".join(l.label for l in self.layouts))
        elif self.layouts:
            parts.append(self.layouts[0].label)
        return what + (": " + ", ".join(parts) if parts else "")

    def caption(self) -> str:
        """One line of figures, before -> after: fragments, rows, deleted rows, small fragments."""
        def figure(values: list[Any]) -> str:
            return " -> ".join("?" if v is None else f"{v:,}" for v in values)

        ls = self.layouts
        parts = [f"fragments {figure([l.fragments for l in ls])}",
                 f"rows {figure([l.total_rows for l in ls])}"]
        if any(l.deleted is not None for l in ls):
            parts.append(f"deleted rows {figure([l.deleted_rows for l in ls])}")
        if self.target:
            parts.append(f"small fragments (under {self.target:,} rows) "
                         f"{figure([l.small(self.target) for l in ls])}")
        return "; ".join(parts)

    # -- text ------------------------------------------------------------------------------

    BAR = 24  # characters of the longest text bar

    def text_lines(self) -> list[str]:
        """The text form, line by line (ASCII only: terminals of any encoding show it)."""
        counts = [c for _, c in self.counts()]
        dcounts = [d for _, d in self.deleted_counts()]
        shares = [s for _, s in self.deleted_shares()]
        peak = max([max(c, default=0) for c in counts] + [1])
        ranges = [(2 ** b if b else 0, 2 ** (b + 1) - 1) for b in self.buckets]
        width_lo = max(len(f"{a:,}") for a, _ in ranges)
        width_hi = max(len(f"{b:,}") for _, b in ranges)
        names = [f"{a:>{width_lo},} - {b:<{width_hi},}" for a, b in ranges]
        first = max(len("live rows"), len(names[0]))

        def cell(i: int, j: int) -> str:
            n = counts[i][j]
            if not n:
                return ""
            bar = "#" * max(1, round(self.BAR * math.log1p(n) / math.log1p(peak)))
            text = f"{bar} {n:,}"
            if dcounts[i] is not None and dcounts[i][j]:
                text += f" (d {dcounts[i][j]:,}: {shares[i][j]:.1%})"
            return text

        cells = [[cell(i, j) for j in range(len(self.buckets))] for i in range(len(self.layouts))]
        labels = self._labels()
        widths = [max([len(labels[i])] + [len(x) for x in cells[i]]) for i in range(len(self.layouts))]
        target_bucket = _bucket(self.target) - self.buckets[0] if self.target else None

        def row(head: str, values: list[str], tail: str = "") -> str:
            line = " | ".join([head.ljust(first)] + [v.ljust(w) for v, w in zip(values, widths)])
            return (line + tail).rstrip()

        lines = [self.heading() + (f" (target {self.target:,} rows per fragment)" if self.target else ""),
                 row("live rows", labels),
                 "-+-".join(["-" * first] + ["-" * w for w in widths])]
        for j, name in enumerate(names):
            tail = f"  <- target {self.target:,}" if j == target_bucket else ""
            lines.append(row(name, [cells[i][j] for i in range(len(self.layouts))], tail))
        lines.append(lines[2])
        lines.append(self.caption())
        key = "bars: fragments per bucket of live rows (log scale)"
        if any(d is not None for d in dcounts):
            key += "; (d N: x%): N of them have deleted rows, x% of the bucket's rows are deleted"
        lines.append(key)
        return lines

    def to_text(self) -> str:
        """The text form (what ``CALL lance.describe_layout(..., histogram => true)`` returns)."""
        return "\n".join(self.text_lines())

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return self.to_text()
