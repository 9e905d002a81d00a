"""Memory over a soak (issue 33, item 7): ``maintain_warehouse`` in a loop over small tables,
an append to each table between rounds, as a maintenance service does for days; the engine
process's RSS (and the driver JVM's) sampled as it goes.

    source bin/env.sh && .venv/bin/python benchmarks/memory_soak.py --minutes 20 --every 20
    .venv/bin/python benchmarks/memory_soak.py --minutes 10 --every 0 --trace /tmp/probe.jsonl

``--every 0`` runs rounds back to back (more rounds a minute: a leak per round shows sooner).
``--trace FILE`` switches tracemalloc on in the engine only (benchmarks/memory_probe/: on the
driver's Python path, it acts only in ``python -m lance_compact.engine``) and writes, every
``--trace-every`` seconds, what grew since its first sample. Prints one line a minute (RSS of
the engine and the JVM, rounds so far, the machine's load) and, at the end, the RSS at minutes
1, 5, 10, 15, 20, ... and the growth a minute over the first and the second half.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss(pid: int) -> int:
    """A process's resident set, bytes (0 once it is gone): the engine's own measure."""
    from lance_compact.runtime.memory import rss_bytes

    return rss_bytes(pid)


def engine_pid(jvm: int) -> int | None:
    """The engine process (``python -m lance_compact.engine``) the driver JVM ``jvm`` started."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if b"lance_compact.engine" in cmd and parent == jvm:
            return int(entry)
    return None


def append(uri: str, start: int, rows: int) -> None:
    import lance
    import pyarrow as pa

    data = pa.table({"id": pa.array(range(start, start + rows), pa.int64()),
                     "tenant": pa.array([i % 7 for i in range(start, start + rows)], pa.int64()),
                     "payload": pa.array([f"row {i}" for i in range(start, start + rows)])})
    lance.write_dataset(data, uri, mode="append" if os.path.isdir(uri) else "create")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=20)
    p.add_argument("--every", type=float, default=20, help="seconds from one round's start to the next's")
    p.add_argument("--tables", type=int, default=5)
    p.add_argument("--rows", type=int, default=50, help="rows appended to each table between rounds")
    p.add_argument("--older-than", default="1 minute", help="maintain_warehouse's older_than")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a static Spark setting of the driver (spark.lance.compact.engine.metadataCacheBytes=8m, ...)")
    p.add_argument("--trace", help="a file for the engine's tracemalloc probe (JSON lines)")
    p.add_argument("--trace-every", type=float, default=60)
    p.add_argument("--trace-frames", type=int, default=1)
    p.add_argument("--trace-trim", action="store_true",
                   help="the probe calls glibc's malloc_trim(0) before each sample and records RSS after it too")
    a = p.parse_args()

    if a.trace:
        os.environ["LANCE_COMPACT_PROBE"] = os.path.abspath(a.trace)
        os.environ["LANCE_COMPACT_PROBE_EVERY"] = str(a.trace_every)
        os.environ["LANCE_COMPACT_PROBE_FRAMES"] = str(a.trace_frames)
        if a.trace_trim:
            os.environ["LANCE_COMPACT_PROBE_TRIM"] = "1"
        os.environ["PYTHONPATH"] = os.pathsep.join(
            x for x in [str(ROOT / "benchmarks" / "memory_probe"), os.environ.get("PYTHONPATH", "")] if x)
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import NO_CLEANUP_FLOOR, lance_session

    work = Path(tempfile.mkdtemp(prefix="lance-memory-soak-"))
    wh = work / "wh"
    uris = [str(wh / "db" / f"t{i}.lance") for i in range(a.tables)]
    (wh / "db").mkdir(parents=True)
    for uri in uris:
        for k in range(4):
            append(uri, k * a.rows, a.rows)
    spark = lance_session("local[2]", "lance-compact-memory-soak", str(wh),
                          {"spark.sql.shuffle.partitions": "2", **NO_CLEANUP_FLOOR,
                           "spark.lance.compact.engine.log": str(work / "engine.log"),
                           **dict(kv.split("=", 1) for kv in a.conf)})
    jvm = spark.sparkContext._gateway.proc.pid
    call = f"CALL lance.maintain_warehouse(older_than => '{a.older_than}')"
    spark.sql(call).collect()
    engine = engine_pid(jvm)
    assert engine, "no engine process found under the driver JVM"
    print(f"engine pid {engine}, JVM pid {jvm}; tables in {wh}; {call}", flush=True)
    start = time.monotonic()
    samples: list[tuple[float, int, int]] = []  # minute, engine RSS, JVM RSS
    rounds, rows, errors, next_minute = 0, 4 * a.rows, 0, 1
    while time.monotonic() - start < a.minutes * 60:
        began = time.monotonic()
        for uri in uris:
            append(uri, rows, a.rows)
        rows += a.rows
        out = spark.sql(call).collect()
        errors += sum(1 for r in out if r.error)
        rounds += 1
        now = time.monotonic()
        if now - start >= next_minute * 60:
            samples.append((next_minute, rss(engine), rss(jvm)))
            print(f"minute {next_minute:3d}: engine {rss(engine) / 2**20:7.1f} MiB, JVM {rss(jvm) / 2**20:7.1f} MiB, "
                  f"{rounds} rounds, {errors} failed rows, load {os.getloadavg()[0]:.2f}", flush=True)
            next_minute += 1
        time.sleep(max(0.0, a.every - (time.monotonic() - began)))
    end = (time.monotonic() - start) / 60
    if not samples or end - samples[-1][0] > 0.5:  # the last, partial minute
        samples.append((round(end), rss(engine), rss(jvm)))
    memory_lines = [line for line in (work / "engine.log").read_text().splitlines() if "memory: rss" in line]
    if memory_lines:  # the engine's own figures (runtime/memory.py), first and last
        print(f"engine log, first: {memory_lines[0]}\nengine log, last:  {memory_lines[-1]}")
    for uri in uris:  # the rows are all there
        import lance
        assert lance.dataset(uri).count_rows() == rows, uri
    spark.stop()
    print(f"\n{rounds} rounds over {a.tables} tables in {a.minutes:g} minutes ({errors} failed rows); "
          f"RSS, MiB (engine / JVM):")
    marks = [m for m in (1, 2, 5, 10, 15, 20, 25, 30, 45, 60, 90, 120) if m <= len(samples)]
    for m in marks:
        _, e, j = samples[m - 1]
        print(f"  minute {m:3d}: {e / 2**20:7.1f} / {j / 2**20:7.1f}")
    if len(samples) >= 4:
        half = len(samples) // 2
        for name, part in (("first", samples[:half]), ("second", samples[half - 1:])):
            grow = (part[-1][1] - part[0][1]) / 2**20 / max(1, part[-1][0] - part[0][0])
            print(f"  engine growth over the {name} half: {grow:+.2f} MiB a minute")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
