"""The driver's cost per fragment (issue 45): tables of N fragments of 10 rows (made as the
issue made them: ``write_fragments`` and one Append commit), and in one run, per size,

* ``CALL lance.plan_compaction`` (target 1,048,576), ``CALL lance.describe_layout``,
  ``lance.system.table_health`` and ``maintenance_history`` (filtered to the table), the
  ``fragments`` and ``versions`` metadata tables, all through a warm PySpark session,
  against pylance's own ``Compaction.plan`` in this process (the anchor of every ratio);
* with ``--compact``: ``CALL lance.compact`` on a fresh copy against ``compact_files`` on
  another (sizes up to ``--compact-max``), the content checked equal;
* the engine's and the driver JVM's peak resident set (VmHWM) after the run.

Each step is also run on a table of 10 fragments: that is its fixed cost (the statement,
Spark's and the engine's round trip), taken off before the ratio to pylance's planner.

``--deletions``: a tenth of the fragments get a deletion file (a row of each); ``--index``: a
BTREE on ``id`` covers the table. Tables are kept in ``--work`` between runs.

    source bin/env.sh && .venv/bin/python benchmarks/scale_fragments.py --sizes 10k          # a check
    .venv/bin/python benchmarks/scale_fragments.py --sizes 10k,100k,300k --compact --repeat 3

Absolute times on a shared machine drift; the ratios are against pylance in the same run.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from warehouse_scale import timed  # this folder is on the path when the script runs

ROOT = Path(__file__).resolve().parents[1]
TARGET = 1_048_576
FIXED = 10


def size_of(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("km")) * scale)


def build(uri: str, fragments: int, deletions: bool, index: bool, plain: Path | None = None) -> None:
    """``fragments`` fragments of 10 rows (ids 0..): one written as the table, the rest by
    ``write_fragments`` and one Append commit; then the variant's deletes and index.

    With ``plain`` (the same size's table without deletions or index, already built) the
    variant is a shallow clone of its latest version: its data files are the plain table's,
    referenced, not copied (1,000,000 fragments are 4 GB on a shared disk); its manifest,
    deletion files and index are its own."""
    import lance
    import pyarrow as pa
    from lance.fragment import write_fragments

    if plain is not None and plain.exists():
        # Made under another name and renamed when whole: a build stopped half way (the
        # delete scans every file) must not be taken for the variant by the next run.
        partial = uri + ".partial"
        shutil.rmtree(partial, ignore_errors=True)
        source = lance.dataset(str(plain))
        ds = source.shallow_clone(partial, source.version)
        if deletions:
            ds = delete_in_every_tenth(ds)
        if index:
            ds.create_scalar_index("id", "BTREE")
        del ds
        Path(partial).rename(uri)
        return
    rows = fragments * 10
    data = pa.table({"id": pa.array(range(rows), pa.int64()),
                     "v": pa.array([float(i) for i in range(rows)], pa.float64())})
    lance.write_dataset(data.slice(0, 10), uri, mode="create")
    if fragments > 1:
        new = write_fragments(data.slice(10), uri, max_rows_per_file=10, schema=data.schema)
        lance.LanceDataset.commit(uri, lance.LanceOperation.Append(new), read_version=1)
    ds = lance.dataset(uri)
    if deletions:
        ds = delete_in_every_tenth(ds)  # one row in every tenth fragment
    if index:
        ds.create_scalar_index("id", "BTREE")


def delete_in_every_tenth(ds):
    """``delete("id % 100 = 5")`` without its scan of every file: fragment i holds ids
    10i..10i+9 (:func:`build`), so the row is in the fragments whose id is a multiple of 10;
    each of those is opened alone and the deletions land in one Delete commit. (A scan of
    1,000,000 files of 10 rows took longer than 37 minutes on the shared machine.)"""
    import lance

    predicate = "id % 100 = 5"
    chosen = [f for f in ds.get_fragments() if f.fragment_id % 10 == 0]
    updated = [f.delete(predicate) for f in chosen]
    op = lance.LanceOperation.Delete(updated_fragments=updated, deleted_fragment_ids=[], predicate=predicate)
    return lance.LanceDataset.commit(ds.uri, op, read_version=ds.version)


def table_path(work: Path, n: int, deletions: bool, index: bool) -> Path:
    suffix = ("_del" if deletions else "") + ("_idx" if index else "")
    return work / "wh" / "db" / f"f{n}{suffix}.lance"


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def reset_peak_rss(pid: int) -> None:
    """Start ``pid``'s VmHWM again from its current resident set (Linux ``clear_refs`` 5; the
    process's owner or root)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


def compact_files_alone(path: Path) -> dict[str, float]:
    """pylance's ``compact_files`` of ``path`` in a fresh process of its own: its seconds (open
    and compaction, as timed in-process before) and that process's peak RSS (its VmHWM:
    ``getrusage``'s ``ru_maxrss`` is kept across ``execve``, so it would say this process's)."""
    code = ("import json, sys, time, lance\n"
            "t = time.perf_counter()\n"
            "lance.dataset(sys.argv[1]).optimize.compact_files(target_rows_per_fragment=int(sys.argv[2]))\n"
            "seconds = time.perf_counter() - t\n"
            "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
            "print(json.dumps({'seconds': seconds, 'peak_mb': int(hwm.split()[1]) / 1024}))")
    out = subprocess.run([sys.executable, "-c", code, str(path), str(TARGET)], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def engine_pids(jvm_pid: int) -> list[int]:
    """The engine processes the session's JVM started."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if "lance_compact.engine" in cmd and ppid == jvm_pid:
            pids.append(int(proc.name))
    return pids


def same_content(a: str, b: str) -> bool:
    import lance
    x = lance.dataset(a).to_table().sort_by("id")
    y = lance.dataset(b).to_table().sort_by("id")
    return x.equals(y)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10k", help="comma-separated fragment counts (10k,100k,300k,1M)")
    p.add_argument("--deletions", action="store_true", help="a deletion file on a tenth of the fragments")
    p.add_argument("--index", action="store_true", help="a BTREE index on id")
    p.add_argument("--compact", action="store_true", help="also CALL lance.compact against compact_files")
    p.add_argument("--compact-max", default="100k", help="the largest size compacted (each run copies the table twice)")
    p.add_argument("--budget-fragments", type=int, default=0,
                   help="also compact a fresh copy in budgeted steps (io_bounded, max_rewrite_fragments this many, "
                        "partial progress), each committed, timed and counted")
    p.add_argument("--budget-steps", type=int, default=2, help="how many budgeted steps")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--skip", default="", help="comma-separated steps not run (e.g. 'fragments table (count)')")
    p.add_argument("--work", default="/tmp/lance-compact-scale", help="where tables are built and kept")
    p.add_argument("--out", help="write the figures as JSON here")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting of the session (e.g. spark.lance.compact.engine.heldTableBytes=1g)")
    a = p.parse_args()

    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT / "python"))
    import lance
    from lance.optimize import Compaction
    from conftest import lance_session  # the tests' local session: same catalog settings

    work = Path(a.work)
    # The fixed cost: every step on a table of 10 fragments (a statement's own cost, Spark's and
    # the engine's round trip), taken off before the ratio to pylance's planner.
    sizes = [FIXED] + [size_of(s) for s in a.sizes.split(",")]
    for n in sizes:
        path = table_path(work, n, a.deletions, a.index)
        if not path.exists():
            t = time.perf_counter()
            path.parent.mkdir(parents=True, exist_ok=True)
            build(str(path), n, a.deletions, a.index, table_path(work, n, False, False))
            print(f"built {path.name}: {n:,} fragments in {time.perf_counter() - t:.0f} s", flush=True)

    spark = lance_session("local[2]", "lance-compact-scale", str(work / "wh"),
                          {"spark.lance.compact.engine.log": str(work / "engine.log"),
                           **dict(c.split("=", 1) for c in a.conf)})
    spark.sql("SELECT * FROM lance.system.table_health WHERE namespace = 'none'").collect()  # warm
    jvm = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    figures: dict[str, dict] = {}
    compaction_memory: dict[str, dict] = {}
    engine_peaks: list[float] = []  # the engines' peaks before each reset (reset_peak_rss)
    for n in sizes:
        path = table_path(work, n, a.deletions, a.index)
        name = path.name[:-len(".lance")]
        ds = lance.dataset(str(path))
        plan_options = {"target_rows_per_fragment": TARGET}
        steps = {
            "plan_compaction": f"CALL lance.plan_compaction(table => 'db.{name}', target_rows_per_fragment => {TARGET})",
            "describe_layout": f"CALL lance.describe_layout(table => 'db.{name}')",
            "system.table_health": f"SELECT * FROM lance.system.table_health WHERE namespace = 'db' AND `table` = '{name}'",
            "system.maintenance_history": ("SELECT * FROM lance.system.maintenance_history "
                                           f"WHERE namespace = 'db' AND `table` = '{name}'"),
            "versions table": f"SELECT * FROM lance.db.{name}.versions",
            # answered by the engine in one row (the aggregates are pushed to the scan)
            "fragments table (count)": f"SELECT count(*), sum(live_rows) FROM lance.db.{name}.fragments",
            # a row per fragment to the JVM (a filter keeps the aggregate in Spark)
            "fragments table (rows)": f"SELECT count(*) FROM lance.db.{name}.fragments WHERE live_rows >= 0",
        }
        for step in filter(None, a.skip.split(",")):
            steps.pop(step.strip(), None)
        row: dict[str, float] = {}
        row["pylance Compaction.plan"] = med(timed(lambda: Compaction.plan(lance.dataset(str(path)), plan_options),
                                                   a.repeat))
        first = True
        for step, sql in steps.items():
            # warm: the table open in the engine worker (its session or its held table)
            t = time.perf_counter()
            spark.sql(sql).collect()
            if first:  # the worker had another table open: this one's manifest is read
                row[f"{step}, the table's first statement"] = time.perf_counter() - t
                first = False
            row[step] = med(timed(lambda: spark.sql(sql).collect(), a.repeat))
        row["pylance Compaction.plan (after)"] = med(timed(
            lambda: Compaction.plan(lance.dataset(str(path)), plan_options), a.repeat))
        if a.compact and n <= size_of(a.compact_max):
            ours, theirs = work / "wh" / "db" / f"{name}_c.lance", work / "pylance" / f"{name}.lance"
            for copy in (ours, theirs):
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(path, copy)
            pylance = compact_files_alone(theirs)
            row["pylance compact_files"] = pylance["seconds"]
            engines = engine_pids(jvm)
            for pid in engines:
                engine_peaks.append(peak_rss_mb(pid) or 0)
                reset_peak_rss(pid)
            t = time.perf_counter()
            spark.sql(f"CALL lance.compact(table => 'db.{name}_c', target_rows_per_fragment => {TARGET})").collect()
            row["compact"] = time.perf_counter() - t
            # the memory of the same compaction, side by side: Lance's own process against the
            # engine worker that ran the CALL (its peak since the reset)
            compaction_memory[f"{n:,} fragments"] = {
                "compact_files process peak RSS MB": pylance["peak_mb"],
                "engine peak RSS MB during the CALL": max((peak_rss_mb(p) or 0 for p in engines), default=0)}
            assert same_content(str(ours), str(theirs)), "the compacted tables differ"
            assert len(lance.dataset(str(ours)).get_fragments()) == len(lance.dataset(str(theirs)).get_fragments())
            for copy in (ours, theirs):
                shutil.rmtree(copy, ignore_errors=True)
        if a.budget_fragments and n > FIXED:
            ours = work / "wh" / "db" / f"{name}_b.lance"
            shutil.rmtree(ours, ignore_errors=True)
            shutil.copytree(path, ours)
            for step in range(1, a.budget_steps + 1):
                before = len(lance.dataset(str(ours)).get_fragments())
                t = time.perf_counter()
                spark.sql(f"CALL lance.compact(table => 'db.{name}_b', target_rows_per_fragment => {TARGET}, "
                          f"strategy => 'io_bounded', options => map('max_rewrite_fragments', '{a.budget_fragments}'))").collect()
                row[f"budgeted step {step} ({before:,} fragments before, "
                    f"{len(lance.dataset(str(ours)).get_fragments()):,} after)"] = time.perf_counter() - t
            # the ids (no row lost or doubled): reading every column of a million fragments twice
            # took longer than the steps
            assert lance.dataset(str(ours)).to_table(columns=["id"]).sort_by("id").equals(
                lance.dataset(str(path)).to_table(columns=["id"]).sort_by("id")), "the budgeted steps changed the rows"
            shutil.rmtree(ours, ignore_errors=True)
        anchor = (row["pylance Compaction.plan"] + row["pylance Compaction.plan (after)"]) / 2
        fixed = figures.get(str(FIXED), {})
        print(f"\n{n:,} fragments{' (deletions on a tenth)' if a.deletions else ''}"
              f"{' (BTREE index)' if a.index else ''}, medians of {a.repeat}"
              f"{' (the compaction: one run each)' if 'compact' in row else ''}:")
        print("| step | seconds | less the step on 10 fragments | that, x pylance's Compaction.plan |")
        print("|---|---:|---:|---:|")
        for step, seconds in row.items():
            if step.startswith("budgeted"):
                print(f"| {step} | {seconds:.2f} | | |")
                continue
            if step == "compact":
                print(f"| {step} | {seconds:.2f} | | {seconds / row['pylance compact_files']:.2f} x compact_files |")
                continue
            less = seconds - fixed.get(step, 0.0) if not step.startswith("pylance") else seconds
            print(f"| {step} | {seconds:.2f} | {less:.2f} | {less / anchor:.1f} |")
        figures[str(n)] = row
        del ds
    engines = engine_pids(jvm)
    memory = {"driver JVM peak RSS MB": peak_rss_mb(jvm),
              "engine peak RSS MB": max([*(peak_rss_mb(p) or 0 for p in engines), *engine_peaks], default=None)}
    print("\n" + ", ".join(f"{k}: {v:.0f}" for k, v in memory.items() if v is not None))
    for size, peaks in compaction_memory.items():
        print(f"the compaction at {size}: " + ", ".join(f"{k} {v:,.0f}" for k, v in peaks.items()))
    memory["compaction"] = compaction_memory
    figures["memory"] = memory
    if a.out:
        Path(a.out).write_text(json.dumps(figures, indent=1))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
