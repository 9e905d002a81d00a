"""CALL lance.compact (warm local Spark session) against pylance's in-process compact_files,
on copies of the same degraded table with the same options, in one run.

    .venv/bin/python benchmarks/compare_pylance.py [--fragments 600] [--rows-per-fragment 500] [--repeat 3]

Prints the median wall time of each, the ratio CALL / compact_files, and a no-op CALL.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import lance  # noqa: E402

from degraded_table import content, degraded_table  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--fragments", type=int, default=600)
    p.add_argument("--rows-per-fragment", type=int, default=500)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--target", type=int, default=65536)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--master", default="local[2]")
    a = p.parse_args()

    from pyspark.sql import SparkSession
    from lance_compact import configure_spark_with_lance_compact

    work = Path(tempfile.mkdtemp(prefix="lance-bench-"))
    wh = work / "wh"
    (wh / "b").mkdir(parents=True)
    source = work / "source.lance"
    degraded_table(str(source), fragments=a.fragments, rows_per_fragment=a.rows_per_fragment,
                   appends=20, dim=a.dim)
    print(f"table: {a.fragments} fragments x {a.rows_per_fragment} rows, dim {a.dim}, "
          f"{lance.dataset(str(source)).count_rows():,} live rows; target {a.target}; "
          f"master {a.master}; {os.cpu_count()} CPUs")

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = configure_spark_with_lance_compact(
        SparkSession.builder.master(a.master).config("spark.ui.enabled", "false"),
        warehouse=str(wh)).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    def copy(name: str) -> Path:
        dst = wh / "b" / f"{name}.lance"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(source, dst)
        return dst

    # Warm the session: Python workers started, pylance imported.
    copy("warmup")
    spark.sql(f"CALL lance.compact(table => 'b.warmup', target_rows_per_fragment => {a.target})").collect()

    spark_times, lance_times = [], []
    for i in range(a.repeat):
        s = copy(f"spark{i}")
        t = time.perf_counter()
        row = spark.sql(f"CALL lance.compact(table => 'b.spark{i}', "
                        f"target_rows_per_fragment => {a.target})").collect()[0]
        spark_times.append(time.perf_counter() - t)

        c = copy(f"pylance{i}")
        ds = lance.dataset(str(c))
        t = time.perf_counter()
        metrics = ds.optimize.compact_files(target_rows_per_fragment=a.target)
        lance_times.append(time.perf_counter() - t)

        ours, theirs = lance.dataset(str(s)), lance.dataset(str(c))
        assert [f.count_rows() for f in ours.get_fragments()] == \
            [f.count_rows() for f in theirs.get_fragments()], "layouts differ"
        assert content(ours) == content(theirs), "contents differ"
        assert (row.fragments_removed, row.fragments_added) == \
            (metrics.fragments_removed, metrics.fragments_added)

    t = time.perf_counter()
    noop = spark.sql(f"CALL lance.compact(table => 'b.spark0', target_rows_per_fragment => {a.target})").collect()[0]
    noop_s = time.perf_counter() - t
    assert noop.tasks == 0

    sm, lm = statistics.median(spark_times), statistics.median(lance_times)
    print(f"tasks per CALL: {row.tasks}; fragments {row.fragments_removed} -> {row.fragments_added}")
    print(f"CALL lance.compact (warm): median {sm:.2f} s  runs {', '.join(f'{x:.2f}' for x in spark_times)}")
    print(f"pylance compact_files:     median {lm:.2f} s  runs {', '.join(f'{x:.2f}' for x in lance_times)}")
    print(f"ratio CALL / compact_files: {sm / lm:.2f}x")
    print(f"no-op CALL: {noop_s:.2f} s")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
