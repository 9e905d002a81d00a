"""lance-spark-sql with and without its driver's class-data archive (runtime/class_archive.py).

Interleaved fresh processes, each ``-e`` two CALLs of ``lance.compact`` on fresh copies of a
small degraded table (60 fragments of 40 rows, a fifth deleted): spark-sql's own "Time taken" of the first statement (the
issue 42 figure: the first statement of a fresh process), of the second, and the whole
process. The archive is made first (one untimed run that dumps it) in a cache folder of its
own; "off" runs set ``LANCE_COMPACT_CLASS_ARCHIVE=false``. Each run's tables are checked:
the rows equal the source's.

    source bin/env.sh && .venv/bin/python benchmarks/class_archive.py --rounds 4
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def run(wh: Path, source: Path, env: dict) -> tuple[list[float], float]:
    shutil.rmtree(wh / "b", ignore_errors=True)
    for name in ("first", "second"):
        shutil.copytree(source, wh / "b" / f"{name}.lance")
    os.sync()
    calls = "; ".join(f"CALL lance.compact(table => 'b.{n}', target_rows_per_fragment => 100000)"
                      for n in ("first", "second"))
    t = time.perf_counter()
    p = subprocess.run([str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(wh), "-e", calls],
                       capture_output=True, text=True, env=env)
    whole = time.perf_counter() - t
    taken = [float(x) for x in re.findall(r"Time taken: ([\d.]+) seconds", p.stderr + p.stdout)]
    if p.returncode != 0 or len(taken) != 2:
        raise SystemExit(f"lance-spark-sql failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    import lance
    from oracle import content
    for name in ("first", "second"):
        assert content(lance.dataset(str(wh / "b" / f"{name}.lance"))) == content(lance.dataset(str(source)))
    return taken, whole


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--rounds", type=int, default=4, help="pairs of runs (archive on, off), alternated")
    args = a.parse_args()
    from oracle import degraded_table

    work = Path(tempfile.mkdtemp(prefix="lance-class-archive-"))
    try:
        source = work / "source.lance"
        degraded_table(str(source))
        wh = work / "wh"
        on = {**os.environ, "LANCE_COMPACT_CLASS_ARCHIVE": "true", "LANCE_COMPACT_CACHE_DIR": str(work / "cache")}
        off = {**os.environ, "LANCE_COMPACT_CLASS_ARCHIVE": "false"}
        t = time.perf_counter()
        run(wh, source, on)  # makes the archive (dumped at its exit)
        print(f"the run that made the archive: {time.perf_counter() - t:.1f} s (whole process)")
        got: dict[str, list] = {"on": [], "off": []}
        for i in range(args.rounds):
            for name, env in (("on", on), ("off", off)) if i % 2 == 0 else (("off", off), ("on", on)):
                got[name].append(run(wh, source, env))
        print(f"load average at the end: {os.getloadavg()}")
        print("| archive | first statement, s | second statement, s | whole process, s | runs |")
        print("|---|---:|---:|---:|---:|")
        for name, runs in got.items():
            firsts = [r[0][0] for r in runs]
            seconds = [r[0][1] for r in runs]
            wholes = [r[1] for r in runs]
            print(f"| {name} | {statistics.median(firsts):.3f} ({', '.join(f'{x:.2f}' for x in firsts)}) "
                  f"| {statistics.median(seconds):.3f} | {statistics.median(wholes):.2f} "
                  f"({', '.join(f'{x:.1f}' for x in wholes)}) | {len(runs)} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
