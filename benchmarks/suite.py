"""The benchmark suite: every path of a compaction against pylance's in-process
``compact_files`` on the same data, in one run.

    .venv/bin/python benchmarks/suite.py              # the full suite (about 15 minutes)
    .venv/bin/python benchmarks/suite.py --quick      # tiny tables, to check it works (CI)
    .venv/bin/python benchmarks/suite.py --only streaming big

Prints one table (each path's median time, its ratio to its anchor, the figures behind it)
and the targets of issue 9, met or not; writes ``results.json`` and ``results.svg`` (a
chart of the same figures) to ``--out``. Each timed path runs on a fresh copy of its table
(synced to disk first), and each result is checked: the content equals the source's live
rows in order, and the layout equals pylance's. Absolute times on a shared machine drift;
ratios within one run hold.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402
import tables  # noqa: E402
from probes import PROBES, TARGETS, _same_content, call_statement, copy, fragment_rows, same_rows  # noqa: E402

# name -> (builder, keyword arguments), full size and quick.
TABLES = {
    "full": {
        "streaming": ("streaming", dict(appends=600, rows_per_append=500, dim=64)),
        "big": ("big", dict(fragments=2000, rows_per_fragment=2000, dim=128)),
        "big4x": ("big", dict(fragments=8000, rows_per_fragment=2000, dim=128)),
        "binary": ("big", dict(fragments=200, rows_per_fragment=10000, dim=64, deleted_quarter=False)),
        "frags1k": ("many_fragments", dict(fragments=1000, rows_per_fragment=100, small=10, small_rows=10)),
        "frags50k": ("many_fragments", dict(fragments=50000, rows_per_fragment=100, small=10, small_rows=10)),
        "frags100k": ("many_fragments", dict(fragments=100000, rows_per_fragment=10)),
    },
    "quick": {
        "streaming": ("streaming", dict(appends=30, rows_per_append=100, dim=8)),
        "big": ("big", dict(fragments=40, rows_per_fragment=500, dim=16, per_write=20)),
        "big4x": ("big", dict(fragments=160, rows_per_fragment=500, dim=16, per_write=40)),
        "binary": ("big", dict(fragments=20, rows_per_fragment=2000, dim=16, deleted_quarter=False)),
        "frags1k": ("many_fragments", dict(fragments=100, rows_per_fragment=100, small=10, small_rows=10)),
        "frags50k": ("many_fragments", dict(fragments=1000, rows_per_fragment=100, small=10, small_rows=10)),
        "frags100k": ("many_fragments", dict(fragments=2000, rows_per_fragment=10)),
    },
}
# The warehouse section: many small degraded tables (a third indexed, with unindexed appends)
# and many tiny ones for the health table.
WAREHOUSE = {"full": {"tables": dict(tables=60, fragments=35, rows_per_fragment=100, dim=16), "tiny": 1000},
             "quick": {"tables": dict(tables=6, fragments=12, rows_per_fragment=20, dim=4), "tiny": 30}}



def run_probe(work: Path, name: str, **kwargs: Any) -> dict:
    """A probe in a process of its own (a fresh Spark session, its own peak memory)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, __file__, "--probe", name, "--work", str(work),
                        "--args", json.dumps(kwargs)], capture_output=True, text=True, env=env)
    lines = [line for line in p.stdout.splitlines() if line.startswith("PROBE ")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"probe {name} failed:\n{p.stderr[-4000:]}")
    return json.loads(lines[-1][len("PROBE "):])


def spark_sql(work: Path, table: str, plugin: bool, warm: int, warmup: int = 3,
              extra: tuple[str, ...] = ()) -> dict:
    """bin/lance-spark-sql (more spark-sql arguments: ``extra``), a fresh process: the first
    statement CALLs a fresh copy, then ``warmup`` untimed CALLs (as the PySpark session is
    warmed), ``warm`` timed ones on fresh copies and a no-op; spark-sql's own 'Time taken' for
    each."""
    import lance

    wh = work / f"wh-sql-{int(plugin)}"
    shutil.rmtree(wh, ignore_errors=True)
    src = work / "tables" / f"{table}.lance"
    names = ["first"] + [f"w{i}" for i in range(warmup)] + [f"c{i}" for i in range(warm)]
    for name in names:
        copy(src, wh / "b" / f"{name}.lance")
    target = TARGETS[table]
    statements = [call_statement(n, target) for n in names] + [call_statement(names[-1], target)]
    env = {**os.environ, "LANCE_COMPACT_START_ENGINE": "true" if plugin else "false"}
    t = time.perf_counter()
    p = subprocess.run([str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(wh), "--master", "local[2]",
                        *extra, "-e", ";\n".join(statements)], capture_output=True, text=True, env=env)
    whole = time.perf_counter() - t
    taken = [float(x) for x in re.findall(r"Time taken: ([\d.]+) seconds", p.stderr + p.stdout)]
    if p.returncode != 0 or len(taken) != len(statements):
        raise RuntimeError(f"spark-sql failed:\n{p.stderr[-4000:]}")
    source = lance.dataset(str(src))
    for name in names:
        assert same_rows(lance.dataset(str(wh / "b" / f"{name}.lance")), source), "spark-sql CALL changed rows"
    layout = fragment_rows(lance.dataset(str(wh / "b" / "first.lance")))
    shutil.rmtree(wh, ignore_errors=True)
    return {"first": taken[0], "warm": taken[1 + warmup:-1], "noop": taken[-1], "whole": whole, "layout": layout}


def warehouse_spark_sql(work: Path, repeat: int) -> dict:
    """What a user runs: bin/lance-spark-sql with its default settings (no --master, no
    parallelism argument), a fresh process; ``repeat + 2`` statements
    ``CALL lance.maintain_warehouse(namespace => ..., older_than => '0 seconds')`` on fresh
    copies of the warehouse tables: the first (the process's first statement: engine, Python
    workers and imports started on the way, as a scheduled job pays them), a second one (the
    JVM's code paths still compiling: as the warm PySpark session runs two warm-up calls first)
    and ``repeat`` warm ones, spark-sql's own 'Time taken' for each, and the whole process."""
    import lance

    src = work / "tables" / "warehouse"
    names = sorted(p.name for p in src.iterdir() if p.name.endswith(".lance"))
    wh = work / "wh-sql-warehouse"
    shutil.rmtree(wh, ignore_errors=True)
    namespaces = [f"r{i}" for i in range(repeat + 2)]
    for ns in namespaces:
        shutil.copytree(src, wh / ns)
    os.sync()
    statements = [f"CALL lance.maintain_warehouse(namespace => '{ns}', older_than => '0 seconds')"
                  for ns in namespaces]
    t = time.perf_counter()
    p = subprocess.run([str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(wh),
                        # the operator's: the tables' versions are seconds old (retention check off)
                        "--conf", "spark.lance.compact.cleanup.versionMinAge=0s",
                        "-e", ";\n".join(statements)], capture_output=True, text=True)
    whole = time.perf_counter() - t
    taken = [float(x) for x in re.findall(r"Time taken: ([\d.]+) seconds", p.stderr + p.stdout)]
    if p.returncode != 0 or len(taken) != len(statements):
        raise RuntimeError(f"spark-sql failed:\n{p.stderr[-4000:]}")
    ran = {r[0] for r in (line.split("\t") for line in p.stdout.splitlines()) if len(r) > 2 and r[2] == "true"}
    for ns in namespaces:
        for name in names:
            assert _same_content(lance.dataset(str(wh / ns / name)), lance.dataset(str(src / name))), \
                f"spark-sql maintain_warehouse changed the rows of {ns}.{name}"
            assert f"{ns}.{name[:-6]}" in ran, f"spark-sql maintain_warehouse left {ns}.{name} alone"
    shutil.rmtree(wh, ignore_errors=True)
    return {"first": taken[0], "second": taken[1], "warm": taken[2:], "whole": whole}


# ---------------------------------------------------------------- the suite

@dataclass
class Row:
    section: str
    path: str
    seconds: float                  # median
    anchor: str | None = None       # the row this one is compared with
    ratio: float | None = None
    runs: list[float] = field(default_factory=list)
    note: str = ""


@dataclass
class Target:
    name: str
    goal: str
    measured: str
    met: bool


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def build_warehouse(work: Path, size: str) -> None:
    """The warehouse section's tables (kept between runs, like the others)."""
    spec = json.dumps(WAREHOUSE[size], sort_keys=True)
    stamp = work / "tables" / "warehouse.json"
    if stamp.exists() and stamp.read_text() == spec:
        return
    (work / "tables").mkdir(parents=True, exist_ok=True)
    print(f"  making the warehouse tables: {spec}", flush=True)
    tables.warehouse(str(work / "tables" / "warehouse"), **WAREHOUSE[size]["tables"])
    tables.tiny_tables(str(work / "tables" / "tiny"), WAREHOUSE[size]["tiny"])
    os.sync()
    stamp.write_text(spec)


def build_tables(work: Path, size: str, names: list[str]) -> dict:
    import lance

    info = {}
    (work / "tables").mkdir(parents=True, exist_ok=True)
    for name in names:
        builder, kwargs = TABLES[size][name]
        uri = work / "tables" / f"{name}.lance"
        stamp = work / "tables" / f"{name}.json"
        spec = json.dumps([builder, kwargs], sort_keys=True)
        if not (uri.exists() and stamp.exists() and stamp.read_text() == spec):
            print(f"  making table {name}: {builder} {kwargs}", flush=True)
            getattr(tables, builder)(str(uri), **kwargs)
            stamp.write_text(spec)
            os.sync()  # nothing timed may share the disk with this table's write-back
        ds = lance.dataset(str(uri))
        frags = ds.get_fragments()
        size_bytes = sum(d.file_size_bytes or 0 for f in frags for d in f.metadata.files)
        info[name] = {"fragments": len(frags), "rows": ds.count_rows(), "bytes": size_bytes,
                      "deleted": sum(f.metadata.deletion_file.num_deleted_rows
                                     for f in frags if f.metadata.deletion_file)}
    return info


SECTIONS = ["streaming", "big", "binary", "memory", "scaling", "planning", "warehouse"]
NEEDS = {"warehouse": [], "streaming": ["streaming"], "big": ["big"], "binary": ["binary"],
         "memory": ["big", "big4x"], "scaling": ["frags1k", "frags50k"], "planning": ["frags100k"]}


@dataclass
class Suite:
    """One run of the suite: where its tables are, how often each path runs, what it measured."""

    work: Path
    quick: bool
    repeat: int
    rows: list[Row] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def add(self, section: str, path: str, runs: list[float], anchor: Row | None = None, note: str = "") -> Row:
        """A measured path: its median, and its ratio to the section's anchor (pylance)."""
        r = Row(section, path, med(runs), anchor.path if anchor else None,
                med(runs) / anchor.seconds if anchor else None, runs, note)
        self.rows.append(r)
        print(f"  {section:10} {path:58} {r.seconds:8.3f} s" +
              (f"  {r.ratio:5.2f}x" if r.ratio is not None else ""), flush=True)
        return r


def check_layout(ours: list[int] | None, theirs: list[int] | None, what: str) -> None:
    assert ours == theirs, f"{what}: layout differs from pylance's"


def section_warehouse(s: Suite) -> None:
    """A pylance loop, a CALL maintain per table and one maintain_warehouse over the same tables; health of many."""
    py = run_probe(s.work, "warehouse_pylance", repeat=s.repeat)
    n = py["tables"]
    anchor = s.add("warehouse", f"pylance loop over {n} tables (compact, indices, cleanup)", py["times"])
    sess = run_probe(s.work, "warehouse_session", repeat=s.repeat)
    s.add("warehouse", f"CALL lance.maintain per table, {n} tables, warm", sess["loop"], anchor)
    together = s.add("warehouse", f"CALL lance.maintain_warehouse, {n} tables, warm", sess["together"], anchor,
                     note=f"{len(sess['ran'])} tables maintained")
    # What a user runs (issue 25): spark-sql with its defaults, a fresh process. The warm
    # PySpark row above has the engine, its imports and the Python workers already started;
    # a scheduled spark-sql job pays them in its first statement.
    # Anchored on the pylance loop timed just before and just after the spark-sql process, as
    # the streaming section's spark-sql rows are: the machine drifts within minutes.
    loop_before = run_probe(s.work, "warehouse_pylance", repeat=s.repeat)["times"]
    sql = warehouse_spark_sql(s.work, s.repeat)
    around = s.add("warehouse", "pylance loop, just before and after spark-sql's runs",
                   loop_before + run_probe(s.work, "warehouse_pylance", repeat=s.repeat)["times"])
    s.add("warehouse", f"spark-sql maintain_warehouse, {n} tables, first statement", [sql["first"]], around,
          note=f"whole process {sql['whole']:.1f} s")
    sql_warm = s.add("warehouse", f"spark-sql maintain_warehouse, {n} tables, warm statements", sql["warm"],
                     around, note=f"the second statement {sql['second']:.2f} s")
    health = s.add("warehouse", f"health of {sess['health_tables']:,} tables (system.table_health)",
                   sess["health"])
    s.targets += [
        Target(f"maintain_warehouse, {n} small degraded tables, warm", "<= 0.8x the pylance loop (issue 42)",
               f"{together.ratio:.2f}x (PySpark), {sql_warm.ratio:.2f}x (spark-sql)",
               max(together.ratio, sql_warm.ratio) <= 0.8),
        Target(f"health of {sess['health_tables']:,} tables", "< 10 s", f"{health.seconds:.2f} s",
               health.seconds < 10),
    ]


def section_streaming(s: Suite) -> None:
    """The streaming table: pylance (2 cores and 1), CALL through PySpark and spark-sql, warm and first, no-ops."""
    t = TARGETS["streaming"]
    # the small table's paths take 5 runs for a steady median; quick mode only shows each path
    # works (tests/test_benchmark.py, in every CI run): one
    repeat_small = s.repeat if s.quick else max(s.repeat, 5)
    warmup = 1 if s.quick else 3  # spark-sql's untimed CALLs before the timed ones
    py = run_probe(s.work, "pylance", table="streaming", options={"target_rows_per_fragment": t},
                   repeat=repeat_small, cores=None)
    anchor = s.add("streaming", "pylance compact_files, in-process (2 cores)", py["times"])
    # what a pylance script pays: the table's open too (a CALL opens it; the row above does not)
    s.add("streaming", "pylance open + compact_files, in-process (2 cores)", py["times_open"], anchor)
    py1 = run_probe(s.work, "pylance", table="streaming", options={"target_rows_per_fragment": t},
                    repeat=repeat_small, cores=1)
    anchor1 = s.add("streaming", "pylance compact_files, in-process, 1 core", py1["times"])
    warm = run_probe(s.work, "session", master="local[2]", runs=[
        {"table": "streaming", "kind": "sql", "repeat": repeat_small},
        {"table": "streaming", "kind": "api", "repeat": repeat_small},
        {"table": "streaming", "kind": "noop", "repeat": repeat_small}])["runs"]
    sql_warm = s.add("streaming", "CALL (PySpark spark.sql), warm, local[2]", warm[0]["times"], anchor)
    api_warm = s.add("streaming", "PySpark compact(), warm, local[2]", warm[1]["times"], anchor)
    noop = s.add("streaming", "CALL, warm no-op", warm[2]["times"])
    check_layout(warm[0]["layout"], py["layout"], "CALL")
    # The same warm CALL with every rewrite as a Spark job (what a cluster does by default):
    # the cost of the job that engineRewrite.maxBatchBytes saves a small table in local mode.
    job = run_probe(s.work, "session", master="local[2]", conf={"spark.lance.compact.engineRewrite.maxBatchBytes": "0"},
                    runs=[{"table": "streaming", "kind": "sql", "repeat": repeat_small}])["runs"]
    s.add("streaming", "CALL, warm, local[2], rewrite as a Spark job", job[0]["times"], anchor)
    check_layout(job[0]["layout"], py["layout"], "CALL (Spark job)")
    one = run_probe(s.work, "session", master="local[1]", runs=[
        {"table": "streaming", "kind": "sql", "repeat": repeat_small}])["runs"]
    s.add("streaming", "CALL, warm, local[1]", one[0]["times"], anchor1)
    # spark-sql's rows against pylance runs just before and just after them: this machine's
    # speed drifts by tens of percent within minutes, and the section's first pylance row was
    # measured a minute or more earlier.
    def pylance_around(what: str, run: Callable[[], dict]) -> tuple[dict, Row]:
        """``run()``'s answer, and pylance timed just before and just after it (one row)."""
        times = run_probe(s.work, "pylance", table="streaming", options={"target_rows_per_fragment": t},
                          repeat=repeat_small, cores=None)["times"]
        out = run()
        times += run_probe(s.work, "pylance", table="streaming", options={"target_rows_per_fragment": t},
                           repeat=repeat_small, cores=None)["times"]
        return out, s.add("streaming", f"pylance compact_files, just before and after {what}", times)

    cli, around = pylance_around("spark-sql's runs", lambda: spark_sql(s.work, "streaming", plugin=True,
                                                                         warm=repeat_small, warmup=warmup))
    check_layout(cli["layout"], py["layout"], "spark-sql CALL")
    first = s.add("streaming", "spark-sql: first statement of a fresh session", [cli["first"]], around,
                  note=f"whole spark-sql process {cli['whole']:.1f} s")
    cli_warm = s.add("streaming", "spark-sql: CALL, warm", cli["warm"], around)
    s.add("streaming", "spark-sql: CALL, warm no-op", [cli["noop"]])
    # The driver JVM's JIT compiler is still at work during a spark-sql process's first dozens
    # of statements (measured: 0.23 s of JVM CPU per warm CALL, 0.125 s of it C2's compiler
    # threads, on 2 cores); C1 alone (docs/deployment.md, short scheduled runs) leaves the
    # cores to the rewrite.
    c1, around = pylance_around("the C1 runs", lambda: spark_sql(
        s.work, "streaming", plugin=True, warm=repeat_small, warmup=warmup,
        extra=("--driver-java-options", "-XX:TieredStopAtLevel=1")))
    check_layout(c1["layout"], py["layout"], "spark-sql CALL (C1)")
    s.add("streaming", "spark-sql, C1 JIT only: first statement", [c1["first"]], around,
          note=f"whole spark-sql process {c1['whole']:.1f} s")
    s.add("streaming", "spark-sql, C1 JIT only: CALL, warm", c1["warm"], around)
    cold = spark_sql(s.work, "streaming", plugin=False, warm=0, warmup=0)
    s.add("streaming", "spark-sql: first statement, no EnginePlugin", [cold["first"]], anchor,
          note=f"whole spark-sql process {cold['whole']:.1f} s")
    pyspark_warm = max(sql_warm.ratio, api_warm.ratio)
    s.targets += [
        Target("warm CALL, streaming table, PySpark", "<= 1.0x pylance compact_files (issue 42)",
               f"{sql_warm.ratio:.2f}x (spark.sql), {api_warm.ratio:.2f}x (compact())", pyspark_warm <= 1.0),
        Target("warm CALL, streaming table, spark-sql", "<= 1.2x pylance compact_files (issue 42)",
               f"{cli_warm.ratio:.2f}x", cli_warm.ratio <= 1.2),
        Target("first CALL of a fresh spark-sql", "<= 1.0 s (issue 42)", f"{first.seconds:.2f} s with EnginePlugin, "
               f"{cold['first']:.2f} s without", first.seconds <= 1.0),
        Target("warm no-op CALL", "< 0.25 s", f"{noop.seconds:.3f} s (PySpark), {cli['noop']:.3f} s (spark-sql)",
               max(noop.seconds, cli["noop"]) < 0.25),
    ]


def section_big(s: Suite) -> None:
    """The big table: pylance and a warm CALL (and maintain_warehouse), bytes moved against the disk's speed."""
    t = TARGETS["big"]
    py = run_probe(s.work, "pylance", table="big", options={"target_rows_per_fragment": t},
                   repeat=s.repeat, cores=None)
    anchor = s.add("big", "pylance compact_files, in-process (2 cores)", py["times"])
    warm, together = run_probe(s.work, "session", master="local[2]", runs=[
        {"table": "big", "kind": "sql", "repeat": s.repeat},
        {"table": "big", "kind": "warehouse", "repeat": s.repeat}])["runs"]
    call = s.add("big", "CALL, warm, local[2]", warm["times"], anchor)
    s.add("big", "CALL maintain_warehouse, warm, local[2]", together["times"], anchor,
          note="the big table in a shared job: its tasks still one partition each")
    check_layout(together["layout"], py["layout"], "maintain_warehouse on the big table")
    check_layout(warm["layout"], py["layout"], "CALL on the big table")
    moved = (warm["rows"][0]["bytes_read"] or 0) + (warm["rows"][0]["bytes_written"] or 0)
    bw = run_probe(s.work, "bandwidth", mb=256 if s.quick else 2048)
    ideal = ((warm["rows"][0]["bytes_read"] or 0) / (bw["read_mb_s"] * 2**20)
             + (warm["rows"][0]["bytes_written"] or 0) / (bw["write_mb_s"] * 2**20))
    s.extra["bandwidth"] = {**bw, "bytes_moved": moved, "call_mb_s": moved / 2**20 / call.seconds,
                          "share_of_sequential": ideal / call.seconds}
    print(f"  big        bytes moved {moved / 2**20:,.0f} MiB: {moved / 2**20 / call.seconds:,.0f} MiB/s; "
          f"sequential read {bw['read_mb_s']:,.0f} MiB/s, write {bw['write_mb_s']:,.0f} MiB/s: "
          f"the CALL runs at {100 * ideal / call.seconds:.0f}% of the disk's sequential speed", flush=True)
    s.targets.append(Target("warm CALL, big table", "<= 1.15x pylance", f"{call.ratio:.2f}x", call.ratio <= 1.15))


def section_binary(s: Suite) -> None:
    """reencode against try_binary_copy, pylance and CALL."""
    t = TARGETS["binary"]
    re_py = run_probe(s.work, "pylance", table="binary", options={"target_rows_per_fragment": t},
                      repeat=s.repeat, cores=None)
    bc_py = run_probe(s.work, "pylance", table="binary", options={
        "target_rows_per_fragment": t, "compaction_mode": "try_binary_copy"}, repeat=s.repeat, cores=None)
    anchor = s.add("binary", "pylance compact_files, reencode", re_py["times"])
    s.add("binary", "pylance compact_files, try_binary_copy", bc_py["times"], anchor)
    warm = run_probe(s.work, "session", master="local[2]", runs=[
        {"table": "binary", "kind": "sql", "repeat": s.repeat},
        {"table": "binary", "kind": "sql", "repeat": s.repeat,
         "options": {"compaction_mode": "try_binary_copy"}}])["runs"]
    reenc = s.add("binary", "CALL, reencode", warm[0]["times"], anchor)
    binary = s.add("binary", "CALL, try_binary_copy", warm[1]["times"], anchor)
    check_layout(warm[1]["layout"], bc_py["layout"], "CALL try_binary_copy")
    speedup = reenc.seconds / binary.seconds
    s.targets.append(Target("binary copy vs reencode (CALL)", ">= 2x faster", f"{speedup:.2f}x", speedup >= 2))


def section_memory(s: Suite) -> None:
    """Peak memory of a fresh session's CALL, on the big table and one 4x bigger."""
    m1 = run_probe(s.work, "memory", table="big")
    m4 = run_probe(s.work, "memory", table="big4x")
    s.extra["memory"] = {"big": m1, "big4x": m4}
    for name, m in (("big", m1), ("big4x", m4)):
        s.add("memory", f"CALL on {name} (fresh session): {m['tasks']} tasks", [m["seconds"]],
              note=f"peak RSS: driver JVM {m['driver_jvm_mb']} MB, engine {m['engine_mb']} MB, "
                   f"Python worker {m['python_worker_mb']} MB")
    growth = m4["python_worker_mb"] / max(1, m1["python_worker_mb"]) - 1
    print(f"  memory     peak Python worker: {m1['python_worker_mb']} MB -> {m4['python_worker_mb']} MB "
          f"({100 * growth:+.0f}%); driver JVM {m1['driver_jvm_mb']} -> {m4['driver_jvm_mb']} MB; "
          f"engine {m1['engine_mb']} -> {m4['engine_mb']} MB", flush=True)
    s.targets.append(Target("executor memory, big -> 4x table", "within 20%",
                            f"Python worker {m1['python_worker_mb']} -> {m4['python_worker_mb']} MB "
                            f"({100 * growth:+.0f}%)", abs(growth) <= 0.2))


def section_scaling(s: Suite) -> None:
    """The same one task at the end of 1,000 and of 50,000 fragments."""
    s1 = run_probe(s.work, "scaling", table="frags1k", repeat=s.repeat)
    s50 = run_probe(s.work, "scaling", table="frags50k", repeat=s.repeat)
    a1 = s.add("scaling", f"pylance, one task, table of {s1['fragments']:,} fragments", s1["pylance"])
    c1 = s.add("scaling", f"CALL, one task, table of {s1['fragments']:,} fragments", s1["call"], a1)
    a50 = s.add("scaling", f"pylance, one task, table of {s50['fragments']:,} fragments", s50["pylance"])
    c50 = s.add("scaling", f"CALL, one task, table of {s50['fragments']:,} fragments", s50["call"], a50)
    growth = c50.seconds / c1.seconds - 1
    s.targets.append(Target("per-task cost, 1,000 -> 50,000 fragments", "within 20%",
                            f"{c1.seconds:.3f} -> {c50.seconds:.3f} s ({100 * growth:+.0f}%; pylance "
                            f"{100 * (a50.seconds / a1.seconds - 1):+.0f}%)", growth <= 0.2))


def section_planning(s: Suite) -> None:
    """plan_compaction against pylance's Compaction.plan on 100,000 fragments."""
    import lance
    from lance.optimize import Compaction

    ds = lance.dataset(str(s.work / "tables" / "frags100k.lance"))
    times = []
    runs = s.repeat if s.quick else max(s.repeat, 3)
    for _ in range(runs):
        t0 = time.perf_counter()
        Compaction.plan(ds, {"target_rows_per_fragment": TARGETS["frags100k"]})
        times.append(time.perf_counter() - t0)
    anchor = s.add("planning", f"pylance Compaction.plan, {len(ds.get_fragments()):,} fragments", times)
    warm = run_probe(s.work, "session", master="local[2]", runs=[
        {"table": "frags100k", "kind": "plan", "repeat": runs}])["runs"][0]
    plan = s.add("planning", f"CALL plan_compaction, {len(ds.get_fragments()):,} fragments", warm["times"],
                 anchor, note=f"{warm['rows'][0]['tasks']} tasks over {warm['rows'][0]['fragments']:,} fragments")
    s.targets.append(Target("planning 100,000 fragments in CALL", "< 5 s", f"{plan.seconds:.2f} s",
                            plan.seconds < 5))



SECTION_RUNS = {"streaming": section_streaming, "big": section_big, "binary": section_binary,
                "memory": section_memory, "scaling": section_scaling, "planning": section_planning,
                "warehouse": section_warehouse}


def run_suite(a: argparse.Namespace) -> tuple[list[Row], list[Target], dict]:
    """Build the tables the chosen sections need, then run the sections in order."""
    work = Path(a.work)
    size = "quick" if a.quick else "full"
    sections = a.only or SECTIONS
    info = build_tables(work, size, sorted({t for s in sections for t in NEEDS[s]}))
    if "warehouse" in sections:
        build_warehouse(work, size)
    suite = Suite(work, a.quick, a.repeat or (1 if a.quick else 3),
                  extra={"tables": info, "cpus": len(os.sched_getaffinity(0)), "size": size})
    for name in SECTIONS:
        if name in sections:
            SECTION_RUNS[name](suite)
    return suite.rows, suite.targets, suite.extra


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny tables: checks the suite works (CI)")
    p.add_argument("--only", nargs="+", choices=SECTIONS)
    p.add_argument("--repeat", type=int, help="runs per timed path (default 3; quick: 1)")
    p.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "lance-compact-bench"),
                   help="tables (kept between runs) and copies")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--probe", help=argparse.SUPPRESS)
    p.add_argument("--args", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.probe:
        print("PROBE " + json.dumps(PROBES[a.probe](Path(a.work), **json.loads(a.args))), flush=True)
        return 0
    if a.quick:
        a.work = str(Path(a.work) / "quick")
    started = time.time()
    print(f"lance-spark-compact benchmark ({'quick' if a.quick else 'full'}), "
          f"{len(os.sched_getaffinity(0))} CPUs, work folder {a.work}", flush=True)
    rows, targets, extra = run_suite(a)
    if a.quick:
        print("\nquick mode: tiny tables; the figures show the suite works, the targets are for the full run")
    print()
    print(f"{'section':10} {'path':58} {'median s':>9} {'ratio':>7}  runs / note")
    for r in rows:
        ratio = f"{r.ratio:6.2f}x" if r.ratio is not None else "       "
        runs = ", ".join(f"{x:.3f}" for x in r.runs)
        print(f"{r.section:10} {r.path:58} {r.seconds:9.3f} {ratio}  [{runs}] {r.note}")
    print("\nratio: median / the median of the section's pylance path on the same data at equal cores "
          "(local[1] against pylance pinned to 1 core)")
    print("\ntargets:")
    for t in targets:
        print(f"  {'met    ' if t.met else 'NOT met'}  {t.name}: {t.goal}; measured {t.measured}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "results-quick" if a.quick else "results"
    (out / f"{name}.json").write_text(json.dumps(
        {"rows": [asdict(r) for r in rows], "targets": [asdict(t) for t in targets], **extra,
         "seconds": time.time() - started}, indent=1))
    chart.draw(rows, targets, out / f"{name}.svg")
    print(f"\nwrote {out / (name + '.json')} and {out / (name + '.svg')} in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
