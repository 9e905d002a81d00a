"""Clustered compaction, measured (not run in CI): filtered reads before and after, and what a
clustering run costs.

One run, one data set: ``--rows`` rows of random ``tenant`` (0..999), ``ts`` and ``other``
(unrelated) in ``5 x --fragments`` small fragments. From copies of it:

- ``arrival``: ``CALL lance.compact`` to ``--fragments`` fragments (rows keep arrival order);
- ``linear``:  ``CALL lance.compact(sort_order => 'tenant, ts')``;
- ``zorder``:  ``CALL lance.compact(sort_order => 'zorder(tenant, ts)')``;
- ``hilbert``: ``CALL lance.compact(sort_order => 'hilbert(tenant, ts)')``;
- ``pylance``, ``pyzorder``, ``pyhilbert``: the same sorts in this process (read all, sort,
  write_fragments, Rewrite).

Per layout and index kind (none, ZONEMAP, BTREE on tenant, ts and other), per filter: the
median read time of 3, and Lance's own scan metrics from ``analyze_plan`` (iops, bytes_read,
rows_scanned). Then incremental clustering: ``CLUSTER BY (tenant, ts)``, ``--rounds`` runs with
appends between them: depth before and after each run, fragments rewritten, seconds.
``--skip-spark`` measures the in-process layouts only (the tests' smoke run).

    python benchmarks/clustering.py --rows 2000000 --fragments 20
"""
from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
from lance import LanceOperation
from lance.fragment import write_fragments

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from lance_compact.compaction.clustering.keys import column_bounds, zvalues  # noqa: E402
from lance_compact.compaction.clustering.sort_order import parse_sort_order  # noqa: E402


def make_base(uri: str, rows: int, fragments: int) -> None:
    rng = np.random.default_rng(0)
    per = rows // fragments
    for i in range(fragments):
        n = per if i < fragments - 1 else rows - per * i
        t = pa.table({"id": np.arange(i * per, i * per + n), "tenant": rng.integers(0, 1000, n),
                      "ts": rng.integers(0, 100_000_000, n), "other": rng.integers(0, 1_000_000, n),
                      "payload": pa.array([f"payload {v}" for v in rng.integers(0, 1 << 30, n)])})
        lance.write_dataset(t, uri, mode="append" if i else "create", max_rows_per_file=n)


def in_process(uri: str, order_text: str, target: int) -> float:
    """pylance alone, one process: read every fragment, order, write, commit one Rewrite."""
    clock = time.perf_counter()
    ds = lance.dataset(uri)
    order = parse_sort_order(order_text, uri)
    t = ds.to_table()
    if order.zorder:
        sample = t.take(np.random.default_rng(0).choice(t.num_rows, min(t.num_rows, 50_000), replace=False))
        t = t.take(np.argsort(zvalues(t, order, column_bounds(sample, order)), kind="stable"))
    else:
        t = t.sort_by([(k.column, "descending" if k.descending else "ascending") for k in order.keys])
    new = write_fragments(t, uri, max_rows_per_file=target)
    lance.LanceDataset.commit(uri, LanceOperation.Rewrite(
        groups=[LanceOperation.RewriteGroup(old_fragments=[f.metadata for f in ds.get_fragments()],
                                            new_fragments=new)], rewritten_indices=[]), read_version=ds.version)
    return time.perf_counter() - clock


# analyze_plan prints figures with a unit suffix: "rows_scanned=3.99 K", "bytes_read=29.56 K".
_METRIC = {k: re.compile(rf"\b{k}=([\d.]+)\s*([KMGT]?)") for k in ("iops", "bytes_read", "rows_scanned")}
_SCALE = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def measure(ds: lance.LanceDataset, flt: str, use_index: bool) -> dict:
    times = []
    for _ in range(3):
        clock = time.perf_counter()
        ds.to_table(filter=flt, use_scalar_index=use_index)
        times.append(time.perf_counter() - clock)
    plan = ds.scanner(filter=flt, use_scalar_index=use_index).analyze_plan()
    out = {"ms": statistics.median(times) * 1000}
    for k, rx in _METRIC.items():
        out[k] = int(sum(float(v) * _SCALE[u] for v, u in rx.findall(plan)))  # every LanceRead node
    return out


def read_table(layouts: dict[str, str], filters: list[str]) -> list[str]:
    """Per index kind, layout and filter: the read's figures, and its time and I/O requests as
    ratios to the same filter on the ``arrival`` layout (plain compaction) with the same index."""
    lines = [f"{'layout':9} {'index':8} {'filter':28} {'ms':>8} {'iops':>6} {'bytes_read':>12} {'rows_scanned':>12}"
             f" {'ms/arrival':>10} {'iops/arrival':>12}"]
    for kind in ("none", "ZONEMAP", "BTREE"):
        got: dict[tuple[str, str], dict] = {}
        for name, uri in layouts.items():
            ds = lance.dataset(uri)
            for ix in [i["name"] for i in ds.list_indices()]:
                ds.drop_index(ix)
            if kind != "none":
                for col in ("tenant", "ts", "other"):
                    ds.create_scalar_index(col, kind)
            ds = lance.dataset(uri)
            for f in filters:
                got[name, f] = measure(ds, f, kind != "none")
        for (name, f), m in got.items():
            base = got.get(("arrival", f))
            ratio = (f" {m['ms'] / base['ms']:10.3f} {m['iops'] / max(1, base['iops']):12.3f}" if base else "")
            lines.append(f"{name:9} {kind:8} {f:28} {m['ms']:8.2f} {m['iops']:6d} {m['bytes_read']:12d} "
                         f"{m['rows_scanned']:12d}{ratio}")
    return lines


def incremental_depth(spark, uri: str, rows: int, rounds: int, target: int) -> list[str]:
    """Depth before and after each incremental run with appends between runs, and its cost
    (the table is ``db.incr``, a copy of the base)."""
    spark.sql("ALTER TABLE lance.db.incr CLUSTER BY (tenant, ts)")
    rng = np.random.default_rng(1)
    lines = [f"{'round':5} {'depth before':>12} {'after':>6} {'unclustered':>11} {'rewritten':>9} {'seconds':>8}"]
    start = 10 * rows
    for i in range(rounds + 1):
        if i:  # round 0 clusters the base
            for _ in range(3):
                n = max(1, rows // 60)
                lance.write_dataset(pa.table({
                    "id": np.arange(start, start + n), "tenant": rng.integers(0, 1000, n),
                    "ts": rng.integers(0, 100_000_000, n), "other": rng.integers(0, 1_000_000, n),
                    "payload": pa.array([f"payload {v}" for v in rng.integers(0, 1 << 30, n)])}), uri, mode="append")
                start += n
        before = spark.sql("CALL lance.describe_layout(table => 'db.incr')").collect()[0]
        clock = time.perf_counter()
        r = spark.sql(f"CALL lance.compact(table => 'db.incr', target_rows_per_fragment => {target})").collect()[0]
        seconds = time.perf_counter() - clock
        after = spark.sql("CALL lance.describe_layout(table => 'db.incr')").collect()[0]
        lines.append(f"{i:5d} {before.clustering_depth:12.2f} {after.clustering_depth:6.2f} "
                     f"{before.unclustered_row_share:11.1%} {r.fragments_removed:4d}/{before.fragments:<4d} {seconds:8.2f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--fragments", type=int, default=20, help="fragments after compaction (5x before)")
    p.add_argument("--dir", default=None, help="work folder (default: a temporary one, removed after)")
    p.add_argument("--skip-spark", action="store_true", help="in-process layouts only")
    p.add_argument("--rounds", type=int, default=4, help="incremental runs with appends between them")
    a = p.parse_args(argv)
    work = Path(a.dir or tempfile.mkdtemp(prefix="clustering-bench-"))
    wh = work / "wh"
    (wh / "db").mkdir(parents=True, exist_ok=True)
    base = str(wh / "db" / "base.lance")
    shutil.rmtree(base, ignore_errors=True)
    make_base(base, a.rows, a.fragments * 5)
    target = -(-a.rows // a.fragments)
    layouts: dict[str, str] = {}
    costs: list[str] = []

    def copy(name: str) -> str:
        dst = wh / "db" / f"{name}.lance"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(base, dst)
        layouts[name] = str(dst)
        return str(dst)

    seconds: dict[str, float] = {}
    for name, order in (("pylance", "tenant, ts"), ("pyzorder", "zorder(tenant, ts)"),
                        ("pyhilbert", "hilbert(tenant, ts)")):
        seconds[name] = in_process(copy(name), order, target)
        costs.append(f"{name:9} in-process sort by {order}: {seconds[name]:.2f} s")
    if not a.skip_spark:
        from lance_compact import configure_spark_with_lance_compact
        from pyspark.sql import SparkSession

        spark = configure_spark_with_lance_compact(
            SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false"),
            warehouse=str(wh)).getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        spark.sql("CALL lance.describe_layout(table => 'db.base')").collect()  # warm the engine
        same = {"linear": "pylance", "zorder": "pyzorder", "hilbert": "pyhilbert"}
        for name, extra in (("arrival", ""), ("linear", ", sort_order => 'tenant, ts'"),
                            ("zorder", ", sort_order => 'zorder(tenant, ts)'"),
                            ("hilbert", ", sort_order => 'hilbert(tenant, ts)'")):
            copy(name)
            clock = time.perf_counter()
            r = spark.sql(f"CALL lance.compact(table => 'db.{name}', target_rows_per_fragment => {target}"
                          f"{extra})").collect()[0]
            seconds[name] = time.perf_counter() - clock
            ratios = (f"; {seconds[name] / seconds['arrival']:.2f}x the plain compaction, "
                      f"{seconds[name] / seconds[same[name]]:.2f}x pylance's same sort in process"
                      if name in same else "")
            costs.append(f"{name:9} CALL lance.compact{(' ' + extra[2:]) if extra else ' (plain)'}: "
                         f"{seconds[name]:.2f} s (engine {r.elapsed_ms} ms, "
                         f"{r.fragments_removed} -> {r.fragments_added} fragments{ratios})")
        incremental = incremental_depth(spark, copy("incr"), a.rows, a.rounds, target)
        spark.stop()
    else:
        copy("arrival")
        ds = lance.dataset(layouts["arrival"])
        ds.optimize.compact_files(target_rows_per_fragment=target)
    filters = ["tenant = 7", f"ts < {100_000_000 // 100}", "other = 123456", "tenant = 7 AND ts < 50000000"]
    print(f"{a.rows} rows, {a.fragments * 5} -> about {a.fragments} fragments of {target} rows\n")
    print("\n".join(costs) + "\n")
    print("filtered reads (ms: median of 3; iops, bytes_read, rows_scanned: Lance's analyze_plan)")
    print("\n".join(read_table(layouts, filters)))
    if not a.skip_spark:
        print("\nincremental clustering, CLUSTER BY (tenant, ts) (a Hilbert curve): appends of 3 fragments "
              "(5% of the rows) between runs")
        print("\n".join(incremental))
    if not a.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
