"""The picture of a :class:`~lance_compact.report.histogram.FragmentHistogram`, drawn with matplotlib:
a panel per layout, shared log axes, the target marked, the legend titled with the heading and
the caption below; as a ``Figure``, PNG, SVG, inline HTML, a file, or in a notebook.

matplotlib is the optional extra ``plot``; it draws with its Agg (PNG) and SVG backends only,
never a GUI or pyplot, so it is safe in the driver's engine and in threads. Without it,
pictures raise :class:`PlotUnavailable` naming the extra.
"""
from __future__ import annotations

import base64
import io
import math
import os
import re
from typing import Any

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


def compact_number(n: float) -> str:
    """1, 999, 1k, 1.5k, 65k, 1M, 2.1M: at most 4 characters up to 999M."""
    n = float(n)
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            v = n / div
            return (f"{v:.1f}".rstrip("0").rstrip(".") if v < 10 else f"{v:.0f}") + unit
    return f"{n:.0f}" if n == int(n) else f"{n:g}"



class HistogramPicture:
    """The picture half of ``FragmentHistogram`` (a mixin): it reads the histogram's
    ``layouts``, ``buckets``, ``target``, ``COLORS``, ``counts()``, ``deleted_counts()``,
    ``_labels()``, ``heading()`` and ``caption()``."""

    WIDTH = 10.0   # inches
    DPI = 100

    def figure(self) -> Any:
        """The picture as a matplotlib ``Figure`` (Agg canvas; ``display(h.figure())`` in
        Databricks): a panel per layout, shared log axes, the legend with the heading as its
        title, the caption below. Raises :class:`PlotUnavailable` without matplotlib."""
        Figure, Canvas = load_matplotlib()
        n = max(1, len(self.layouts))
        fig = Figure(figsize=(self.WIDTH, 1.9 + 2.1 * n), dpi=self.DPI, layout="constrained")
        fig.get_layout_engine().set(h_pad=0.06, hspace=0.06)
        Canvas(fig)
        axes = list(fig.subplots(n, 1, sharex=True, sharey=True, squeeze=False)[:, 0])
        handles = []
        for i, ax in enumerate(axes):
            ax.set_xscale("log")
            ax.set_yscale("log")
            if i >= len(self.layouts):  # no layout at all: an empty panel
                break
            handles.append(self._draw_panel(ax, i))
        handles += self._key_handles()
        self._format_axes(axes)
        if self.target:
            self._mark_target(axes[0])
        self._fit_to_width(fig, self._legend(fig, handles, max(1, len(handles))), handles,
                           fig.supxlabel(self.caption(), fontsize=9.5))
        return fig

    def _bar_geometry(self) -> tuple[list[float], list[float], list[float]]:
        """Left edges, widths and centres of the bars: each leaves a gap of 4% of its bucket
        on each side (log scale)."""
        gap = 1.04
        return ([2.0 ** b * gap for b in self.buckets], [2.0 ** b * (2 / gap - gap) for b in self.buckets],
                [2.0 ** b * math.sqrt(2) for b in self.buckets])

    def _draw_panel(self, ax: Any, i: int) -> Any:
        """Layout ``i``'s bars, hatched deleted-row bars, counts, titles and target line on
        ``ax``; returns its legend handle."""
        from matplotlib.patches import Patch

        lefts, widths, centres = self._bar_geometry()
        counts, deleted = self.counts()[i][1], self.deleted_counts()[i][1]
        layout, color, label = self.layouts[i], self.COLORS[i % len(self.COLORS)], self._labels()[i]
        bars = ax.bar(lefts, [c - 0.5 if c else 0.0 for c in counts], width=widths,
                      bottom=0.5, align="edge", color=color, alpha=0.85, linewidth=0)
        for b, patch in zip(self.buckets, bars):
            patch.set_gid(f"bar-{i}-{b}")
        for j, d in enumerate(deleted or []):
            if d:
                ax.bar(lefts[j], d - 0.5, width=widths[j], bottom=0.5, align="edge",
                       fill=False, hatch="////", edgecolor="#222222", linewidth=0,
                       gid=f"deleted-{i}-{self.buckets[j]}")
        for j, c in enumerate(counts):
            if c:
                ax.text(centres[j], c * 1.15, compact_number(c), ha="center", va="bottom",
                        fontsize=8, gid=f"count-{i}-{self.buckets[j]}", zorder=4,
                        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.6})
        ax.set_title(label, loc="left", fontsize=10, fontweight="bold", color=color)
        ax.set_title(self._panel_summary(layout), loc="right", fontsize=9)
        ax.set_ylabel("fragments", fontsize=9)
        ax.grid(axis="y", which="major", alpha=0.3)
        ax.set_axisbelow(True)
        if self.target:
            ax.axvline(self.target, color="#111111", linestyle="--", linewidth=1.3, gid=f"target-{i}")
        return Patch(color=color, alpha=0.85, label=label)

    @staticmethod
    def _panel_summary(layout: Any) -> str:
        """'N fragments, R rows, D deleted (in K fragments)' for a panel's title."""
        summary = (f"{layout.fragments:,} fragment{'' if layout.fragments == 1 else 's'}, "
                   f"{layout.total_rows:,} rows")
        if layout.deleted is not None:
            summary += f", {layout.deleted_rows:,} deleted"
            if layout.fragments_with_deletions:
                k = layout.fragments_with_deletions
                summary += f" (in {k:,} fragment{'' if k == 1 else 's'})"
        return summary

    def _key_handles(self) -> list[Any]:
        """The legend's entries for the hatching and the target line, where drawn."""
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        handles = []
        if any(d is not None and any(d) for _, d in self.deleted_counts()):
            handles.append(Patch(facecolor="white", edgecolor="#222222", hatch="////",
                                 label="fragments with deleted rows"))
        if self.target:
            handles.append(Line2D([], [], color="#111111", linestyle="--", linewidth=1.3,
                                  label=f"target: {self.target:,} rows per fragment"))
        return handles

    def _format_axes(self, axes: list[Any]) -> None:
        """Shared limits, ticks and labels: bucket edges as minor x ticks, decades on y."""
        from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

        peak = max([max(c, default=0) for _, c in self.counts()] + [1])
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

    def _mark_target(self, ax: Any) -> None:
        """The target, labelled on a secondary x axis above the top panel."""
        from matplotlib.ticker import NullLocator

        top = ax.secondary_xaxis("top")
        top.set_xticks([self.target], labels=[f"target {self.target:,}"])
        top.xaxis.set_minor_locator(NullLocator())
        top.tick_params(axis="x", length=7, width=1.5, labelsize=9, pad=2)
        for t in top.get_xticklabels():
            t.set_fontweight("bold")
        top.set_gid("target-axis")

    def _legend(self, fig: Any, handles: list[Any], ncols: int) -> Any:
        """The legend, titled with the heading: one box, laid out by the legend, above the
        panels (constrained layout makes room for it), so title and legend never overlap."""
        legend = fig.legend(handles=handles, loc="outside upper center", ncols=ncols,
                            frameon=False, fontsize=9, handlelength=2.2, columnspacing=1.6,
                            title=self.heading(), alignment="center",
                            title_fontproperties={"size": 13, "weight": "bold"})
        legend.set_gid("legend")
        legend.get_title().set_gid("title")
        return legend

    def _fit_to_width(self, fig: Any, legend: Any, handles: list[Any], caption: Any) -> None:
        """Fit the legend and the caption to the figure's width: a smaller title, fewer
        legend columns, a smaller caption (down to 7 points), then the caption over lines."""
        caption.set_gid("caption")
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
            legend = self._legend(fig, handles, ncols)
            legend.get_title().set_fontsize(title.get_fontsize())
        wide = caption.get_window_extent(renderer).width
        if wide > room:
            caption.set_fontsize(max(7.0, 9.5 * room / wide))
            if caption.get_window_extent(renderer).width > room:
                lines = []
                for part in self.caption().split("; "):
                    caption.set_text("; ".join(lines[-1:] + [part]) if lines else part)
                    if lines and caption.get_window_extent(renderer).width <= room:
                        lines[-1] = caption.get_text()
                    else:
                        lines.append(part)
                caption.set_text(";\n".join(lines))

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
