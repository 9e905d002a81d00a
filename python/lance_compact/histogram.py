"""A fragment-size histogram a notebook shows as a picture (SVG, no plotting library).

    before = describe_layout(spark, "db.events")
    compact(spark, "db.events")
    FragmentHistogram.of(before, describe_layout(spark, "db.events"))   # shown in Jupyter
"""
from __future__ import annotations

import math
from typing import Any, Sequence
from xml.sax.saxutils import escape


def _rows_of(layout: Any) -> tuple[list[int], int | None, Any]:
    """(rows per fragment, target, version) from a describe_layout DataFrame, Row or dict."""
    if hasattr(layout, "collect"):
        layout = layout.collect()[0]
    if hasattr(layout, "asDict"):
        layout = layout.asDict()
    if isinstance(layout, dict):
        return (list(layout["fragment_rows"]), layout.get("target_rows_per_fragment"),
                layout.get("version"))
    return list(layout), None, None


class FragmentHistogram:
    """Counts of fragments by live rows, in power-of-two buckets, for one or more layouts."""

    COLORS = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"]

    def __init__(self, series: Sequence[tuple[str, Sequence[int]]], target: int | None = None) -> None:
        self.series = [(label, list(rows)) for label, rows in series]
        self.target = target
        top = max([max(r, default=1) for _, r in self.series] + [target or 1, 1])
        self.buckets = list(range(0, int(math.log2(top)) + 2))  # bucket b: rows in [2^b, 2^(b+1))

    @classmethod
    def of(cls, *layouts: Any, labels: Sequence[str] | None = None) -> "FragmentHistogram":
        """From describe_layout results (DataFrames, Rows or dicts) or lists of row counts."""
        series, target = [], None
        for i, layout in enumerate(layouts):
            rows, t, version = _rows_of(layout)
            target = target or t
            default = f"version {version}" if version is not None else f"layout {i + 1}"
            series.append((labels[i] if labels else default, rows))
        return cls(series, target)

    def counts(self) -> list[tuple[str, list[int]]]:
        """Per series, fragments in each bucket (empty fragments count in the first)."""
        out = []
        for label, rows in self.series:
            c = [0] * len(self.buckets)
            for r in rows:
                c[min(len(c) - 1, int(math.log2(r)) if r > 0 else 0)] += 1
            out.append((label, c))
        return out

    def to_svg(self, width: int = 640, height: int = 260) -> str:
        counts = self.counts()
        left, bottom, top_pad = 40, 40, 30
        plot_w, plot_h = width - left - 10, height - bottom - top_pad
        peak = max([max(c) for _, c in counts] + [1])
        group = plot_w / len(self.buckets)
        bar = group * 0.8 / max(1, len(counts))
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                 f'font-family="sans-serif" font-size="10">',
                 f'<text x="{left}" y="14" font-size="12">Fragments by live rows'
                 + (f" (target {self.target:,})" if self.target else "") + "</text>"]
        for s, (label, c) in enumerate(counts):
            color = self.COLORS[s % len(self.COLORS)]
            parts.append(f'<rect x="{left + 150 + s * 120}" y="5" width="10" height="10" fill="{color}"/>'
                         f'<text x="{left + 164 + s * 120}" y="14">{escape(label)}</text>')
            for b, n in enumerate(c):
                h = plot_h * n / peak
                x = left + b * group + group * 0.1 + s * bar
                parts.append(f'<rect class="bar" x="{x:.1f}" y="{top_pad + plot_h - h:.1f}" '
                             f'width="{bar:.1f}" height="{h:.1f}" fill="{color}">'
                             f'<title>{escape(label)}: {n} fragments</title></rect>')
        for b in self.buckets:
            x = left + b * group + group / 2
            parts.append(f'<text x="{x:.1f}" y="{height - bottom + 14}" text-anchor="middle">'
                         f'{2 ** b:,}</text>')
        parts.append(f'<text x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle">'
                     "live rows per fragment (bucket start)</text>")
        parts.append(f'<text x="10" y="{top_pad + 8}">{peak}</text></svg>')
        return "".join(parts)

    def _repr_svg_(self) -> str:  # Jupyter shows this
        return self.to_svg()

    def save(self, path: str) -> None:
        """Write the SVG to ``path``."""
        with open(path, "w") as f:
            f.write(self.to_svg())
