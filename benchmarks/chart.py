"""The benchmark's picture: a bar per measured path (median seconds, log scale), coloured by
its ratio to the section's pylance anchor, with the targets listed below. Drawn with
matplotlib (the project's ``plot`` extra)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

ANCHOR, FAST, SLOW = "#888888", "#22aa77", "#dd7733"


def draw(rows: Sequence[Any], targets: Sequence[Any], path: Path) -> None:
    """Write the chart of ``rows`` (section, path, seconds, ratio) and ``targets`` (name, goal,
    measured, met) to ``path`` (.svg or .png)."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # labels stay text in the SVG (searchable, small)
    from matplotlib import pyplot as plt

    timed = [r for r in rows if r.seconds == r.seconds and r.seconds > 0]
    height = 1.2 + 0.28 * len(timed) + 0.22 * len(targets)
    fig, ax = plt.subplots(figsize=(12, height))
    labels = [f"{r.section}: {r.path}" for r in timed]
    colours = [ANCHOR if r.ratio is None else (FAST if r.ratio <= 1.5 else SLOW) for r in timed]
    ys = range(len(timed))
    ax.barh(list(ys), [r.seconds for r in timed], color=colours)
    ax.set_xscale("log")
    ax.set_yticks(list(ys), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("median seconds (log scale)")
    ax.set_title("lance-spark-compact benchmark: ratio to the section's pylance path beside each bar",
                 fontsize=10)
    for y, r in zip(ys, timed):
        ax.annotate(f"{r.seconds:.3f} s" + (f"  {r.ratio:.2f}x" if r.ratio is not None else ""),
                    (r.seconds, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=7)
    lines = [f"{'met' if t.met else 'NOT met'}: {t.name} ({t.goal}): {t.measured}" for t in targets]
    if lines:
        fig.text(0.01, 0.01, "Targets\n" + "\n".join(lines), fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.02 + 0.17 * len(lines) / max(height, 1), 1, 1))
    fig.savefig(path)
    plt.close(fig)
