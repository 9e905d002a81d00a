"""How many io_bounded runs a large degraded table needs to reach the layout one default run
gives, and what each run leaves.

    .venv/bin/python benchmarks/io_bounded_convergence.py [--fragments 2000] [--max-fragments 400]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import lance  # noqa: E402

from degraded_table import content, degraded_table  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--fragments", type=int, default=2000)
    p.add_argument("--rows-per-fragment", type=int, default=50)
    p.add_argument("--target", type=int, default=5000)
    p.add_argument("--max-fragments", type=int, default=400)
    p.add_argument("--max-bytes", type=int, default=None)
    a = p.parse_args()

    from pyspark.sql import SparkSession
    from lance_compact import configure_spark_with_lance_compact

    work = Path(tempfile.mkdtemp(prefix="lance-iob-"))
    path = work / "wh" / "b" / "t.lance"
    degraded_table(str(path), fragments=a.fragments, rows_per_fragment=a.rows_per_fragment,
                   appends=40, dim=8)
    reference = work / "ref.lance"
    shutil.copytree(path, reference)
    lance.dataset(str(reference)).optimize.compact_files(target_rows_per_fragment=a.target)
    want = sorted(f.count_rows() for f in lance.dataset(str(reference)).get_fragments())
    before = lance.dataset(str(path))

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = configure_spark_with_lance_compact(
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false"),
        warehouse=str(work / "wh")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    budget = [f"'max_rewrite_fragments', '{a.max_fragments}'"] + \
        ([f"'max_rewrite_bytes', '{a.max_bytes}'"] if a.max_bytes else [])
    print(f"{a.fragments} fragments, {before.count_rows():,} rows, target {a.target}; "
          f"budget {', '.join(budget)}; one default run gives {len(want)} fragments")
    run = 0
    while True:
        run += 1
        r = spark.sql(f"CALL lance.compact(table => 'b.t', target_rows_per_fragment => {a.target}, "
                      f"strategy => 'io_bounded', options => map({', '.join(budget)}))").collect()[0]
        frags = len(lance.dataset(str(path)).get_fragments())
        print(f"run {run}: {r.tasks} tasks, {r.fragments_removed} -> {r.fragments_added} fragments, "
              f"{r.bytes_read:,} bytes read; left for later: {r.tasks_left} tasks / "
              f"{r.fragments_left} fragments; table now {frags} fragments")
        if r.tasks == 0 or run > 50:
            break
    after = lance.dataset(str(path))
    same = sorted(f.count_rows() for f in after.get_fragments()) == want
    print(f"converged after {run - 1} runs with work (run {run} found nothing): "
          f"{'same layout as one default run' if same else 'LAYOUT DIFFERS from one default run'}; "
          f"content {'unchanged' if content(after) == content(before) else 'CHANGED'}")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
