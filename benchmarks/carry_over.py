"""A compaction meeting the same conflict, carried over against planned again, in one run.

    .venv/bin/python benchmarks/carry_over.py [--appends 300] [--repeat 3]

The table: ``--appends`` appends of 500 rows (64-dim vectors, a string), a BTREE index on id;
target 100,000 rows. Right before the commit a writer deletes 1% of the rows in every
fragment (once per table copy). Each path runs on a fresh copy, warm session, local[2]:

- ``CALL`` with no conflict (the floor);
- ``CALL`` whose deletions are carried over onto the compacted fragments (the default);
- ``CALL`` with ``carry_over_deletes => false``: the touched tasks are planned and run again;
- pylance ``compact_files`` with no conflict (the anchor).

Prints medians, ratios and the time the conflict adds on each path; checks the content
after every run (the rows the writer left, nothing else).
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def delete_one_percent_everywhere(uri: str, storage_options: dict | None) -> None:
    """The conflicting writer (a ``test_before_commit`` hook), once per table copy."""
    import lance
    marker = Path(f"{uri}.deleted")
    if not marker.exists():
        clock = time.perf_counter()
        lance.dataset(uri, storage_options=storage_options).delete("id % 100 = 7")
        marker.write_text(str(time.perf_counter() - clock))  # the writer's own time, not ours


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--appends", type=int, default=300)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "lance-compact-carry-over"))
    a = p.parse_args()

    import lance
    from pyspark.sql import SparkSession
    from lance_compact import configure_spark_with_lance_compact
    import tables

    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    # The conflicting writer is a test_before_commit hook: only an engine started for tests has them.
    os.environ["LANCE_COMPACT_TEST_HOOKS"] = "1"
    work = Path(a.work)
    wh = work / "wh"
    (wh / "b").mkdir(parents=True, exist_ok=True)
    src = work / f"source-{a.appends}.lance"
    if not src.exists():
        print(f"building the table ({a.appends} appends of 500 rows) ...", flush=True)
        ds = tables.streaming(str(src), appends=a.appends)
        ds.create_scalar_index("id", index_type="BTREE")
    spark = configure_spark_with_lance_compact(
        SparkSession.builder.master("local[2]").appName("carry-over-benchmark")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false"),
        warehouse=str(wh)).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    hook = "carry_over.delete_one_percent_everywhere"
    paths = {
        "CALL, no conflict": "",
        "CALL, conflict carried over": f", options => map('test_before_commit', '{hook}')",
        "CALL, conflict planned again": f", options => map('test_before_commit', '{hook}', "
                                        "'carry_over_deletes', 'false')",
    }
    times: dict[str, list[float]] = {k: [] for k in [*paths, "pylance compact_files, no conflict"]}
    writer: dict[str, list[float]] = {k: [] for k in paths}  # the conflicting delete's own time
    rows: dict[str, object] = {}

    def fresh(i: int) -> Path:
        dst = wh / "b" / f"t{i}.lance"
        shutil.rmtree(dst, ignore_errors=True)
        Path(f"{dst}.deleted").unlink(missing_ok=True)
        shutil.copytree(src, dst)
        os.sync()
        return dst

    expected_all = lance.dataset(str(src)).to_table(columns=["id"])["id"].to_pylist()
    for i in range(a.repeat + 1):  # run 0 warms everything up and is not counted
        for name, extra in paths.items():
            dst = fresh(0)
            clock = time.perf_counter()
            r = spark.sql(f"CALL lance.compact(table => 'b.t0', target_rows_per_fragment => 100000{extra})"
                          ).collect()[0]
            took = time.perf_counter() - clock
            got = sorted(lance.dataset(str(dst)).to_table(columns=["id"])["id"].to_pylist())
            want = sorted(x for x in expected_all if not (extra and x % 100 == 7))
            assert got == want, f"{name}: content differs"
            marker = Path(f"{dst}.deleted")
            if i:
                times[name].append(took)
                rows[name] = r
                writer[name].append(float(marker.read_text()) if marker.exists() else 0.0)
        dst = fresh(1)
        clock = time.perf_counter()
        lance.dataset(str(dst)).optimize.compact_files(target_rows_per_fragment=100000)
        if i:
            times["pylance compact_files, no conflict"].append(time.perf_counter() - clock)
    spark.stop()

    anchor = statistics.median(times["pylance compact_files, no conflict"])
    floor = statistics.median(times["CALL, no conflict"])
    print(f"\ntable: {a.appends} fragments of 500 rows, dim 64, BTREE on id; target 100,000; "
          f"local[2]; medians of {a.repeat}\n")
    print("'handling' is what the conflict adds to the CALL beyond the writer's own delete "
          "(which runs inside the CALL here, before its commit)\n")
    print(f"{'path':40} {'median s':>9} {'vs pylance':>11} {'handling':>9}  result")
    handling = {}
    for name, ts in times.items():
        m = statistics.median(ts)
        r = rows.get(name)
        note = (f"tasks {r.tasks}, rebased {r.tasks_rebased}, re-plans {r.retries}, commits {r.commits}"
                if r is not None else "")
        adds = ""
        if name in paths and name != "CALL, no conflict":
            handling[name] = statistics.median(t - w for t, w in zip(ts, writer[name])) - floor
            adds = f"{handling[name]:.3f} s"
        print(f"{name:40} {m:9.3f} {m / anchor:10.2f}x {adds:>9}  {note}")
    carried = handling["CALL, conflict carried over"]
    replanned = handling["CALL, conflict planned again"]
    if carried > 0:
        print(f"\nhandling the conflict: {carried:.3f} s carried over, {replanned:.3f} s planned again "
              f"({replanned / carried:.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
