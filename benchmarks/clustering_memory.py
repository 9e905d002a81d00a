"""Memory of a clustering run as the table grows (not run in CI): the peak resident memory of
the Spark Python workers, of the driver's Python process (the engine) and of the JVM during
``CALL lance.compact(sort_order => 'tenant, ts')``, at ``--rows`` N and 4N rows with the same
``--target`` rows per fragment. A task holds one chunk of a source fragment (map side) or one
range partition (reduce side, about one target-size fragment), so the workers' peak should
stay flat while the table grows 4x; the engine (the driver's long-lived Python process, which
runs the Spark jobs) holds only the sampled bounds and metadata.

How memory is read: each size runs in a fresh process with its own local Spark application
(``local[2]``); a thread samples every 50 ms, from ``/proc`` (Linux), the resident set size
(VmRSS) of every process descending from it: the JVM (``java``), the Python workers (the
``pyspark.daemon`` and the workers it forks) and the engine (``python -m lance_compact.engine``,
started by the JVM). Reported: the largest single worker's peak, the peak of all workers'
sum, the engine's and the JVM's peaks, over the whole CALL (key sampling, then the
sort+write job, which dominates), and the seconds it took.

    python benchmarks/clustering_memory.py --rows 400000 --target 100000     # the real sizes
    python benchmarks/clustering_memory.py --rows 20000 --target 5000        # a quick check

Output: one line per size, then the 4N / N ratios:

        rows  target  fragments  seconds  worker_peak_MB  workers_sum_MB  engine_MB  jvm_MB
      400000  100000    16 -> 5      ...
     1600000  100000   64 -> 18      ...
    ratio 4N/N: worker_peak x..., workers_sum x..., engine x..., jvm x...
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from probes import roles_below, rss_kb

ROOT = Path(__file__).resolve().parents[1]


class Sampler(threading.Thread):
    """Peaks of resident memory (kB) while running: see the module's docstring."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.peaks = {"worker_peak": 0, "workers_sum": 0, "engine": 0, "jvm": 0}

    def run(self) -> None:
        me = os.getpid()
        while not self.stop.is_set():
            roles = roles_below([me])
            workers = [rss_kb(p) for p, r in roles.items() if r == "worker"]
            jvm = sum(rss_kb(p) for p, r in roles.items() if r == "jvm")
            now = {"worker_peak": max(workers, default=0), "workers_sum": sum(workers),
                   "engine": sum(rss_kb(p) for p, r in roles.items() if r == "engine"), "jvm": jvm}
            for k, v in now.items():
                self.peaks[k] = max(self.peaks[k], v)
            self.stop.wait(0.05)


def make_table(uri: str, rows: int, per: int) -> int:
    import lance
    import numpy as np
    import pyarrow as pa
    rng = np.random.default_rng(0)
    n_frag = 0
    for start in range(0, rows, per):
        n = min(per, rows - start)
        t = pa.table({"id": np.arange(start, start + n), "tenant": rng.integers(0, 1000, n),
                      "ts": rng.integers(0, 100_000_000, n), "other": rng.integers(0, 1_000_000, n),
                      "payload": pa.array([f"payload {v}" for v in rng.integers(0, 1 << 30, n)])})
        lance.write_dataset(t, uri, mode="append" if start else "create", max_rows_per_file=n)
        n_frag += 1
    return n_frag


def one(rows: int, target: int, work: str) -> dict:
    """One size, in this (fresh) process."""
    sys.path.insert(0, str(ROOT / "python"))
    import lance
    from lance_compact import configure_spark_with_lance_compact
    from pyspark.sql import SparkSession

    wh = Path(work) / "wh"
    uri = str(wh / "db" / "t.lance")
    before = make_table(uri, rows, max(1, target // 4))  # small appends, as a stream leaves them
    spark = configure_spark_with_lance_compact(
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false"),
        warehouse=str(wh)).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql("CALL lance.describe_layout(table => 'db.t')").collect()  # start the engine and workers
    sampler = Sampler()
    sampler.start()
    clock = time.perf_counter()
    r = spark.sql(f"CALL lance.compact(table => 'db.t', target_rows_per_fragment => {target}, "
                  "sort_order => 'tenant, ts')").collect()[0]
    seconds = time.perf_counter() - clock
    sampler.stop.set()
    sampler.join()
    after = len(lance.dataset(uri).get_fragments())
    assert r.rows_rewritten == rows, r
    spark.stop()
    return {"rows": rows, "target": target, "fragments": f"{before} -> {after}", "seconds": round(seconds, 2),
            **{k: round(v / 1024, 1) for k, v in sampler.peaks.items()}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=400_000, help="N: the smaller table (the other has 4N)")
    p.add_argument("--target", type=int, default=100_000, help="target rows per fragment (both sizes)")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a single size, in a child
    a = p.parse_args(argv)
    if a.one:
        with tempfile.TemporaryDirectory(prefix="clustering-memory-") as work:
            print("RESULT " + json.dumps(one(a.rows, a.target, work)), flush=True)
        return
    results = []
    for rows in (a.rows, 4 * a.rows):
        out = subprocess.run([sys.executable, __file__, "--one", "--rows", str(rows), "--target", str(a.target)],
                             capture_output=True, text=True, check=False)
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            sys.exit(f"the run of {rows} rows failed:\n{out.stderr[-3000:]}")
        results.append(json.loads(line[len("RESULT "):]))
    cols = ["rows", "target", "fragments", "seconds", "worker_peak", "workers_sum", "engine", "jvm"]
    print(f"{'rows':>8} {'target':>7} {'fragments':>10} {'seconds':>8} {'worker_peak_MB':>15} "
          f"{'workers_sum_MB':>15} {'engine_MB':>10} {'jvm_MB':>8}")
    for r in results:
        print(f"{r['rows']:>8} {r['target']:>7} {r['fragments']:>10} {r['seconds']:>8} {r['worker_peak']:>15} "
              f"{r['workers_sum']:>15} {r['engine']:>10} {r['jvm']:>8}")
    small, big = results
    print("ratio 4N/N: " + ", ".join(f"{k} x{big[k] / small[k]:.2f}" for k in cols[4:] if small[k]))


if __name__ == "__main__":
    main()
