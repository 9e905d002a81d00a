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

import base64
import io
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Sequence

PLOT_EXTRA = "pip install 'lance-spark-compact[plot]'"

# Formats a picture can be written in (by file extension).
PICTURE_FORMATS = ("png", "svg")


class PlotUnavailable(ImportError):
    """matplotlib (the ``plot`` extra) is not installed."""


def load_matplotlib() -> tuple[Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise PlotUnavailable(
            "the layout picture needs matplotlib, which is not installed: "
            f"{PLOT_EXTRA} (the text form, FragmentHistogram.to_text() or "
            "describe_layout's histogram => true, works without it)") from e
    return Figure, FigureCanvasAgg


def _bucket(rows: int) -> int:
    return max(0, int(rows).bit_length() - 1)


def compact_number(n: float) -> str:
    """1, 999, 1k, 1.5k, 65k, 1M, 2.1M: at most 4 characters up to 999M."""
    n = float(n)
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            v = n / div
            return (f"{v:.1f}".rstrip("0").rstrip(".") if v < 10 else f"{v:.0f}") + unit
    return f"{n:.0f}" if n == int(n) else f"{n:g}"


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


class FragmentHistogram:
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

    # -- the picture -----------------------------------------------------------------------

    WIDTH = 10.0   # inches
    DPI = 100

    def figure(self) -> Any:
        """The picture as a matplotlib ``Figure`` (Agg canvas; ``display(h.figure())`` in
        Databricks). Raises :class:`PlotUnavailable` without matplotlib."""
        Figure, Canvas = load_matplotlib()
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

        n = max(1, len(self.layouts))
        fig = Figure(figsize=(self.WIDTH, 1.9 + 2.1 * n), dpi=self.DPI, layout="constrained")
        fig.get_layout_engine().set(h_pad=0.06, hspace=0.06)
        Canvas(fig)
        axes = list(fig.subplots(n, 1, sharex=True, sharey=True, squeeze=False)[:, 0])
        counts = [c for _, c in self.counts()]
        dcounts = [d for _, d in self.deleted_counts()]
        peak = max([max(c, default=0) for c in counts] + [1])
        gap = 1.04  # bars leave a gap of 4% of their bucket on each side (log scale)
        lefts = [2.0 ** b * gap for b in self.buckets]
        widths = [2.0 ** b * (2 / gap - gap) for b in self.buckets]
        centres = [2.0 ** b * math.sqrt(2) for b in self.buckets]
        labels = self._labels()
        handles = []
        for i, ax in enumerate(axes):
            ax.set_xscale("log")
            ax.set_yscale("log")
            if i >= len(self.layouts):  # no layout at all: an empty panel
                break
            layout, color = self.layouts[i], self.COLORS[i % len(self.COLORS)]
            bars = ax.bar(lefts, [c - 0.5 if c else 0.0 for c in counts[i]], width=widths,
                          bottom=0.5, align="edge", color=color, alpha=0.85, linewidth=0)
            for b, patch in zip(self.buckets, bars):
                patch.set_gid(f"bar-{i}-{b}")
            handles.append(Patch(color=color, alpha=0.85, label=labels[i]))
            if dcounts[i] is not None and any(dcounts[i]):
                for j, d in enumerate(dcounts[i]):
                    if d:
                        ax.bar(lefts[j], d - 0.5, width=widths[j], bottom=0.5, align="edge",
                               fill=False, hatch="////", edgecolor="#222222", linewidth=0,
                               gid=f"deleted-{i}-{self.buckets[j]}")
            for j, c in enumerate(counts[i]):
                if c:
                    ax.text(centres[j], c * 1.15, compact_number(c), ha="center", va="bottom",
                            fontsize=8, gid=f"count-{i}-{self.buckets[j]}", zorder=4,
                            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.6})
            ax.set_title(labels[i], loc="left", fontsize=10, fontweight="bold", color=color)
            summary = (f"{layout.fragments:,} fragment{'' if layout.fragments == 1 else 's'}, "
                       f"{layout.total_rows:,} rows")
            if layout.deleted is not None:
                summary += f", {layout.deleted_rows:,} deleted"
                if layout.fragments_with_deletions:
                    k = layout.fragments_with_deletions
                    summary += f" (in {k:,} fragment{'' if k == 1 else 's'})"
            ax.set_title(summary, loc="right", fontsize=9)
            ax.set_ylabel("fragments", fontsize=9)
            ax.grid(axis="y", which="major", alpha=0.3)
            ax.set_axisbelow(True)
            if self.target:
                ax.axvline(self.target, color="#111111", linestyle="--", linewidth=1.3,
                           gid=f"target-{i}")
        if any(d is not None and any(d) for d in dcounts):
            handles.append(Patch(facecolor="white", edgecolor="#222222", hatch="////",
                                 label="fragments with deleted rows"))
        if self.target:
            handles.append(Line2D([], [], color="#111111", linestyle="--", linewidth=1.3,
                                  label=f"target: {self.target:,} rows per fragment"))

        lo, hi = 2.0 ** self.buckets[0], 2.0 ** (self.buckets[-1] + 1)
        axes[0].set_xlim(lo, hi)
        axes[0].set_ylim(0.5, peak * 8)
        ticks = self._x_ticks(lo, hi)
        for ax in axes:
            ax.xaxis.set_major_locator(FixedLocator(ticks))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: compact_number(v)))
            ax.xaxis.set_minor_locator(FixedLocator([2.0 ** b for b in self.buckets]))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_major_locator(LogLocator(base=10))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: compact_number(v) if v >= 1 else ""))
            ax.yaxis.set_minor_locator(NullLocator())
            ax.tick_params(labelsize=9)
        for ax in axes[:-1]:
            ax.tick_params(axis="x", labelbottom=False)
        axes[-1].set_xlabel("live rows per fragment (log scale; bars: power-of-two buckets, "
                            "minor ticks at their edges)", fontsize=9)
        if self.target:
            top = axes[0].secondary_xaxis("top")
            top.set_xticks([self.target], labels=[f"target {self.target:,}"])
            top.xaxis.set_minor_locator(NullLocator())
            top.tick_params(axis="x", length=7, width=1.5, labelsize=9, pad=2)
            for t in top.get_xticklabels():
                t.set_fontweight("bold")
            top.set_gid("target-axis")

        # The title is the legend's own title: one box, laid out by the legend, above the
        # panels (constrained layout makes room for it), so the two can never overlap.
        def make_legend(ncols: int) -> Any:
            legend = fig.legend(handles=handles, loc="outside upper center", ncols=ncols,
                                frameon=False, fontsize=9, handlelength=2.2, columnspacing=1.6,
                                title=self.heading(), alignment="center",
                                title_fontproperties={"size": 13, "weight": "bold"})
            legend.set_gid("legend")
            legend.get_title().set_gid("title")
            return legend

        legend = make_legend(max(1, len(handles)))
        caption = fig.supxlabel(self.caption(), fontsize=9.5)
        caption.set_gid("caption")
        # Fit the legend and the caption to the width: fewer legend columns, smaller caption
        # and title.
        renderer = fig.canvas.get_renderer()
        room = fig.bbox.width * 0.97
        title = legend.get_title()
        wide = title.get_window_extent(renderer).width
        if wide > room:
            title.set_fontsize(max(6.0, 13 * room / wide))
        ncols = len(handles)
        while ncols > 1 and legend.get_window_extent(renderer).width > room:
            ncols -= 1
            legend.remove()
            legend = make_legend(ncols)
            legend.get_title().set_fontsize(title.get_fontsize())
        wide = caption.get_window_extent(renderer).width
        if wide > room:  # smaller, down to 7 points; then (many layouts) over several lines
            caption.set_fontsize(max(7.0, 9.5 * room / wide))
            if caption.get_window_extent(renderer).width > room:
                lines, parts = [], self.caption().split("; ")
                for part in parts:
                    caption.set_text("; ".join(lines[-1:] + [part]) if lines else part)
                    if lines and caption.get_window_extent(renderer).width <= room:
                        lines[-1] = caption.get_text()
                    else:
                        lines.append(part)
                caption.set_text(";\n".join(lines))
        return fig

    @staticmethod
    def _x_ticks(lo: float, hi: float) -> list[float]:
        """Decades on a wide axis; 1-2-5 steps on a narrow one (at least three labels)."""
        decades = math.log10(hi / lo)
        subs = (1,) if decades >= 4.5 else (1, 2, 5) if decades >= 1.1 else (1, 1.5, 2, 3, 5, 7)
        ticks = []
        for e in range(int(math.floor(math.log10(lo))), int(math.ceil(math.log10(hi))) + 1):
            for s in subs:
                v = s * 10.0 ** e
                if lo <= v <= hi:
                    ticks.append(v)
        return ticks

    def to_png(self, dpi: int | None = None) -> bytes:
        """The picture as PNG bytes (matplotlib's Agg)."""
        buf = io.BytesIO()
        self.figure().savefig(buf, format="png", dpi=dpi or self.DPI, metadata={"Software": None})
        return buf.getvalue()

    def to_svg(self) -> str:
        """The picture as SVG text, starting at ``<svg`` (embeddable in HTML); every bar
        is a ``<g class="bar" id="bar-<layout>-<bucket>">``."""
        buf = io.StringIO()
        self.figure().savefig(buf, format="svg", metadata={"Date": None})
        svg = buf.getvalue()
        svg = svg[svg.index("<svg"):]
        return re.sub(r'<g id="(bar-\d+-\d+)"', r'<g class="bar" id="\1"', svg)

    def to_html(self) -> str:
        """An ``<img>`` with the PNG inline, for ``displayHTML`` (Databricks) or any HTML page."""
        data = base64.b64encode(self.to_png()).decode()
        alt = self.caption().replace('"', "&quot;")
        return f'<img src="data:image/png;base64,{data}" alt="{alt}"/>'

    def save(self, path: str | os.PathLike) -> str:
        """Write the picture to ``path``, PNG or SVG by its extension; returns the path.
        Written to a temporary file beside it first, so a failure leaves no half picture."""
        path = os.fspath(path)
        kind = picture_format(path)
        if kind is None:
            raise ValueError(f"cannot write a picture to {path!r}: name a .png or .svg file")
        data = self.to_png() if kind == "png" else self.to_svg().encode()
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return path

    def _repr_png_(self) -> bytes | None:  # Jupyter
        try:
            return self.to_png()
        except PlotUnavailable:
            return None  # the notebook falls back to the text form (__repr__)

    def _repr_svg_(self) -> str | None:  # Jupyter
        try:
            return self.to_svg()
        except PlotUnavailable:
            return None


def picture_format(path: str) -> str | None:
    """``png`` or ``svg`` by the path's extension (any case); None for anything else."""
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    return ext if ext in PICTURE_FORMATS else None
